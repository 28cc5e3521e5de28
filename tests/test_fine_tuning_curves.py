"""The fine-tuning curves script (experiments/studies/rope_finetuning/): step 0 is the source
under the run's test-time settings, later steps the run's own checkpoints, each equal to the
evaluator's numbers."""

from __future__ import annotations

import json
import shutil

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
from pe_research.core.errors import UsageError
from pe_research.evaluation.range_eval import evaluate_run
from pe_research.runs.restore import load_run
from pe_research.training.loop import train

SCRIPT = experiment_path("fine_tuning_curves")
LENGTHS = (2, 8, 12, 16)


def test_bands_split_source_added_and_beyond_lengths():
    experiment = load_experiment("fine_tuning_curves")
    x = np.array([1, 4, 5, 8, 10, 12])
    masks = experiment.bands(x, (1, 4), (1, 8))
    assert [x[mask].tolist() for mask in masks] == [[1, 4], [5, 8], [10, 12]]


def test_a_run_not_fine_tuned_is_refused_in_one_line(trained_run_dir, tmp_path):
    done = run_script_here(SCRIPT, str(trained_run_dir), "--out", str(tmp_path / "curves.png"))
    assert done.returncode == 2
    assert done.stderr.startswith(f"error: {trained_run_dir} was not fine-tuned")
    assert len(done.stderr.splitlines()) == 1
    assert not (tmp_path / "curves.png").exists()


@pytest.mark.slow
def test_each_step_is_the_evaluators_numbers_and_step_0_the_sources(trained_run_dir, tmp_path):
    source = tmp_path / "source"
    shutil.copytree(trained_run_dir, source)
    run = tmp_path / "tuned" / "seed_0"
    train(load_config(DEFAULT_CONFIG, tiny_overrides(**{
        "train.init_from": str(source), "train.init_checkpoint": "20", "train.steps": 4,
        "train.checkpoint_every": 2, "train.eval_every": 0, "data.train_lengths": "(1, 12)",
        "eval.lengths": str(LENGTHS), "wandb.mode": "disabled"})),
        run)
    experiment = load_experiment("fine_tuning_curves")
    assert experiment.start_overrides(run, source) == []
    out, numbers = tmp_path / "curves.png", tmp_path / "curves.json"
    done = run_script_here(
        SCRIPT, str(run.parent), "--steps", "0,4", "--metric", "token_accuracy", "--out", str(out),
        "--json", str(numbers))
    assert done.returncode == 0, done.stderr[-3000:]
    record = json.loads(numbers.read_text())
    curves = np.array(record["groups"][str(run.parent)]["curves"])  # [seeds, steps, lengths]
    for index, (directory, step) in enumerate(((source, 20), (run, 4))):
        rows = evaluate_run(load_run(directory, step), LENGTHS).rows
        np.testing.assert_allclose(curves[0, index], [100 * r.token_accuracy for r in rows])
    assert not np.array_equal(curves[0, 0], curves[0, 1])
    assert record["bands"] == {"source lengths": [2, 8], "added lengths": [12],
                               "beyond both": [16]}
    means = np.array(record["groups"][str(run.parent)]["band_means"])  # [bands, seeds, steps]
    np.testing.assert_allclose(means[0, 0], curves[0][:, :2].mean(-1))
    assert out.exists()


def test_a_changed_model_key_cannot_be_evaluated_at_step_0(trained_run_dir, tmp_path):
    experiment = load_experiment("fine_tuning_curves")
    run = tmp_path / "run"
    shutil.copytree(trained_run_dir, run)
    config = json.loads((run / "config.json").read_text())
    config["model"]["pe"]["scaling"] = {"type": "pi", "factor": 2.0}
    (run / "config.json").write_text(json.dumps(config))
    assert experiment.start_overrides(run, trained_run_dir) == [
        "model.pe.scaling.factor=2.0", "model.pe.scaling.type=pi"]
    config["model"]["d_ff"] = 64
    (run / "config.json").write_text(json.dumps(config))
    with pytest.raises(UsageError, match="changed model.d_ff"):
        experiment.start_overrides(run, trained_run_dir)
