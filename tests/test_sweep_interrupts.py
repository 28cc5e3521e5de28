"""Sweeps interrupted: a killed driver resumes where it stopped, SIGTERM stops its workers,
a killed program of stacked grid points resumes bit-identically."""

from __future__ import annotations

import contextlib
import json
import os
import signal

import numpy as np
import pytest
from conftest import cli_here
from sweep_files import (
    manifest_states,
    run_params,
    start_sweep,
    sweep_here,
    wait_for,
    write_sweep,
)

from pe_research.runs.run_dir import RunDir
from pe_research.sweeps.state import SweepDir


@pytest.mark.slow
def test_sweep_killed_then_rerun_skips_finished_runs_and_records_failures(tmp_path):
    # Two grid points of two seeds, plus one whose eval-set folder cannot be created.
    grid = ('[{"model.pe.type": "rope"}, {"model.pe.type": "alibi"}, '
            '{"model.pe.type": "rope", "data.eval_cache_dir": "/proc/pe_research_no"}]')
    sweep_file = write_sweep(tmp_path / "s.py", grid=grid)
    workdir = tmp_path / "sweep"
    process = start_sweep(sweep_file, workdir)
    try:
        wait_for(lambda: (workdir / "sweep.json").exists()
                  and "done" in manifest_states(workdir).values())
    finally:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
    first = manifest_states(SweepDir(workdir).root)
    finished = [name for name, state in first.items() if state == "done"]
    assert finished and len(finished) < 6
    stamps = {name: (workdir / name / "metrics.jsonl").stat().st_mtime for name in finished}

    result = sweep_here(sweep_file, workdir, "--no-report")
    assert result.returncode == 1, result.stderr[-3000:]  # one grid point failed
    states = manifest_states(workdir)
    failed = sorted(name for name, state in states.items() if state == "failed")
    assert failed == ["eval_cache_dir=_proc_pe_research_no,pe.type=rope/seed_0",
                      "eval_cache_dir=_proc_pe_research_no,pe.type=rope/seed_1"] or \
        all("eval_cache_dir" in name for name in failed) and len(failed) == 2
    assert sum(state == "done" for state in states.values()) == 4
    manifest = json.loads((workdir / "sweep.json").read_text())
    assert "pe_research_no" in manifest["runs"][failed[0]]["error"]
    for name, stamp in stamps.items():  # finished runs were not trained again
        assert (workdir / name / "metrics.jsonl").stat().st_mtime == stamp
    assert "4 done, 2 failed (of 6 runs)" in result.stdout
    status = cli_here("sweep", "status", str(workdir))
    assert "4 done, 2 failed" in status.stdout


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


@pytest.mark.slow
def test_sigterm_to_the_driver_stops_its_workers(tmp_path):
    # `kill` (or a timeout) signals the driver alone; its workers must not train on unseen.
    sweep_file = write_sweep(tmp_path / "s.py", grid='[{}]', seeds="(0,)",
                             **{"train.steps": 100_000})
    workdir = tmp_path / "sweep"
    process = start_sweep(sweep_file, workdir)
    try:
        wait_for(lambda: (workdir / "sweep.json").exists()
                  and SweepDir(workdir).read_state(0).get("state") == "running")
        worker = int(SweepDir(workdir).read_state(0)["pid"])
        assert _alive(worker)
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=120) == 128 + signal.SIGTERM
        wait_for(lambda: not _alive(worker), timeout=60)
    finally:  # the workers share the driver's process group: leave nothing behind
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()


@pytest.mark.slow
def test_killed_program_of_three_tasks_resumes_bit_identically(tmp_path):
    """Three grid points of tasks with 5, 8 and 13 tokens train stacked in one program; killed
    with SIGKILL and rerun, every member ends bit for bit as in an uninterrupted sweep (and an
    uninterrupted member equals its own run: tests/test_ensemble.py)."""
    changes = {"train.steps": 60, "train.checkpoint_every": 20, "train.log_every": 30,
               "train.eval_every": 0, "data.length_sampling": "mixed"}
    grid = '[{"task.name": "reverse_string"}, {"task.name": "bucket_sort"}, {"task.name": "copy"}]'
    sweep_file = write_sweep(tmp_path / "s.py", grid=grid, seeds="(0,)",
                             members_per_program="'auto'", **changes)
    straight, resumed = tmp_path / "straight", tmp_path / "resumed"
    result = sweep_here(sweep_file, straight, "--no-report")
    assert result.returncode == 0, result.stderr[-3000:]
    assert "3 grid points to run in 1 program of up to 8 members" in result.stdout
    runs = sorted(manifest_states(straight))
    assert len(runs) == 3
    log = next((straight / "logs").iterdir()).read_text()
    assert "ensemble of 3 members, 3 tasks (vocabularies padded to 13)" in log
    process = start_sweep(sweep_file, resumed)
    member = resumed / runs[-1] / "checkpoints"
    try:
        wait_for(lambda: member.exists() and any(p.name.isdigit() for p in member.iterdir()))
    finally:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
    assert manifest_states(resumed)[runs[-1]] in ("interrupted", "running")
    assert sweep_here(sweep_file, resumed, "--no-report").returncode == 0
    assert set(manifest_states(resumed).values()) == {"done"}
    for run in runs:
        a, b = straight / run, resumed / run
        for x, y in zip(run_params(a), run_params(b), strict=True):
            np.testing.assert_array_equal(x, y)
        losses = [[r.get("train/loss") for r in map(json.loads, RunDir(d).metrics.read_text()
                                                    .splitlines())] for d in (a, b)]
        assert losses[0] == losses[1]
