"""One ``load_run``: train, eval and analyze fall back past a corrupt newest checkpoint, with one
line on stderr and no traceback."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess

import jax
import numpy as np
import pytest

from pe_research.cli import main
from pe_research.core.errors import ConfigError
from pe_research.runs.restore import load_run
from pe_research.runs.run_dir import RunDir


@pytest.fixture(params=["truncate", "delete", "garble"])
def corrupt_run(request, trained_run_dir, tmp_path):
    """A copy of the trained run (steps 20 and 40) whose step 40 has damaged parameter data."""
    run_dir = tmp_path / "run"
    shutil.copytree(trained_run_dir, run_dir)
    victims = list((RunDir(run_dir).checkpoints / "40" / "params").glob("d/*"))
    assert victims
    for victim in victims:
        if request.param == "truncate":
            victim.write_bytes(victim.read_bytes()[: victim.stat().st_size // 2])
        elif request.param == "garble":
            victim.write_bytes(os.urandom(victim.stat().st_size))
        else:
            victim.unlink()
    return run_dir


FALLBACK = re.compile(r"warning: checkpoint step 40 in \S+ is unreadable \(.+\); using step 20 "
                      r"instead")


def one_fallback_line(err: str) -> None:
    """stderr holds exactly one line about the unreadable step, and no traceback."""
    lines = [line for line in err.splitlines() if "checkpoint" in line or "Trace" in line
             or "Exception" in line]
    assert len(lines) == 1 and FALLBACK.fullmatch(lines[0]), err[-2000:]
    assert "Traceback" not in err and "Exception ignored" not in err


def test_load_run_falls_back_for_latest_and_refuses_an_explicit_step(corrupt_run, capsys):
    assert load_run(corrupt_run, "latest").step == 20
    one_fallback_line(capsys.readouterr().err)
    with pytest.raises(ConfigError, match="checkpoint step 40 .* is unreadable") as error:
        load_run(corrupt_run, "40")
    assert "\n" not in str(error.value)
    assert sorted(p.name for p in RunDir(corrupt_run).checkpoints.iterdir()
                  if p.name.isdigit()) == ["20", "40"]  # a reader never moves or deletes


def test_latest_falls_back_past_every_unreadable_step(trained_run_dir, tmp_path, capsys):
    """Steps 40 and 30 unreadable (30 a copy of 20's files): 'latest' goes on to step 20, the
    newest readable one, with one line for each step it skipped."""
    run_dir = tmp_path / "run"
    shutil.copytree(trained_run_dir, run_dir)
    checkpoints = RunDir(run_dir).checkpoints
    shutil.copytree(checkpoints / "20", checkpoints / "30")
    for step in ("30", "40"):
        victims = list((checkpoints / step / "params").glob("d/*"))
        assert victims
        for victim in victims:
            victim.unlink()
    assert load_run(run_dir, "latest").step == 20
    lines = [line for line in capsys.readouterr().err.splitlines() if "checkpoint" in line]
    assert [re.search(r"step (\d+) in .* using step (\d+)", line).groups() for line in lines] == [
        ("40", "20"), ("30", "20")], lines


def test_eval_and_analyze_fall_back_to_the_previous_step(corrupt_run, capsys, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "disabled")
    assert main(["eval", str(corrupt_run), "--step", "latest", "--lengths", "4,8"]) == 0
    out, err = capsys.readouterr()
    assert "step 20 on" in out
    one_fallback_line(err)
    assert json.loads(RunDir(corrupt_run).eval_results().read_text())["step"] == 20

    assert main(["analyze", str(corrupt_run), "--step", "latest", "--examples", "2",
                 "--no-wandb"]) == 0
    one_fallback_line(capsys.readouterr().err)
    assert (RunDir(corrupt_run).analysis(20) / "analysis.json").is_file()

    assert main(["eval", str(corrupt_run), "--step", "40", "--lengths", "4"]) == 2
    error = capsys.readouterr().err.strip()
    assert "checkpoint step 40" in error and "unreadable" in error and "\n" not in error


@pytest.mark.slow
@pytest.mark.parametrize("corrupt_run", ["garble"], indirect=True)
def test_a_real_process_prints_one_line_for_the_unreadable_step(corrupt_run):
    """Outside pytest (whose hook would catch them) the reads Orbax abandons once one failed
    reach Python's own hook: about 30 tracebacks, some after the restore, on other threads."""
    from conftest import cli_command, subprocess_env

    result = subprocess.run([*cli_command(), "eval", str(corrupt_run), "--lengths", "4"],
                            capture_output=True, text=True, timeout=240,
                            env=subprocess_env(WANDB_MODE="disabled"))
    assert result.returncode == 0, result.stderr[-3000:]
    one_fallback_line(result.stderr)
    assert [line for line in result.stderr.splitlines() if line.strip()
            and not line.startswith("eval")] == [line for line in result.stderr.splitlines()
                                                 if FALLBACK.fullmatch(line)]


def test_grid_point_runs_are_its_seed_directories_or_the_run_itself(tmp_path):
    from pe_research.core.errors import UsageError
    from pe_research.runs.run_dir import grid_point_runs

    for seed in (1, 0):
        (tmp_path / "point" / f"seed_{seed}").mkdir(parents=True)
    assert grid_point_runs(tmp_path / "point") == [tmp_path / "point" / "seed_0",
                                                   tmp_path / "point" / "seed_1"]
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "config.json").write_text("{}")
    assert grid_point_runs(tmp_path / "run") == [tmp_path / "run"]
    with pytest.raises(UsageError, match="no run here"):
        grid_point_runs(tmp_path / "empty")


