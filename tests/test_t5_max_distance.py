"""T5's max_distance changed at test time: the trained value reproduces the run's own numbers,
lengths whose distances all sit in exact buckets do not move, and other schemes are refused."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import (
    DEFAULT_CONFIG,
    REPO,
    experiment_path,
    load_experiment,
    subprocess_env,
    tiny_overrides,
)

from pe_research.config import load_config
from pe_research.evaluation.range_eval import evaluate_run
from pe_research.evaluation.results import read_results
from pe_research.runs.restore import load_run
from pe_research.runs.run_dir import RunDir
from pe_research.training.loop import train

SCRIPT = experiment_path("t5_max_distance")
LENGTHS = (1, 2, 12)  # 1 and 2: every distance below the exact buckets (4 each way, 8 causal)


@pytest.mark.slow
def test_max_distance_moves_only_lengths_beyond_the_exact_buckets(tmp_path):
    run_dir = tmp_path / "t5" / "seed_0"
    train(load_config(DEFAULT_CONFIG, tiny_overrides(**{
        "model.pe.type": "t5", "model.pe.num_buckets": 16, "train.steps": 20,
        "train.eval_every": 0, "wandb.mode": "disabled"})), run_dir)
    experiment = load_experiment("t5_max_distance")
    assert experiment.group_runs(run_dir.parent) == [run_dir]
    trained = experiment.exact_match(run_dir, 128, LENGTHS)  # the run's own max_distance
    alone = evaluate_run(load_run(run_dir), LENGTHS)
    np.testing.assert_array_equal(trained, [row.exact_match for row in alone.rows])
    experiment.exact_match(run_dir, 1024, LENGTHS)
    loss = {m: [row["loss"] for row in read_results(RunDir(run_dir).eval_results(
        f"max_distance_{m}"))["rows"]] for m in (128, 1024)}
    assert loss[1024][:2] == pytest.approx(loss[128][:2], rel=1e-6)
    assert loss[1024][2] != pytest.approx(loss[128][2], rel=1e-4)  # distances 8+ remapped


def test_a_run_of_another_scheme_is_refused_in_one_line(trained_run_dir):
    """In a process of its own, as a user runs it: stderr holds that line and nothing else (the
    other studies' refusals run in the test's process, ``run_script_here``)."""
    done = subprocess.run([sys.executable, str(SCRIPT), str(trained_run_dir)], cwd=REPO,
                          env=subprocess_env(), capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    assert done.stderr == (f"error: {trained_run_dir} was trained with model.pe.type='rope'; "
                           "max_distance is T5's: give T5 runs\n")
    assert not Path(REPO / "t5_max_distance.png").exists()
