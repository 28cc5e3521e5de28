"""Head ablation (model.ablated_heads): a zeroed head is the model with that head's output
projection rows zeroed, on every architecture and in cached decoding; bad entries are one line."""

from __future__ import annotations

import json
import shutil

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import experiment_path, run_script_here
from flax import nnx
from test_architectures import logits_of, ragged_batch
from tiny_models import spread_parameters, tiny_config

from pe_research.core.errors import ConfigError
from pe_research.evaluation.range_eval import evaluate_run
from pe_research.model import SingleStackTransformer
from pe_research.model.decoding import greedy_decode, naive_greedy_decode
from pe_research.model.inputs import batch_positions
from pe_research.model.transformer import Seq2SeqTransformer
from pe_research.runs.restore import load_run

SCRIPT = experiment_path("head_ablation")
# (architecture, model.ablated_heads, the attention modules it names: (layer list, index, attr))
CASES = [
    ("decoder_only", "1:0", [("layers", 1, "self_attention", 0)]),
    ("decoder_only", "0:1,1:0", [("layers", 0, "self_attention", 1),
                                 ("layers", 1, "self_attention", 0)]),
    ("encoder_only", "0:1", [("layers", 0, "self_attention", 1)]),
    ("encoder_decoder", "encoder.1:1", [("encoder_layers", 1, "self_attention", 1)]),
    ("encoder_decoder", "decoder.0:0,cross.1:1",
     [("decoder_layers", 0, "self_attention", 0), ("decoder_layers", 1, "cross_attention", 1)]),
]


def two_layer_model(architecture: str, ablated_heads: str = "", seed: int = 1):
    config = tiny_config("t5", architecture=architecture, num_encoder_layers=2,
                         num_decoder_layers=2, ablated_heads=ablated_heads)
    kind = Seq2SeqTransformer if architecture == "encoder_decoder" else SingleStackTransformer
    return kind(config, rngs=nnx.Rngs(seed))


@pytest.mark.parametrize(("architecture", "ablated", "sites"), CASES)
def test_an_ablated_head_is_its_output_rows_zeroed(architecture, ablated, sites):
    batch = ragged_batch()
    ablated_model = two_layer_model(architecture, ablated)
    reference = two_layer_model(architecture)
    for stack, layer, attribute, head in sites:
        output = getattr(getattr(reference, stack)[layer], attribute).output
        output.kernel.value = output.kernel.value.at[head].set(0.0)  # kernel [H, Dh, D]
    expected = logits_of(reference, batch)
    np.testing.assert_allclose(logits_of(ablated_model, batch), expected, atol=1e-6, rtol=1e-6)
    unablated = logits_of(two_layer_model(architecture), batch)
    assert float(jnp.max(jnp.abs(unablated - expected))) > 1e-3  # the head mattered


def spread(model):
    """``model`` with every parameter redrawn N(0, 1), so greedy outputs vary by position."""
    return nnx.merge(*spread_parameters(model))


def test_cached_decoding_keeps_the_ablation():
    model = spread(two_layer_model("decoder_only", "0:0,1:1"))
    batch = ragged_batch()
    positions = batch_positions(model.config.pe, batch, jax.random.key(0), False, "decoder_only")
    args = (model, batch["source"], positions[0], batch["source_mask"], positions[1])
    cached = greedy_decode(*args, eos_id=-1)
    np.testing.assert_array_equal(cached, naive_greedy_decode(*args, eos_id=-1))
    unablated = spread(two_layer_model("decoder_only"))
    assert not np.array_equal(cached, greedy_decode(unablated, *args[1:], eos_id=-1))


