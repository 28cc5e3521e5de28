"""Bad model input fails with one line naming the key, the value and what is valid."""

import jax.numpy as jnp
import pytest
from tiny_models import forward, random_inputs, tiny_config, tiny_model

from pe_research.core.errors import ConfigError
from pe_research.positional import SCHEMES, default_pe_config
from pe_research.positional.learned import Learned


def test_unknown_scheme_lists_valid_names():
    with pytest.raises(ConfigError, match=r"model.pe.type='rotary'.*alibi.*rope") as error:
        tiny_config(pe={"type": "rotary"})
    assert "\n" not in str(error.value)


def test_d_model_not_divisible_by_heads():
    with pytest.raises(ConfigError, match=r"model.d_model=18 .*divisible by model.num_heads=4"):
        tiny_config(d_model=18, num_heads=4)


def test_rope_needs_even_head_dim():
    with pytest.raises(ConfigError, match=r"model.d_model=18 .*even.*head dim 9"):
        tiny_config("rope", d_model=18, num_heads=2)


def test_unknown_pe_key_for_scheme():
    with pytest.raises(ConfigError, match=r"model.pe.max_len.*scheme 'rope'"):
        tiny_config("rope", pe={"max_len": 10})


def test_learned_table_shorter_than_positions():
    model = tiny_model("learned", pe={"max_len": 4})
    source, target = random_inputs(source_len=6)
    with pytest.raises(ConfigError, match=r"model.pe.max_len=4 .*positions up to 5"):
        forward(model, source, target)
    with pytest.raises(ConfigError, match=r"max_len >= 600"):
        Learned.check_positions({"max_len": 512}, 600)


def test_bad_choices_name_the_valid_ones():
    with pytest.raises(ConfigError, match=r"model.norm='mid'.*\('pre', 'post'\)"):
        tiny_config(norm="mid")
    with pytest.raises(ConfigError, match=r"model.pe.combine='mul'"):
        tiny_config("sinusoidal", pe={"combine": "mul"})
    with pytest.raises(ConfigError, match=r"model.layers"):
        tiny_config(layers=3)


def test_every_scheme_has_a_complete_default_block():
    for name, cls in SCHEMES.items():
        block = default_pe_config(name)
        assert block["type"] == name and cls.name == name
        tiny_config(name, pe=block)  # validates


def test_cudnn_request_falls_back_to_xla_on_cpu(caplog):
    model = tiny_model("rope", attention_implementation="cudnn")
    assert model.encoder_layers[0].self_attention.implementation == "xla"
    source, target = random_inputs()
    assert jnp.all(jnp.isfinite(forward(model, source, target)))


def test_model_line_names_the_stack_key_and_counts_parameters_by_formula():
    """Decoder-only, tied output, no position parameters: V d + 2 d (final norm) + per layer
    4 d^2 (q, k, v, out) + 2 d d_ff + d_ff + d (feed-forward biases) + 4 d (two norms)."""
    from flax import nnx

    from pe_research.config import base_config
    from pe_research.model import build_model, model_line

    config = base_config(task="copy", pe="none")
    config.model.update(architecture="decoder_only", d_model=16, num_heads=2, d_ff=32,
                        num_decoder_layers=3, num_encoder_layers=7)
    params = nnx.state(build_model(config, 10), nnx.Param)
    d, d_ff, layers = 16, 32, 3
    count = 10 * d + 2 * d + layers * (4 * d * d + 2 * d * d_ff + d_ff + d + 4 * d)
    assert model_line(config, 10, params) == (
        "model: decoder-only, 3 layers (model.num_decoder_layers), d_model 16, 2 heads, "
        f"d_ff 32, positions none; {count:,} parameters")
    config.model.architecture = "encoder_decoder"
    config.model.pe = default_pe_config("dape")
    assert "2+3 layers" not in model_line(config, 10, params)
    assert "7+3 layers, d_model 16, 2 heads, d_ff 32, positions dape over alibi" in model_line(
        config, 10, params)
