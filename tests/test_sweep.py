"""Sweeps: validation before anything runs, the manifest, submitit, the report, 8 devices
(interrupted sweeps: test_sweep_interrupts.py)."""

from __future__ import annotations

import io
import json
import os
import socket
import subprocess
from pathlib import Path

import pytest
from conftest import REPO, assert_same_trained_parameters, chdir_with_corpus, subprocess_env
from sweep_files import manifest_states, run_params, sweep_command, sweep_here, write_sweep
from tqdm import tqdm

from pe_research.cli.app import main
from pe_research.cli.sweep import Progress
from pe_research.config.naming import short_keys, value_name
from pe_research.core.errors import ConfigError
from pe_research.evaluation.range_eval import evaluate_run
from pe_research.evaluation.results import read_results
from pe_research.runs.lock import RunDirLock
from pe_research.runs.restore import load_run
from pe_research.runs.run_dir import RunDir
from pe_research.sweeps import Sweep, product
from pe_research.sweeps.executors import slurm_parameters
from pe_research.sweeps.spec import load_sweep
from pe_research.sweeps.state import SweepDir, run_states, write_plan


def test_product_and_names():
    grid = product({"model.pe.type": ["rope", "alibi"], "seed_like": [1, 2, 3]})
    assert len(grid) == 6 and grid[0] == {"model.pe.type": "rope", "seed_like": 1}
    assert grid[-1] == {"model.pe.type": "alibi", "seed_like": 3}
    labels = short_keys(["model.pe.type", "task.name", "model.pe.randomize.max_position",
                         "train.max_position"])
    assert labels == {"model.pe.type": "pe.type", "task.name": "task.name",
                      "model.pe.randomize.max_position": "randomize.max_position",
                      "train.max_position": "train.max_position"}
    assert value_name((1, 40)) == "1-40" and value_name(3e-3) == "0.003"
    assert value_name("a/b c") == "a_b_c"


def test_sweep_plan_names_runs_and_validates_every_member(tmp_path):
    plan = load_sweep(write_sweep(tmp_path / "s.py"))
    assert [p.name for p in plan.points] == [
        "pe.type=rope,train_lengths=1-6", "pe.type=rope,train_lengths=1-8",
        "pe.type=alibi,train_lengths=1-6", "pe.type=alibi,train_lengths=1-8"]
    assert plan.runs == 8
    member = plan.points[2].members[1]
    assert member.name == "seed_1" and member.config["seed"] == 1
    assert member.config["model"]["pe"]["type"] == "alibi"
    assert member.config["data"]["train_lengths"] == [1, 6]


def test_a_moved_sweep_directory_still_finds_its_runs(tmp_path):
    plan = load_sweep(write_sweep(tmp_path / "s.py"))  # 20 steps per run
    first = SweepDir(tmp_path / "first")
    write_plan(first, plan, "pe-research sweep s.py --workdir first", "local")
    point = plan.points[0].name
    (first.root / point / "seed_0" / "checkpoints" / "20").mkdir(parents=True)  # finished
    old_plan = json.loads(first.point_plan(0).read_text())
    moved = SweepDir(tmp_path / "moved")
    first.root.rename(moved.root)
    rows = run_states(moved, 0)
    assert [row["dir"] for row in rows] == [str(moved.root / point / f"seed_{k}") for k in (0, 1)]
    assert [row["state"] for row in rows] == ["done", "pending"]
    # Plans written with absolute run paths (before they were stored relative) resolve too.
    for run in old_plan["runs"]:
        run["dir"] = str(first.root / point / Path(run["dir"]).name)
    moved.point_plan(0).write_text(json.dumps(old_plan))
    assert [row["state"] for row in run_states(moved, 0)] == ["done", "pending"]


def test_progress_written_to_a_file_redraws_when_runs_change_not_on_every_poll(tmp_path, capsys):
    plan = load_sweep(write_sweep(tmp_path / "s.py"))
    sweep_dir = SweepDir(tmp_path / "sweep")
    write_plan(sweep_dir, plan, "pe-research sweep s.py --workdir sweep", "local")
    other_bar = tqdm(total=1, file=io.StringIO())  # another bar alive in this process
    progress = Progress(sweep_dir)  # stderr is captured: not a terminal
    for _ in range(20):
        progress.tick()
    (sweep_dir.root / plan.points[0].name / "seed_0" / "checkpoints" / "20").mkdir(parents=True)
    for _ in range(20):
        progress.tick()
    progress.close()
    other_bar.close()
    lines = capsys.readouterr().err.replace("\r", "\n").split("\n")
    states = {line.split("runs: ")[1].rstrip("] ") for line in lines if "runs: " in line}
    assert states == {"0 done, 0 running, 0 failed, 8 waiting",
                      "1 done, 0 running, 0 failed, 7 waiting"}
    assert sum("runs: " in line for line in lines) <= 4  # one per change, and the last line


