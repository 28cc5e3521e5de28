"""One ``load_run``: eval and analyze fall back past a corrupt newest checkpoint, with a warning."""

from __future__ import annotations

import json
import os
import shutil

import pytest

from pe_research.cli import main
from pe_research.errors import ConfigError
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


def test_load_run_falls_back_for_latest_and_refuses_an_explicit_step(corrupt_run):
    with pytest.warns(UserWarning, match="step 40 .* unreadable .* falling back to step 20"):
        assert load_run(corrupt_run, "latest").step == 20
    with pytest.raises(ConfigError, match="checkpoint step 40 .* is unreadable") as error:
        load_run(corrupt_run, "40")
    assert "\n" not in str(error.value)
    assert sorted(p.name for p in RunDir(corrupt_run).checkpoints.iterdir()
                  if p.name.isdigit()) == ["20", "40"]  # a reader never moves or deletes


def test_eval_and_analyze_fall_back_to_the_previous_step(corrupt_run, capsys, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "disabled")
    with pytest.warns(UserWarning, match="step 40 .* falling back to step 20"):
        assert main(["eval", str(corrupt_run), "--step", "latest", "--lengths", "4,8"]) == 0
    assert "step 20 on" in capsys.readouterr().out
    assert json.loads(RunDir(corrupt_run).eval_results().read_text())["step"] == 20

    with pytest.warns(UserWarning, match="step 40 .* falling back to step 20"):
        assert main(["analyze", str(corrupt_run), "--step", "latest", "--examples", "2",
                     "--no-wandb"]) == 0
    assert (RunDir(corrupt_run).analysis(20) / "analysis.json").is_file()

    assert main(["eval", str(corrupt_run), "--step", "40", "--lengths", "4"]) == 2
    error = capsys.readouterr().err.strip()
    assert "checkpoint step 40" in error and "unreadable" in error and "\n" not in error


def test_grid_point_runs_are_its_seed_directories_or_the_run_itself(tmp_path):
    from pe_research.errors import UsageError
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
