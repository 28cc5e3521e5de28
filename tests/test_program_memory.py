"""A stacked program checks its compiled train step's memory before it trains; a sweep's job
whose members do not fit trains them as programs that do (training/program_memory.py)."""

from __future__ import annotations

import json

import pytest
from sweep_files import manifest_states, sweep_here, write_sweep

from pe_research.config import from_mapping
from pe_research.sweeps.spec import load_sweep
from pe_research.training.ensemble import train_ensemble
from pe_research.training.program_memory import GIB, ProgramMemoryError, gb


def test_the_members_that_fit_are_the_budget_over_each_members_share():
    assert ProgramMemoryError(members=4, needed=400, budget=250).fit == 2
    assert ProgramMemoryError(members=4, needed=400, budget=399).fit == 3
    assert ProgramMemoryError(members=4, needed=400, budget=10).fit == 1  # never none
    error = ProgramMemoryError(members=3, needed=3 * GIB, budget=2 * GIB)
    assert str(error) == ("3 members in one program need 3 GB (their compiled train step), "
                          "above the 2 GB budget (train.memory_budget_gb; 0: 90% of the "
                          "device's memory); about 2 fit: train fewer members together, or "
                          "raise train.memory_budget_gb")


def needed_bytes(configs, root) -> int:
    """The compiled step's bytes of an ensemble of ``configs``, from the error a budget of one
    byte raises before anything trains (and before any run directory is written)."""
    for config in configs:
        config.train.memory_budget_gb = 1 / GIB
    dirs = [root / f"member_{k}" for k in range(len(configs))]
    with pytest.raises(ProgramMemoryError) as raised:
        train_ensemble(configs, dirs)
    assert raised.value.members == len(configs)
    assert all(not (d / "checkpoints").exists() for d in dirs)
    return raised.value.needed


@pytest.mark.slow
def test_a_job_whose_members_do_not_fit_trains_them_as_programs_that_do(tmp_path):
    sweep_file = write_sweep(tmp_path / "s.py", grid='[{"model.pe.type": "rope"}]',
                             seeds="(0, 1, 2, 3)", **{"train.steps": 8, "train.eval_every": 0,
                                                      "train.checkpoint_every": 8})
    members = [member.config for member in load_sweep(sweep_file).points[0].members]
    two = needed_bytes([from_mapping(config) for config in members[:2]], tmp_path / "two")
    four = needed_bytes([from_mapping(config) for config in members], tmp_path / "four")
    assert 1.6 < four / two < 2.4  # each member's share: the program grows with its members
    budget = int(2.5 * four / 4)  # two fit, three do not
    workdir = tmp_path / "sweep"
    result = sweep_here(sweep_file, workdir, "--no-report",
                        f"--config.train.memory_budget_gb={budget / GIB!r}")
    assert result.returncode == 0, result.stderr[-3000:]
    assert f"sweep {workdir}: 1 grid point x 4 members = 4 runs; 1 grid point to run (" \
        in result.stdout
    split = (f"4 members need {gb(four)} GB in one program, above the {gb(budget)} GB budget "
             "(train.memory_budget_gb): training them as 2 programs of up to 2")
    assert result.stdout.count(f"pe.type=rope: {split}") == 1  # the driver's console says it
    log = next((workdir / "logs").iterdir()).read_text()
    assert log.count("members need") == 1, log[-3000:]
    assert split in log
    assert log.count("ensemble of 2 members") == 2
    assert set(manifest_states(workdir).values()) == {"done"}
    for run in manifest_states(workdir):
        records = (workdir / run / "metrics.jsonl").read_text().splitlines()
        assert max(json.loads(line).get("step", 0) for line in records) == 8