def test_progress_counts_from_each_runs_checkpoint_and_never_runs_backwards(tmp_path):
    """A killed worker still reads as alive when the sweep is launched again, with steps logged
    after its last checkpoint; those are trained again, so the bar counts from the checkpoint."""
    plan = load_sweep(write_sweep(tmp_path / "s.py"))  # 4 points x 2 seeds x 20 steps
    sweep_dir = SweepDir(tmp_path / "sweep")
    write_plan(sweep_dir, plan, "pe-research sweep s.py --workdir sweep", "local")
    run = RunDir(sweep_dir.root / plan.points[0].name / "seed_0")
    (run.checkpoints / "10").mkdir(parents=True)
    run.metrics.write_text('{"step": 5}\n{"step": 15}\n')
    sweep_dir.write_state(0, {"state": "running", "pid": os.getpid(),
                              "host": socket.gethostname()})
    progress = Progress(sweep_dir)
    progress.tick()
    assert (progress.bar.total, progress.bar.n) == (8 * 20 - 10, 5)
    sweep_dir.write_state(0, {"state": "interrupted"})  # read as dead: back to its checkpoint
    progress.tick()
    assert progress.bar.n == 5
    (run.checkpoints / "20").mkdir()
    progress.tick()
    assert progress.bar.n == 10
    progress.close()


@pytest.mark.parametrize(("grid", "message"), [
    ('[{"model.pe.type": "rope"}, {"model.pe.nonsense": 1}]',
     "model.pe.nonsense.*grid point 1"),
    ('[{"model.d_model": 16}, {"model.d_model": -4}]', "model.d_model.*grid point 1"),
    ('[{"seed": 3}]', "stacked member axis"),
])
def test_bad_grid_point_fails_before_anything_runs(tmp_path, capsys, grid, message):
    sweep_file = write_sweep(tmp_path / "bad.py", grid=grid)
    with pytest.raises(ConfigError, match=message):
        load_sweep(sweep_file)
    workdir = tmp_path / "never"
    assert main(["sweep", str(sweep_file), "--workdir", str(workdir)]) == 2
    error = capsys.readouterr().err.strip()
    assert error.count("\n") == 0 and "grid point" in error or "stacked" in error
    assert not workdir.exists()


def test_an_override_of_a_key_the_grid_sets_is_one_line_before_anything_runs(tmp_path, capsys):
    """A grid point's value would win over ``--config``: refused, not silently ignored."""
    sweep_file = write_sweep(tmp_path / "s.py", grid='[{"model.pe.type": "rope"}, {}]')
    with pytest.raises(ConfigError, match=r"1 of the 2 grid points set it.*change the grid"):
        load_sweep(sweep_file, ["--config.model.pe.type=alibi"])
    plan = load_sweep(sweep_file, ["--config.model.d_model=32"])  # a key the grid leaves alone
    assert [point.members[0].config["model"]["d_model"] for point in plan.points] == [32, 32]
    workdir = tmp_path / "never"
    assert main(["sweep", str(sweep_file), "--workdir", str(workdir),
                 "--config.model.pe.type=alibi"]) == 2
    assert "--config.model.pe.type='alibi' is invalid" in capsys.readouterr().err
    assert not workdir.exists()


def test_slurm_without_sbatch_is_one_line(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))  # no sbatch anywhere
    sweep_file = write_sweep(tmp_path / "s.py")
    assert main(["sweep", str(sweep_file), "--workdir", str(tmp_path / "w"),
                 "--executor", "slurm"]) == 2
    assert "sbatch is not on PATH" in capsys.readouterr().err
    assert not (tmp_path / "w").exists()


def test_second_driver_on_a_busy_sweep_directory_is_refused(tmp_path, capsys):
    workdir = tmp_path / "sweep"
    with RunDirLock(workdir, "run"):
        assert main(["sweep", str(write_sweep(tmp_path / "s.py")), "--workdir",
                     str(workdir)]) == 2
    error = capsys.readouterr().err
    assert f"{workdir} is being run by process {os.getpid()}" in error
    assert not (workdir / "sweep.json").exists()


