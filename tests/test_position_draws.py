"""experiments/studies/position_draws/position_draws.py: one draw per length against one per
example, each equal to the evaluator's numbers under that setting; plain runs refused in one
line."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import (
    DEFAULT_CONFIG,
    experiment_path,
    load_experiment,
    run_script_here,
    tiny_overrides,
)

from pe_research.config import load_config
from pe_research.evaluation.range_eval import evaluate_run
from pe_research.runs.restore import load_run
from pe_research.training.loop import train

SCRIPT = experiment_path("position_draws")
LENGTHS = (4, 8, 12)


def test_summary_splits_training_lengths_from_beyond_and_finds_the_largest_gap():
    experiment = load_experiment("position_draws")
    lengths = np.array([1, 2, 3, 4, 5])
    numbers = experiment.summary(lengths, np.array([100.0, 90, 50, 80, 10]),
                                 np.array([100.0, 100, 60, 60, 15]), (1, 2))
    assert numbers == {"inside_one_draw": 95.0, "inside_per_example": 100.0,
                       "beyond_one_draw": pytest.approx(140 / 3),
                       "beyond_per_example": pytest.approx(45.0),
                       "largest_gap": 20.0, "largest_gap_length": 4}


def test_a_plain_run_is_refused_in_one_line(trained_run_dir, tmp_path):
    done = run_script_here(SCRIPT, str(trained_run_dir), "--out", str(tmp_path / "draws.png"))
    assert done.returncode == 2
    assert done.stderr == (f"error: {trained_run_dir} draws no test positions "
                           "(model.pe.randomize.max_position=0, eval_policy='randomized'): "
                           "give randomized runs\n")
    assert not (tmp_path / "draws.png").exists()


@pytest.mark.slow
def test_each_scoring_is_the_evaluators_under_its_setting(tmp_path):
    run_dir = tmp_path / "randomized" / "seed_0"
    train(load_config(DEFAULT_CONFIG, tiny_overrides(**{
        "model.pe.randomize.max_position": 32, "model.pe.randomize.per": "batch",
        "train.steps": 10, "train.eval_every": 0, "wandb.mode": "disabled"})), run_dir)
    experiment = load_experiment("position_draws")
    assert experiment.group_runs(run_dir.parent) == [run_dir]
    found = {name: experiment.scores(run_dir, name, "token_accuracy", LENGTHS)
             for name in experiment.SCORINGS}
    for name, overrides in (("one_draw", ["model.pe.randomize.eval_per=batch"]),
                            ("per_example", [])):
        rows = evaluate_run(load_run(run_dir, None, overrides), LENGTHS).rows
        np.testing.assert_array_equal(found[name], [row.token_accuracy for row in rows])
    assert not np.array_equal(found["one_draw"], found["per_example"])
    again = experiment.scores(run_dir, "one_draw", "token_accuracy", LENGTHS)  # read back
    np.testing.assert_array_equal(again, found["one_draw"])