@pytest.fixture(scope="module")
def selective_copy_run(tmp_path_factory):
    """A tiny selective_copy run (10 steps, one blank per symbol), trained in process."""
    from conftest import DEFAULT_CONFIG, tiny_overrides

    from pe_research import load_config, train

    run_dir = tmp_path_factory.mktemp("selective_copy") / "run"
    config = load_config(DEFAULT_CONFIG, tiny_overrides(**{
        "task.name": "selective_copy", "data.train_lengths": "(1, 4)",
        "data.buckets": "(8, 16, 32)", "train.steps": 10, "train.checkpoint_every": 10,
        "train.eval_every": 0, "train.eval_lengths": "(4,)", "eval.lengths": "(2, 4)",
        "wandb.mode": "disabled"}))
    train(config, run_dir)
    return run_dir


def test_a_task_may_declare_keys_that_change_only_what_is_tested(selective_copy_run):
    from pe_research import evaluate
    from pe_research.data import eval_dataset

    plain = load_run(selective_copy_run)
    sparse = load_run(selective_copy_run, overrides=["task.blanks_per_token=2"])
    assert plain.config.task.blanks_per_token == 1 and sparse.task.source_length(4) == 12
    sets = {name: eval_dataset(run.task, (4,), 16, 0, str(RunDir(run.run_dir).eval_data(
        run.config.data))) for name, run in (("plain", plain), ("sparse", sparse))}
    assert {len(s) for s in sets["plain"]["source"]} == {8}
    assert {len(s) for s in sets["sparse"]["source"]} == {12}  # 4 symbols among 8 blanks
    blank = sparse.task.vocabulary.tokens.index("_")
    assert all(list(s).count(blank) == 8 for s in sets["sparse"]["source"])
    explicit = load_run(selective_copy_run, overrides=["task.blanks_per_token=1"])
    assert ([row.values for row in evaluate(explicit).rows]
            == [row.values for row in evaluate(plain).rows])  # the default, said aloud
    with pytest.raises(ConfigError, match=r"task.alphabet_size=.*cannot change at evaluation"
                                          r".*task.blanks_per_token"):
        load_run(selective_copy_run, overrides=["task.alphabet_size=3"])


def test_other_tasks_keep_their_task_keys_fixed_at_evaluation(trained_run_dir):
    with pytest.raises(ConfigError, match=r"task.blanks_per_token=.*cannot change") as error:
        load_run(trained_run_dir, overrides=["task.blanks_per_token=2"])  # a reverse_string run
    assert "task.blanks_per_token" not in str(error.value).split("eval-time keys are")[1]


@pytest.mark.slow
def test_training_falls_back_with_one_line_and_ends_as_an_uninterrupted_run(corrupt_run,
                                                                           trained_run_dir,
                                                                           capsys):
    """Step 40 unreadable: training resumes from 20, moves 40 aside and writes it again, equal
    to the uninterrupted run's step 40."""
    from conftest import DEFAULT_CONFIG, tiny_overrides

    from pe_research.config import load_config
    from pe_research.training.loop import train

    capsys.readouterr()
    train(load_config(DEFAULT_CONFIG, tiny_overrides(**{"wandb.mode": "disabled"})),
          corrupt_run)
    out, err = capsys.readouterr()
    one_fallback_line(err)
    assert "resuming" in out and "from step 20" in out
    assert len(list(RunDir(corrupt_run).corrupt_checkpoints.iterdir())) == 1
    retrained, original = load_run(corrupt_run, "40"), load_run(trained_run_dir, "40")
    for a, b in zip(jax.tree.leaves(retrained.params), jax.tree.leaves(original.params),
                    strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_a_clean_restore_collects_no_garbage_and_a_fallback_does(trained_run_dir, tmp_path,
                                                                 monkeypatch):
    """A full collection of a large process's heap costs more than the restore: only a failed
    read (whose Orbax coroutines must be finalised quietly) pays for one."""
    import gc

    collections, collect = [], gc.collect
    monkeypatch.setattr(gc, "collect", lambda *args: collections.append(args) or collect(*args))
    load_run(trained_run_dir, "latest")
    assert collections == []
    run_dir = tmp_path / "run"
    shutil.copytree(trained_run_dir, run_dir)
    for victim in (RunDir(run_dir).checkpoints / "40" / "params").glob("d/*"):
        victim.unlink()
    assert load_run(run_dir, "latest").step == 20
    assert len(collections) == 1


def test_a_run_without_checkpoints_is_one_line_naming_the_fix(trained_run_dir, tmp_path,
                                                               capsys):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    shutil.copy(RunDir(trained_run_dir).config, run_dir / "config.json")
    assert main(["eval", str(run_dir)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("pe-research eval: config error: --step=")
    assert f"no checkpoints in {run_dir / 'checkpoints'}; train the run until its first " \
           "checkpoint (train.checkpoint_every), or give a run that has one" in err