def test_slurm_parameters_from_file_and_command_line():
    settings = {"partition": "gpu", "gpus_per_job": 1, "time_min": 90, "sbatch": {"account": "x"}}
    parameters = slurm_parameters(settings, "slurm", 4, "sweep_demo")
    assert parameters == {"timeout_min": 90, "name": "sweep_demo", "gpus_per_node": 1,
                          "slurm_partition": "gpu", "slurm_array_parallelism": 4,
                          "slurm_additional_parameters": {"account": "x"}}
    assert "slurm_partition" not in slurm_parameters(settings, "local", 4, "s")


def test_sweep_object_defaults():
    assert Sweep().grid == ({},) and tuple(Sweep().seeds) == (0,)



@pytest.mark.slow
def test_sweep_through_submitit_local_executor_and_report(tmp_path):
    grid = 'product({"model.pe.type": ["rope", "alibi"]})'
    sweep_file = write_sweep(tmp_path / "s.py", grid=grid,
                             **{"train.steps": 10, "eval.lengths": (4, 8, 12)})
    workdir = tmp_path / "sweep"
    result = subprocess.run(sweep_command(sweep_file, workdir, "--executor", "submitit-local",
                                          "--jobs", "2"), cwd=REPO, env=subprocess_env(),
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
    manifest = json.loads((workdir / "sweep.json").read_text())
    assert set(manifest["jobs"]) == {"0", "1"}  # one submitit job per grid point
    assert set(manifest_states(workdir).values()) == {"done"}
    assert "| alibi | 2 |" in result.stdout and "| rope | 2 |" in result.stdout
    assert (workdir / "report" / "reverse_string_1-8" / "comparison.png").is_file()
    # The vmapped evaluation of a grid point's members equals evaluating one run alone.
    run_dir = workdir / "pe.type=alibi" / "seed_1"
    rows = read_results(RunDir(run_dir).eval_results())["rows"]
    single = evaluate_run(load_run(run_dir))
    for row, alone in zip(rows, single.rows, strict=True):
        for key, value in alone.as_dict().items():
            assert row[key] == pytest.approx(value, rel=1e-6, abs=1e-9), key


@pytest.mark.slow
def test_ensemble_sharded_over_eight_devices_matches_one_device(tmp_path, monkeypatch):
    sweep_file = write_sweep(tmp_path / "s.py", grid='[{"model.pe.type": "alibi"}]',
                             seeds="(0, 1, 2, 3)", **{"train.steps": 6, "train.eval_every": 0})
    runs = {}
    for devices in (8, 1):
        workdir = tmp_path / f"devices_{devices}"
        # The driver runs here; its worker, a process of its own, sees the devices asked for.
        flags = subprocess_env(XLA_FLAGS=f"--xla_force_host_platform_device_count={devices}")
        monkeypatch.setenv("XLA_FLAGS", flags["XLA_FLAGS"])
        result = sweep_here(sweep_file, workdir, "--no-report")
        assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
        runs[devices] = workdir
    log = (runs[8] / "logs" / "pe.type=alibi.log").read_text()
    assert "ensemble of 4 members on 4 x 2 devices" in log
    assert "on 1 x 1 devices" in (runs[1] / "logs" / "pe.type=alibi.log").read_text()
    for seed in range(4):
        member = f"pe.type=alibi/seed_{seed}"
        assert_same_trained_parameters(run_params(runs[8] / member), run_params(runs[1] / member))


# The reusable grids, and every study's grids beside its scripts.
SWEEP_FILES = sorted([*(REPO / "configs" / "sweeps").glob("*.py"),
                      *(path for path in (REPO / "experiments" / "studies").rglob("*.py")
                        if "def sweep(" in path.read_text())])


def test_the_sweep_files_are_found():
    assert len(SWEEP_FILES) >= 50
    assert REPO / "configs" / "sweeps" / "demo.py" in SWEEP_FILES


@pytest.mark.parametrize("path", SWEEP_FILES, ids=lambda p: p.stem)
def test_every_sweep_file_validates_and_names_its_command(path, tmp_path, monkeypatch):
    command = path.read_text().split('"""')[1].split("\n\n")[0].replace("\\\n", "")
    relative = path.relative_to(REPO)
    assert " ".join(command.split()).startswith(f"pe-research sweep {relative} --workdir ")
    if "language_model" in path.read_text():  # names a corpus file, relative to the cwd
        chdir_with_corpus(tmp_path, monkeypatch)
    try:
        plan = load_sweep(path)
    except ConfigError as error:  # only a sweep over SCAN, where its files are absent, may fail
        assert "data.scan_dir" in str(error) and not (REPO / "data/scan").is_dir(), error
        return
    assert plan.runs >= 2 and len({p.name for p in plan.points}) == len(plan.points)
