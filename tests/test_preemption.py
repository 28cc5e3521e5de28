"""Preemption loses nothing: SIGTERM, SIGUSR1 or Ctrl-C checkpoints the step reached and stops;
the same command goes on from there and ends bit-identical to an uninterrupted run; a second
Ctrl-C stops at once; a sweep under submitit's local executor requeues itself after its
time-limit signal."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import jax
import numpy as np
import pytest
from conftest import DEFAULT_CONFIG, REPO, cli_command, subprocess_env, tiny_overrides
from sweep_files import run_params, wait_for, write_sweep

from pe_research import data
from pe_research.config import load_config
from pe_research.runs.restore import load_run
from pe_research.runs.run_dir import RunDir
from pe_research.runs.tracking import read_metrics
from pe_research.training import periodic_eval
from pe_research.training.loop import train
from pe_research.training.preemption import EXIT_CODE, INTERRUPTED_EXIT, PreemptedError

RUN = {"train.steps": 24, "train.log_every": 4, "train.eval_every": 8,
       "train.checkpoint_every": 12, "train.steps_per_call": 2, "wandb.mode": "disabled"}


def config():
    return load_config(DEFAULT_CONFIG, tiny_overrides(**RUN))


def records(run_dir) -> list[dict]:
    return [{k: v for k, v in r.items() if k not in ("train/steps_per_second", "time")}
            for r in read_metrics(run_dir)]


def params(run_dir) -> list[np.ndarray]:
    return [np.asarray(leaf) for leaf in jax.tree.leaves(load_run(run_dir, "latest").params)]


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("preemption") / "whole"
    train(config(), run_dir)
    return run_dir


def signal_at_batch(monkeypatch, data_step: int, number: int, times: int = 1) -> None:
    """Send ``number`` to this process ``times`` times while the batch of ``data_step`` is made
    (mid-call)."""
    make = data.train_batch

    def batch(task, data_cfg, seed, step, *args):
        if step == data_step:
            for _ in range(times):
                os.kill(os.getpid(), number)
        return make(task, data_cfg, seed, step, *args)

    monkeypatch.setattr(data, "train_batch", batch)


def signal_during_evaluation(monkeypatch, number: int) -> None:
    evaluate = periodic_eval.PeriodicEvaluator.__call__

    def call(self, params):
        os.kill(os.getpid(), number)
        return evaluate(self, params)

    monkeypatch.setattr(periodic_eval.PeriodicEvaluator, "__call__", call)


@pytest.fixture
def ctrl_c():
    """Ctrl-C delivered as from a terminal for the test, even where pytest was started ignoring
    SIGINT (a background job of a shell)."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


@pytest.mark.slow
@pytest.mark.parametrize(("where", "number", "stops_at"), [
    (5, signal.SIGTERM, 6),  # the second step of the call of steps 4-5: the call ends at 6
    (13, signal.SIGUSR1, 14),  # the time-limit warning, past a checkpoint and an evaluation
    ("evaluation", signal.SIGTERM, 10),  # during step 8's evaluation: the next call ends at 10
    (5, signal.SIGINT, 6),  # Ctrl-C
])
def test_a_preempted_run_goes_on_from_the_signalled_step_bit_for_bit(
        where, number, stops_at, uninterrupted, tmp_path, monkeypatch, capsys, ctrl_c):
    run_dir = tmp_path / "run"
    handler = signal.getsignal(number)
    with monkeypatch.context() as patch:
        if where == "evaluation":
            signal_during_evaluation(patch, number)
        else:
            signal_at_batch(patch, where, number)
        with pytest.raises(PreemptedError) as stopped:
            train(config(), run_dir)
    assert stopped.value.step == stops_at
    stopped_by = "interrupted" if number == signal.SIGINT else "preempted"
    assert str(stopped.value) == (f"{stopped_by} at step {stops_at} "
                                  f"({signal.Signals(number).name}); rerun the same command to "
                                  "continue")
    assert signal.getsignal(number) is handler  # the handlers are given back
    capsys.readouterr()
    train(config(), run_dir)
    assert f"from step {stops_at} (of 24)" in capsys.readouterr().out  # 0 steps recomputed
    assert records(run_dir) == records(uninterrupted)
    for got, want in zip(params(run_dir), params(uninterrupted), strict=True):
        np.testing.assert_array_equal(got, want)


def test_a_second_ctrl_c_stops_at_once_and_gives_the_handler_back(tmp_path, monkeypatch,
                                                                  ctrl_c):
    handler = signal.getsignal(signal.SIGINT)
    with monkeypatch.context() as patch:
        signal_at_batch(patch, 5, signal.SIGINT, times=2)
        with pytest.raises(KeyboardInterrupt):
            train(config(), tmp_path / "run")
    assert signal.getsignal(signal.SIGINT) is handler
    assert not [p for p in RunDir(tmp_path / "run").checkpoints.iterdir() if p.name.isdigit()]


