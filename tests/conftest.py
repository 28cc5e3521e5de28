"""Shared fixtures: a tiny training config, the real CLI in a subprocess, a trained run."""

from __future__ import annotations

import contextlib
import dataclasses
import importlib.util
import io
import json
import os
import re
import runpy
import shutil
import subprocess
import sys
import tempfile
import types
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest
from filelock import FileLock

REPO = Path(__file__).resolve().parents[1]
DEFAULT_CONFIG = REPO / "configs" / "default.py"

# configs/default.py shrunk to seconds: reverse a binary string of length 1-8, d_model 16.
TINY_OVERRIDES = (
    "--config.task.name=reverse_string",
    "--config.data.train_lengths=(1, 8)",
    "--config.data.batch_size=16",
    "--config.data.buckets=(8, 16, 32)",
    "--config.data.eval_samples=16",
    "--config.model.d_model=16",
    "--config.model.num_heads=2",
    "--config.model.num_encoder_layers=1",
    "--config.model.num_decoder_layers=1",
    "--config.model.d_ff=32",
    "--config.train.steps=40",
    "--config.train.warmup_steps=5",
    "--config.train.learning_rate=3e-3",
    "--config.train.log_every=10",
    "--config.train.eval_every=20",
    "--config.train.eval_batches=2",
    "--config.train.checkpoint_every=20",
    "--config.train.eval_lengths=(12,)",
    "--config.eval.lengths=(4, 8, 12, 16)",
    "--config.eval.batch_size=16",
)


def tiny_overrides(**changes: object) -> list[str]:
    """``TINY_OVERRIDES`` with some keys replaced, e.g. ``tiny_overrides(**{'train.steps': 8})``."""
    overrides = {text.split("=", 1)[0]: text for text in TINY_OVERRIDES}
    for key, value in changes.items():
        overrides[f"--config.{key}"] = f"--config.{key}={value}"
    return list(overrides.values())


def assert_same_trained_parameters(actual: Sequence[object], expected: Sequence[object]) -> None:
    """Parameter leaves of two runs trained by different programs (an ensemble member and its
    single run) agree to rounding: each leaf within rtol 1e-5 of its norm and each value within
    rtol 1e-5 of itself or 1e-4 of its leaf's largest value.

    Adam's update has the size of the learning rate whatever the gradient's, so a parameter
    whose gradient is near zero carries the two programs' rounding at the scale of its leaf's
    updates rather than of its own value (a value of 0.02 was 1.7e-6 apart in one build)."""
    assert len(actual) == len(expected)
    for a, b in zip(actual, expected, strict=True):
        a, b = np.asarray(a), np.asarray(b)
        assert a.shape == b.shape, (a.shape, b.shape)
        scale = float(np.max(np.abs(b), initial=0.0))
        assert np.linalg.norm(a - b) <= 1e-5 * np.linalg.norm(b) + 1e-12, (
            f"leaf of shape {b.shape}: |a - b| = {np.linalg.norm(a - b):.3g}, "
            f"|b| = {np.linalg.norm(b):.3g}")
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-4 * scale)


def cli_command() -> list[str]:
    """The installed ``pe-research`` console script (or the module when not installed)."""
    script = Path(sys.executable).parent / "pe-research"
    return [str(script)] if script.exists() else [sys.executable, "-m", "pe_research.cli"]


# Tests compile hundreds of tiny programs and run each for a few steps, so compile time is most
# of the suite's time. XLA's CPU backend at optimization level 0, with its older element-wise
# emitters instead of the fusion emitters, compiles a tiny program in a fifth of the time and
# gives the same losses; each program's machine code built in one piece rather than split for
# parallel compilation spares two processes on two cores the threads of thousands of compiles
# (docs/performance.md). Every process of the session, children included, uses these, so runs
# compared across processes are compiled alike. Claims that two different programs agree bit
# for bit hold at XLA's default settings, which users run, and not always at these: their tests
# run there (``ran_at_default_optimization``).
TEST_XLA_FLAGS = ("--xla_backend_optimization_level=0 --xla_cpu_use_fusion_emitters=false "
                  "--xla_cpu_parallel_codegen_split_count=1")