@pytest.mark.parametrize(("architecture", "text", "message"), [
    ("decoder_only", "2:0", "layer 2 does not exist; the model has 2 (0 to 1)"),
    ("decoder_only", "1:2", "head 2 does not exist; the model has 2 (0 to 1)"),
    ("decoder_only", "cross.0:0", "'cross.0:0' is not LAYER:HEAD"),
    ("decoder_only", "1-0", "'1-0' is not LAYER:HEAD"),
    ("encoder_decoder", "0:0", "is not encoder.LAYER:HEAD, decoder.LAYER:HEAD or cross"),
    ("encoder_decoder", "cross.2:0", "layer 2 does not exist"),
])
def test_a_bad_entry_is_one_config_error(architecture, text, message):
    with pytest.raises(ConfigError, match="model.ablated_heads") as error:
        two_layer_model(architecture, text)
    assert message in str(error.value) and "\n" not in str(error.value)


def test_a_trained_run_is_restored_with_heads_ablated(trained_run_dir):
    run = load_run(trained_run_dir, overrides=["model.ablated_heads=decoder.0:0,cross.0:1"])
    model = run.model
    assert model.decoder_layers[0].self_attention.ablated == (0,)
    assert model.decoder_layers[0].cross_attention.ablated == (1,)
    assert all(layer.self_attention.ablated == () for layer in model.encoder_layers)


@pytest.mark.slow
def test_the_script_reports_each_heads_exact_match_as_a_zeroed_head_evaluates(
        trained_run_dir, tmp_path):
    run_dir = tmp_path / "group" / "seed_0"
    shutil.copytree(trained_run_dir, run_dir)  # the script writes eval/ files into the run
    out, numbers = tmp_path / "ablation.png", tmp_path / "ablation.json"
    done = run_script_here(
        SCRIPT, str(run_dir.parent), "--lengths", "4,12", "--show", "0", "--out", str(out),
        "--json", str(numbers))
    assert done.returncode == 0, done.stderr
    assert out.stat().st_size > 0
    result = json.loads(numbers.read_text())["groups"][str(run_dir.parent)]["runs"]["seed_0"]
    assert sorted(result["ablated"]) == ["cross.0:0", "cross.0:1", "decoder.0:0", "decoder.0:1",
                                         "encoder.0:0", "encoder.0:1"]
    run = load_run(run_dir)
    intact = evaluate_run(run, (4, 12)).rows
    np.testing.assert_allclose(result["intact"], [100 * row.exact_match for row in intact])
    # The script zeroes weights; the config key zeroes the head's output: the same numbers, on
    # every metric (loss too, which an untrained run's 0 % exact match would not show).
    ablated = evaluate_run(load_run(run_dir, None, ["model.ablated_heads=cross.0:1"]), (4, 12))
    written = json.loads((run_dir / "eval" / "ablate_cross_0_1.json").read_text())
    assert [100 * row["exact_match"] for row in written["rows"]] == result["ablated"]["cross.0:1"]
    for row, expected in zip(written["rows"], ablated.rows, strict=True):
        assert row == pytest.approx(expected.as_dict(), rel=1e-5)
    assert [row["loss"] for row in written["rows"]] != pytest.approx([row.loss for row in intact],
                                                                    rel=1e-3)
    assert "model.ablated_heads=cross.0:1" in written["overrides"]
    assert " cross.0:1: " in done.stdout and "seed_0: intact" in done.stdout
    # Six ablations, one program per batch shape: as many as the intact eval compiled.
    intact_record = json.loads((run_dir / "eval" / "as_trained.json").read_text())
    assert result["compilations"] == intact_record["compilations"] == len(
        {tuple(shape) for shape in intact_record["compiled_shapes"]})


@pytest.mark.parametrize(("arguments", "message"), [
    (["--key", "model.pe.max_distance"], "error: --key and --value go together"),
    (["--layers", "3"], "error: --layers 3: "),
    (["--lengths", "2,4"], "error: --lengths 2,4: give lengths up to and beyond 8"),
])
def test_the_script_refuses_bad_arguments_in_one_line(trained_run_dir, arguments, message):
    done = run_script_here(SCRIPT, str(trained_run_dir), *arguments)
    assert done.returncode == 2 and done.stderr.startswith(message), done.stderr
    assert done.stderr.count("\n") == 1