# The command with Ctrl-C as a terminal delivers it, whether or not this process ignores SIGINT
# (an ignored signal stays ignored across exec; a default one stays default).
AS_FROM_A_TERMINAL = [sys.executable, "-c", "import os, signal, sys; "
                      "signal.signal(signal.SIGINT, signal.SIG_DFL); "
                      "os.execv(sys.argv[1], sys.argv[1:])"]


@pytest.mark.slow
@pytest.mark.parametrize(("number", "code", "stopped"), [
    (signal.SIGTERM, EXIT_CODE, "preempted"),  # as a batch system sends it
    (signal.SIGINT, INTERRUPTED_EXIT, "interrupted"),  # Ctrl-C in a terminal
])
def test_the_cli_says_one_line_and_exits_with_its_own_code(number, code, stopped, tmp_path):
    """A real signal from outside."""
    run_dir = tmp_path / "run"
    overrides = tiny_overrides(**{**RUN, "train.steps": 20_000, "train.eval_every": 0,
                                  "train.checkpoint_every": 20_000, "train.log_every": 2})
    process = subprocess.Popen([*AS_FROM_A_TERMINAL, *cli_command(), "train", "--config",
                                str(DEFAULT_CONFIG), "--workdir", str(run_dir), *overrides],
                               cwd=REPO, env=subprocess_env(), stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
    metrics = RunDir(run_dir).metrics
    wait_for(lambda: metrics.is_file() and len(metrics.read_text().splitlines()) > 5, 240)
    process.send_signal(number)
    _, err = process.communicate(timeout=240)
    assert process.returncode == code
    lines = [line for line in err.splitlines() if f"{stopped} at step" in line]
    assert len(lines) == 1 and lines[0].startswith(f"pe-research train: {stopped} at step ")
    step = int(lines[0].split("at step ")[1].split(" ")[0])
    assert step in [int(p.name) for p in RunDir(run_dir).checkpoints.iterdir()
                    if p.name.isdigit()]
    assert "Traceback" not in err and "absl" not in err


@pytest.mark.slow
def test_a_submitit_job_is_requeued_after_its_time_limit_signal(tmp_path):
    """A grid point's job under submitit's local executor gets submitit's time-limit signal
    (SIGUSR2, which SLURM sends ahead of --time): it checkpoints, submitit requeues it, it
    finishes; every member equals the same sweep run without the signal."""
    from pe_research.sweeps.executors import submit
    from pe_research.sweeps.spec import load_sweep
    from pe_research.sweeps.state import SweepDir, refresh, status_table, write_plan

    changes = {"train.steps": 400, "train.log_every": 2, "train.eval_every": 0,
               "train.checkpoint_every": 400, "train.steps_per_call": 2}
    sweeps = {}
    for name in ("signalled", "plain"):
        sweep_file = write_sweep(tmp_path / f"{name}.py", seeds="(0, 1)",
                                 grid='product({"model.pe.type": ["rope"]})', **changes)
        sweep_dir = SweepDir(tmp_path / name)
        write_plan(sweep_dir, load_sweep(sweep_file), f"sweep {name}", "submitit-local")
        (job,) = submit(sweep_dir, [[0]], {}, "submitit-local", 1)
        if name == "signalled":
            metrics = sweep_dir.root / "pe.type=rope" / "seed_0" / "metrics.jsonl"
            wait_for(lambda path=metrics: path.is_file()
                     and len(path.read_text().splitlines()) > 20, 300)
            worker = json.loads(sweep_dir.point_state(0).read_text())["pid"]
            os.kill(worker, signal.SIGUSR2)  # to the job's task, as SLURM signals it
        job.wait()
        sweeps[name] = sweep_dir
    state = json.loads(sweeps["signalled"].point_state(0).read_text())
    assert state["preemptions"] == 1 and state["state"] == "ended"
    manifest = refresh(sweeps["signalled"])
    assert {run["state"] for run in manifest["runs"].values()} == {"done"}
    assert "(preempted 1x)" in status_table(manifest)
    for seed in (0, 1):
        member = f"pe.type=rope/seed_{seed}"
        for got, want in zip(run_params(sweeps["signalled"].root / member),
                             run_params(sweeps["plain"].root / member), strict=True):
            np.testing.assert_array_equal(got, want)


def test_the_handlers_are_routed_and_restored_only_around_training():
    from pe_research.training import preemption

    before = {number: signal.getsignal(number) for number in preemption.SIGNALS}
    with preemption.watch() as flag:
        os.kill(os.getpid(), signal.SIGUSR1)
        assert flag.raised() and flag.received == signal.SIGUSR1
    assert {number: signal.getsignal(number) for number in preemption.SIGNALS} == before
    assert sys.platform.startswith("linux")
