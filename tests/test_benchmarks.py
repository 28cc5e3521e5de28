"""The benchmark scripts run end to end at tiny sizes and print their tables."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def run_script(*args: str) -> str:
    env = {**os.environ, "WANDB_MODE": "disabled", "PYTHONUNBUFFERED": "1"}
    done = subprocess.run([sys.executable, *args], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def test_data_throughput_covers_every_task():
    from pe_research.tasks import TASKS

    out = run_script("benchmarks/data_throughput.py", "--batch-size", "8", "--lengths", "4",
                     "--seconds", "0.01")
    generated = [name for name in TASKS if name not in ("scan", "text")]
    rows = [line for line in out.splitlines() if line.startswith("|")]
    assert all(any(f"| {name} " in row for row in rows) for name in generated)


@pytest.mark.slow
def test_eval_speed_compares_bucket_and_length_compilation():
    out = run_script("benchmarks/eval_speed.py", "--max-length", "16", "--repeats", "1")
    assert "per bucket" in out and "per length" in out


@pytest.mark.slow
def test_ensemble_speed_prints_one_row_per_member_count():
    out = run_script("benchmarks/ensemble_speed.py", "--members", "1,2", "--steps", "2",
                     "--config.model.d_model=16", "--config.model.d_ff=32",
                     "--config.data.batch_size=8")
    rows = [line for line in out.splitlines() if line.startswith("| ") and "members" not in line]
    assert [row.split("|")[1].strip() for row in rows] == ["1", "2"]
    assert "single run:" in out


@pytest.mark.slow
def test_scheme_cost_flags_the_schemes_that_build_per_pair_vectors():
    out = run_script("benchmarks/scheme_cost.py", "--lengths", "16", "--steps", "1",
                     "--batch-size", "4", "--schemes", "fire,shaw,dynamic_bias")
    rows = {row.split("|")[1].strip(): row for row in out.splitlines() if row.startswith("| ")
            and "scheme" not in row}
    assert list(rows) == ["none", "fire", "shaw", "dynamic_bias"]  # NoPE first: the reference
    assert "1.00x" in rows["none"]
    assert "[4, 16, 16, 32]" in rows["fire"]  # FIRE's MLP: 32 hidden units per pair
    assert "[4, 16, 16, 16]" in rows["dynamic_bias"]  # d_model / 4 hidden units per pair
    assert rows["shaw"].rstrip(" |").endswith("-")  # its value term runs one table row at a time
    paths = {name: row.split("|")[2].strip() for name, row in rows.items()}
    assert paths == {"none": "fused", "fire": "fused", "shaw": "explicit",
                     "dynamic_bias": "fused"}  # shaw's value vectors need the weights