DEFAULT_OPTIMIZATION = "PE_RESEARCH_TESTS_DEFAULT_OPTIMIZATION"
if not os.environ.get(DEFAULT_OPTIMIZATION) and TEST_XLA_FLAGS not in os.environ.get(
        "XLA_FLAGS", ""):  # xdist workers inherit it
    os.environ["XLA_FLAGS"] = f"{os.environ.get('XLA_FLAGS', '')} {TEST_XLA_FLAGS}".strip()


DEFAULT_OPTIMIZATION_MARK = "default_optimization"


def ran_at_default_optimization(request: pytest.FixtureRequest) -> bool:
    """Run the calling test (marked ``default_optimization``) in a child pytest compiled at
    XLA's default optimization level; True once it passed there (the caller returns), False
    inside that child (it goes on).

    The session's marked tests all run in one child, started by the first of them to run (one
    Python start; the programs they share compiled once); the others read its outcomes."""
    if os.environ.get(DEFAULT_OPTIMIZATION):
        return False
    assert request.node.get_closest_marker(DEFAULT_OPTIMIZATION_MARK), (
        f"mark {request.node.nodeid} with @pytest.mark.{DEFAULT_OPTIMIZATION_MARK}")
    outcomes, output = default_optimization_outcomes(request)
    outcome = outcomes.get(request.node.nodeid, "not run")
    assert outcome == "PASSED", f"at XLA's default optimization ({outcome}):\n{output[-5000:]}"
    return True


def session_root(tmp_path_factory: pytest.TempPathFactory, worker_id: str) -> Path:
    """The temporary directory the whole session shares: the base temp, or under xdist the
    folder holding every worker's."""
    base = tmp_path_factory.getbasetemp()
    return base if worker_id == "master" else base.parent


def default_optimization_outcomes(request: pytest.FixtureRequest) -> tuple[dict[str, str], str]:
    """``{nodeid: 'PASSED' | 'FAILED' | ...}`` of the session's ``default_optimization`` tests
    run in one child pytest, and its output; run once per session, shared through a file."""
    root = session_root(request.getfixturevalue("tmp_path_factory"),
                        request.getfixturevalue("worker_id"))
    saved = root / "default_optimization.json"
    with FileLock(str(root / "default_optimization.lock")):
        if not saved.exists():
            nodeids = [item.nodeid for item in request.session.items
                       if item.get_closest_marker(DEFAULT_OPTIMIZATION_MARK)]
            env = {**subprocess_env(), DEFAULT_OPTIMIZATION: "1"}
            env.pop("XLA_FLAGS")
            command = [sys.executable, "-m", "pytest", "-q", "-rA", "-p", "no:cacheprovider",
                       "-p", "no:xdist", "--basetemp", str(root / "default_optimization"),
                       *nodeids]
            result = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True,
                                    timeout=1800)
            outcomes = dict(reversed(match.groups()) for match in re.finditer(
                r"^(PASSED|FAILED|ERROR) (\S+)", result.stdout, re.MULTILINE))
            saved.write_text(json.dumps({"outcomes": outcomes, "output": result.stdout}))
        found = json.loads(saved.read_text())
    return found["outcomes"], found["output"]


# One test session's processes (xdist workers and the children they start) share compiled
# executables through JAX's persistent cache: most tests compile the same tiny model. The cache
# starts empty in every session, as on a CI machine, so no run is timed against a warm one.
CACHE_ENV = "JAX_COMPILATION_CACHE_DIR"
OWN_CACHE = pytest.StashKey[str]()


def pytest_configure(config: pytest.Config) -> None:
    """The session's compilation cache: made by the controller (workers inherit its
    environment) and switched on in this process too."""
    if not hasattr(config, "workerinput") and CACHE_ENV not in os.environ:
        os.environ[CACHE_ENV] = tempfile.mkdtemp(prefix="pe_research_tests_jax_cache_")
        os.environ["JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"] = "0.1"
        config.stash[OWN_CACHE] = os.environ[CACHE_ENV]
    import jax

    jax.config.update("jax_compilation_cache_dir", os.environ[CACHE_ENV])
    jax.config.update("jax_persistent_cache_min_compile_time_secs",
                      float(os.environ.get("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", 0.1)))


