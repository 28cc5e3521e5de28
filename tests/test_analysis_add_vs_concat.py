"""experiments/add_vs_concat.py: parameter counts by formula, and the --quick run end to end."""

import importlib.util
import json
from pathlib import Path

import pytest

from pe_research.config import base_config
from pe_research.evaluation.compare import load_curve

REPO = Path(__file__).resolve().parents[1]


def load_experiment():
    spec = importlib.util.spec_from_file_location("add_vs_concat",
                                                  REPO / "experiments" / "add_vs_concat.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_concat_adds_exactly_the_input_projection():
    experiment = load_experiment()
    config = base_config("reverse_string", "sinusoidal")
    add = experiment.parameter_count(experiment.run_config(config, "add", 0))
    concat = experiment.parameter_count(experiment.run_config(config, "concat", 0))
    d_model = config.model.d_model
    assert concat - add == 2 * d_model * d_model + d_model  # kernel [2D, D] + bias [D]


@pytest.mark.slow
def test_quick_experiment_writes_one_comparison(tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "disabled")
    experiment = load_experiment()
    assert experiment.main(["--workdir", str(tmp_path), "--quick", "--seeds", "1",
                            "--metric", "sequence_accuracy", "--config.train.steps=4",
                            "--config.train.eval_every=4", "--config.train.log_every=2",
                            "--config.train.checkpoint_every=4"]) == 0
    out = tmp_path / "comparison"
    result = json.loads((out / "add_vs_concat.json").read_text())
    assert set(result["curves"]) == {"add", "concat"}
    assert result["parameters"]["concat"] - result["parameters"]["add"] == 2 * 16 * 16 + 16
    for combine, curve in result["curves"].items():
        (run_dir,) = curve["runs"]
        from_run = load_curve(run_dir, "sequence_accuracy", group_by="model.pe.combine")
        assert from_run.group == combine
        assert curve["lengths"] == from_run.lengths.tolist() == [3, 6, 9]
        assert curve["mean"] == pytest.approx(from_run.values.tolist())
    for name in ("add_vs_concat.png", "add_vs_concat.md", "comparison.png", "comparison.md"):
        assert (out / name).stat().st_size > 0
