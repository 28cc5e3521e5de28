"""Add vs concat vs split: parameter counts by formula, the split input exactly, the experiment."""

import json

import jax.numpy as jnp
import numpy as np
import pytest
from conftest import load_experiment
from tiny_models import arange_positions, random_inputs, tiny_config, tiny_model

from pe_research.analysis.vectors import input_parts
from pe_research.config import base_config
from pe_research.core.errors import ConfigError
from pe_research.evaluation.compare import load_curve
from pe_research.positional.sinusoidal import sinusoidal
from pe_research.tasks import get_task


def test_concat_adds_the_projection_and_split_halves_the_embedding():
    experiment = load_experiment("add_vs_concat")
    config = base_config("reverse_string", "sinusoidal")
    count = {c: experiment.parameter_count(experiment.run_config(config, c, 0))
             for c in experiment.COMBINES}
    d_model = config.model.d_model
    vocab = get_task(config.task).vocabulary.size
    assert count["concat"] - count["add"] == 2 * d_model * d_model + d_model  # [2D, D] + [D]
    assert count["add"] - count["split"] == vocab * d_model // 2  # embedding [V, D/2]


@pytest.mark.parametrize("scheme", ["sinusoidal", "learned"])
def test_split_input_is_half_token_half_position_and_analysis_splits_it(scheme):
    model = tiny_model(scheme, tie_output=False, pe={"combine": "split"})
    tokens, _ = random_inputs(batch=2, source_len=6)
    positions = arange_positions(2, 6)
    x = model.embed_inputs(tokens, positions, None)
    half = 8  # d_model 16
    np.testing.assert_allclose(x[..., :half], model.embed(tokens) * np.sqrt(half), rtol=1e-6)
    np.testing.assert_allclose(x[..., half:], model.pe.input_vectors(positions), rtol=1e-6)
    if scheme == "sinusoidal":
        np.testing.assert_allclose(x[..., half:], sinusoidal(positions, half), rtol=1e-6)
    token_part, position_part = input_parts(model, tokens, positions)
    np.testing.assert_allclose(token_part + position_part, x, rtol=1e-6)
    assert float(jnp.abs(jnp.sum(token_part * position_part))) == 0.0  # orthogonal halves


def test_split_needs_an_untied_output_and_an_even_width():
    with pytest.raises(ConfigError, match="model.tie_output=True is invalid"):
        tiny_config("sinusoidal", pe={"combine": "split"})
    with pytest.raises(ConfigError, match="model.d_model=17 is invalid: must be even"):
        tiny_config("learned", d_model=17, num_heads=1, tie_output=False,
                    pe={"combine": "split"})


@pytest.mark.slow
def test_quick_experiment_writes_one_comparison(tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "disabled")
    experiment = load_experiment("add_vs_concat")
    assert experiment.main(["--workdir", str(tmp_path), "--quick", "--seeds", "1",
                            "--metric", "sequence_accuracy", "--config.train.steps=4",
                            "--config.train.eval_every=4", "--config.train.log_every=2",
                            "--config.train.checkpoint_every=4"]) == 0
    out = tmp_path / "comparison"
    result = json.loads((out / "add_vs_concat.json").read_text())
    assert set(result["curves"]) == {"add", "concat", "split"}
    assert result["parameters"]["concat"] - result["parameters"]["add"] == 2 * 16 * 16 + 16
    for combine, curve in result["curves"].items():
        (run_dir,) = curve["runs"]
        from_run = load_curve(run_dir, "sequence_accuracy", group_by="model.pe.combine")
        assert from_run.group == combine
        assert curve["lengths"] == from_run.lengths.tolist() == [3, 6, 9]
        assert curve["mean"] == pytest.approx(from_run.values.tolist())
    for name in ("add_vs_concat.png", "add_vs_concat.md", "comparison.png", "comparison.md"):
        assert (out / name).stat().st_size > 0