def pytest_unconfigure(config: pytest.Config) -> None:
    """Remove the compilation cache this session made."""
    if OWN_CACHE in config.stash:
        shutil.rmtree(config.stash[OWN_CACHE], ignore_errors=True)


def experiment_path(name: str) -> Path:
    """``experiments/<name>.py``, or a study's ``experiments/studies/<topic>/<name>.py`` (name
    it ``<topic>/<name>`` where two studies have a script of that name)."""
    found = [REPO / "experiments" / f"{name}.py", REPO / "experiments" / "studies" / f"{name}.py",
             *sorted((REPO / "experiments" / "studies").glob(f"*/{name}.py"))]
    return next(path for path in found if path.is_file())


def load_experiment(name: str) -> types.ModuleType:
    """The script ``experiments/<name>.py`` imported as a module (its ``main`` not run)."""
    spec = importlib.util.spec_from_file_location(name, experiment_path(name))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def chdir_with_corpus(directory: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Work in ``directory``, holding ``data/python_stdlib.txt`` (the file the language-model
    config files name) as a 40,000-character slice of the standard library's source."""
    from pe_research.tasks.corpora import stdlib_sources

    corpus = directory / "data" / "python_stdlib.txt"
    corpus.parent.mkdir(parents=True, exist_ok=True)
    text = "".join(path.read_text(encoding="utf-8", errors="replace")
                   for path in stdlib_sources()[:8])
    corpus.write_text(text[:40_000])
    monkeypatch.chdir(directory)
    return corpus


def subprocess_env(**extra: str) -> dict[str, str]:
    """The test environment for child processes: the session's XLA flags plus any in
    ``extra["XLA_FLAGS"]`` (such as a device count), never this process's device count."""
    env = {**os.environ, "WANDB_SILENT": os.environ.get("WANDB_SILENT", "true")}
    env.update(extra)
    flags = () if os.environ.get(DEFAULT_OPTIMIZATION) else (TEST_XLA_FLAGS,)
    env["XLA_FLAGS"] = " ".join((*flags, extra["XLA_FLAGS"]) if "XLA_FLAGS" in extra else flags)
    return env


def run_train(workdir: Path, overrides: Sequence[str], *, config: Path = DEFAULT_CONFIG,
              env: dict[str, str] | None = None, timeout: float = 240,
              check: bool = True) -> subprocess.CompletedProcess:
    """``pe-research train`` in a child process; output captured."""
    command = [*cli_command(), "train", "--config", str(config), "--workdir", str(workdir),
               *overrides]
    result = subprocess.run(command, capture_output=True, text=True, timeout=timeout,
                            env=env or subprocess_env(), cwd=REPO)
    if check and result.returncode != 0:
        raise AssertionError(f"pe-research train failed ({result.returncode}):\n"
                             f"{result.stdout[-3000:]}\n{result.stderr[-5000:]}")
    return result


def train_here(workdir: Path, overrides: Sequence[str], *, config: Path = DEFAULT_CONFIG,
               check: bool = True) -> subprocess.CompletedProcess:
    """``pe-research train`` through the CLI's entry point in this process (no Python or JAX
    start, the session's compiled programs); output captured as ``run_train``'s."""
    result = cli_here("train", "--config", str(config), "--workdir", str(workdir), *overrides)
    if check and result.returncode != 0:
        raise AssertionError(f"pe-research train failed ({result.returncode}):\n"
                             f"{result.stdout[-3000:]}\n{result.stderr[-5000:]}")
    return result


def cli_here(*argv: str) -> subprocess.CompletedProcess:
    """``pe-research ARGV`` through the CLI's entry point in this process (a sweep's workers
    are still processes of their own); exit code and output captured as ``subprocess.run``'s."""
    from pe_research.cli.app import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(argv))
    return subprocess.CompletedProcess(list(argv), code, out.getvalue(), err.getvalue())


def run_script_here(script: str | Path, *args: str) -> subprocess.CompletedProcess:
    """``python SCRIPT ARGS`` (a path relative to the repository or absolute) run in this
    process from the repository, W&B off: no Python or JAX start, the session's compiled
    programs; exit code and output captured as ``subprocess.run``'s. A script's refusal in a
    real process: tests/test_cli_errors.py and tests/test_t5_max_distance.py."""
    path = REPO / script
    out, err = io.StringIO(), io.StringIO()
    argv, sys_path, environ = sys.argv, list(sys.path), dict(os.environ)
    sys.argv = [str(path), *args]
    sys.path.insert(0, str(path.parent))
    os.environ["WANDB_MODE"] = "disabled"
    code = 0
    try:
        with contextlib.chdir(REPO), contextlib.redirect_stdout(out), \
                contextlib.redirect_stderr(err):
            runpy.run_path(str(path), run_name="__main__")
    except SystemExit as exit_:
        code = exit_.code if isinstance(exit_.code, int) else (0 if exit_.code is None else 1)
    finally:
        sys.argv, sys.path[:] = argv, sys_path
        os.environ.clear()
        os.environ.update(environ)
    return subprocess.CompletedProcess([str(path), *args], code, out.getvalue(), err.getvalue())


@dataclasses.dataclass(frozen=True)
class TrainedRun:
    """A finished run of the tiny config and what `pe-research train` printed for it."""

    run_dir: Path
    stdout: str
    stderr: str  # the progress bars


@pytest.fixture(scope="session")
def trained_run(tmp_path_factory: pytest.TempPathFactory, worker_id: str) -> TrainedRun:
    """The tiny config trained for 40 steps through `pe-research train` (W&B offline).

    Checkpoints at steps 20 and 40, evaluation at 20 and 40 (in distribution and length 12).
    Trained once per test session and shared by the xdist workers through a file lock; treat
    it as read-only (copy it to change it).
    """
    root = session_root(tmp_path_factory, worker_id)
    run_dir, output = root / "trained_tiny_run", root / "trained_tiny_run.stdout"
    errors = output.with_suffix(".stderr")
    with FileLock(str(root / "trained_tiny_run.lock")):
        if not output.exists():
            env = subprocess_env()
            env.pop("WANDB_MODE", None)
            result = run_train(run_dir, tiny_overrides(**{"wandb.mode": "offline"}), env=env)
            errors.write_text(result.stderr)
            output.write_text(result.stdout)
    return TrainedRun(run_dir=run_dir, stdout=output.read_text(), stderr=errors.read_text())


# Fixtures that train a run (checked complete by tests/test_test_markers.py).
TRAINING_FIXTURES = frozenset({"trained_run", "copy_run", "analyzed", "even_pairs_run", "lm_run",
                               "uninterrupted", "selective_copy_run", "t5_run"})


# Modules holding tests of half a minute or more (processes trained, killed, signalled): run
# first, each module whole, so that the workers' last tests are short ones and neither worker
# waits long for the other at the end (xdist's worksteal splits the list and steals from its
# tail).
LONG_FIRST = ("test_compiled_step", "test_sweep_interrupts", "test_sweep", "test_demo",
              "test_preemption", "test_disk_full", "test_compile_cache", "test_multidevice",
              "test_resume", "test_ensemble")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """A test that reads a trained run is end-to-end: it is ``slow`` (``make test-fast``
    leaves it out, ``make test`` and CI run it). Modules of ``LONG_FIRST`` go first."""
    for item in items:
        if TRAINING_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.slow)
    rank = {name: i for i, name in enumerate(LONG_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.stem, len(rank)))  # stable: order kept


@pytest.fixture(scope="session")
def trained_run_dir(trained_run: TrainedRun) -> Path:
    """The run directory of ``trained_run`` (config.json, metrics.jsonl, checkpoints/, wandb/)."""
    return trained_run.run_dir
