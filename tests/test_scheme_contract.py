"""The contract every registered scheme keeps, tested from its registry line alone.

For each entry of ``SCHEMES`` (and each entry of ``VARIANTS``, the options that change a
scheme's math) inside the tiny encoder-decoder: op by op == jit, a gradient reaches every
parameter of the model (no dead per-layer copies) and the scheme has parameters exactly where
its standalone instance does, positions shared by the rows equal them repeated per row,
padding changes no real output, the decoder is causal, cached decoding equals teacher forcing,
a scheme that declares itself ``relative`` is blind to a shift of all positions, bfloat16
compute gives a finite loss, and the model config survives ``config.json``. Golden values of
each scheme's formula live in the per-scheme test files.
"""

from __future__ import annotations

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from tiny_models import VOCAB, arange_positions, random_inputs, tiny_config, tiny_model

from pe_research.config import base_config, from_mapping
from pe_research.core.errors import ConfigError
from pe_research.model import ModelConfig
from pe_research.model.metrics import token_cross_entropy
from pe_research.positional import (
    DECODER_SELF,
    ENCODER_SELF,
    SCHEMES,
    build_scheme,
    check_pe_config,
    default_pe_config,
    random_positions,
)
from pe_research.runs.run_dir import RunDir, save_config

pytestmark = pytest.mark.battery  # every scheme (or architecture): make test runs it

# Options that change a scheme's math: each is a contract entry of its own.
VARIANTS: dict[str, dict] = {
    "alibi:learnable_slopes_on_1_of_2_heads": {"heads": 1, "learnable_slopes": True},
    "rope:partial_and_p_rope": {"rotary_fraction": 0.5, "drop_lowest_frequencies": 0.5},
    "rope:hope": {"hope_train_length": 16},
    "dynamic_bias:log_distance_norm_depth_3": {"log_distance": True, "norm": True,
                                               "mlp_depth": 3},
    "dape:on_kerple_log": {"base": "kerple_log"},
    "pope:uniform_phase": {"bias_init": "uniform"},
    # Logits scaled with the number of keys: on a bias scheme (the bias scales too, s learned),
    # and on a rotation.
    "alibi:ssmax": {"logit_scaling": "ssmax"},
    "rope:log_n_scaling": {"logit_scaling": "log_n_scaling"},
}
# Biases that read query or key content, so that they differ per example.
CONTENT_BIASES = {"cope", "fox", "dape"}
# A representative per-layer mix (RNoPE-like, two layers per stack): its own entry, too.
PER_LAYER = {"layers": ("rope", {"type": "alibi", "heads": 1})}
VARIANTS["none:per_layer_rope_then_alibi"] = PER_LAYER
ENTRIES = [(name, {}) for name in sorted(SCHEMES)] + [
    (variant.split(":")[0], pe) for variant, pe in sorted(VARIANTS.items())]
IDS = sorted(SCHEMES) + sorted(VARIANTS)


def entry_model(name: str, pe: dict, **overrides) -> nnx.Module:
    if pe.get("layers"):
        overrides = {"num_encoder_layers": 2, "num_decoder_layers": 2, **overrides}
    return tiny_model(name, pe=dict(pe), **overrides)


def masks(source, target):
    return jnp.ones(source.shape, bool), jnp.ones(target.shape, bool)


def loss_of(model, source, target, s_pos, t_pos, key=None):
    s_mask, t_mask = masks(source, target)
    logits = model(source, target, s_pos, t_pos, s_mask, t_mask, dropout_key=key)
    return token_cross_entropy(logits, target, t_mask)


def scheme_parameters(name: str, grads) -> list[tuple[str, jax.Array]]:
    """Gradient leaves of the scheme instances that the model calls."""
    pe = SCHEMES[name]
    found = []
    for path, grad in jax.tree_util.tree_leaves_with_path(grads):
        keys = [getattr(k, "key", None) for k in path]
        in_encoder = keys[0] == "encoder_layers" and "own_pe" in keys
        in_decoder = keys[0] == "decoder_layers" and "own_pe" in keys
        if ((in_encoder and ENCODER_SELF in pe.acts_in)
                or (in_decoder and DECODER_SELF in pe.acts_in)
                or (keys[0] == "pe" and pe.shared_across_layers)):
            found.append((jax.tree_util.keystr(path), grad))
    return found


@pytest.mark.parametrize(("name", "pe"), ENTRIES, ids=IDS)
def test_the_decoder_is_causal_and_padding_changes_no_real_output(name, pe):
    """One forward program over five targets of one source: changing the tokens after step t
    leaves the logits up to t as they are, changing any one token up to t moves step t's;
    padding every row changes no real logit."""
    graph, state = nnx.split(entry_model(name, pe))
    model = jax.jit(lambda state, *inputs: nnx.merge(graph, state)(*inputs))
    source, target = random_inputs(batch=1, source_len=6, target_len=5)
    t = 2
    changed = 3 + (target[0] - 2) % (VOCAB - 3)  # each token another real (non-special) one
    step = jnp.arange(5)
    # Row 1: the tokens after t changed; row 2 + j: token j <= t changed.
    rows = [target[0], jnp.where(step > t, changed, target[0]),
            *(jnp.where(step == j, changed, target[0]) for j in range(t + 1))]
    source, target = jnp.repeat(source, len(rows), 0), jnp.stack(rows)
    s_mask, t_mask = masks(source, target)
    batch = len(rows)
    logits = model(state, source, target, arange_positions(batch, 6), arange_positions(batch, 5),
                   s_mask, t_mask)
    np.testing.assert_allclose(logits[1, :t + 1], logits[0, :t + 1], atol=1e-6, rtol=0)
    moved = jnp.max(jnp.abs(logits[2:, t] - logits[0, t]), axis=-1)
    assert float(jnp.min(moved)) > 1e-4, f"step {t} does not see each earlier token: {moved}"
    pad = lambda x, n: jnp.pad(x, ((0, 0), (0, n)))  # noqa: E731
    padded = model(state, pad(source, 4), pad(target, 3), arange_positions(batch, 10),
                   arange_positions(batch, 8), pad(s_mask, 4), pad(t_mask, 3))
    np.testing.assert_allclose(padded[:, :5], logits, atol=1e-5)


@pytest.mark.parametrize(("name", "pe"), ENTRIES, ids=IDS)
def test_cached_decoding_equals_teacher_forcing_and_relative_schemes_ignore_shifts(name, pe):
    model = entry_model(name, pe)
    graph, state = nnx.split(model)
    decode_step = jax.jit(lambda state, *args: nnx.merge(graph, state).decode_step(*args))
    source, target = random_inputs()
    s_mask, t_mask = masks(source, target)
    # Gapped positions: the cache must carry them, not assume 0, 1, 2, ...; rows 2-3 repeat
    # rows 0-1 with every position shifted by 37.
    s_pos = random_positions(jax.random.key(1), s_mask, 48)
    t_pos = random_positions(jax.random.key(2), t_mask, 48)
    s_pos, t_pos = jnp.concatenate([s_pos, s_pos + 37]), jnp.concatenate([t_pos, t_pos + 37])
    source, target, s_mask, t_mask = (jnp.concatenate([x, x])
                                      for x in (source, target, s_mask, t_mask))

    @jax.jit
    def teacher_forced(state):
        model = nnx.merge(graph, state)
        encoded = model.encode(source, s_pos, s_mask)
        return encoded, model.decode(target, t_pos, encoded, s_pos, s_mask, t_mask)

    encoded, full = teacher_forced(state)
    shift = float(jnp.max(jnp.abs(full[2:] - full[:2])))
    if SCHEMES[name].relative:
        assert shift < 2e-4, f"{name} declares itself relative but sees a shift ({shift})"
    # Longer than the target: 3 slots stay empty (their positions: 0, never seen).
    cache = model.init_cache(jnp.pad(t_pos, ((0, 0), (0, 3))), encoded)
    for t in range(target.shape[1]):
        logits, cache = decode_step(state, target[:, t:t + 1], t_pos[:, t:t + 1], s_pos, s_mask,
                                    cache)
        np.testing.assert_allclose(logits, full[:, t], atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize(("name", "pe"), ENTRIES, ids=IDS)
def test_eager_equals_jit_every_parameter_learns_and_shared_positions_equal_rows(name, pe):
    """Op by op (the scheme's Python on concrete arrays) equals jit; a gradient reaches every
    parameter, and the scheme's where its standalone instance has them; ``[1, T]`` positions (a
    batch-1 bias, broadcast by attention) against the same positions repeated per row, with
    padding, through training and through cached decoding."""
    model = entry_model(name, pe)
    graph, params, rest = nnx.split(model, nnx.Param, ...)
    source, target = random_inputs(batch=3, source_len=6, target_len=5)
    s_mask = jnp.arange(6)[None, :] < jnp.asarray([[6], [4], [2]])
    t_mask = jnp.arange(5)[None, :] < jnp.asarray([[5], [3], [5]])
    s_pos, t_pos = arange_positions(1, 6, 3), arange_positions(1, 5, 2)
    s_rows, t_rows = jnp.repeat(s_pos, 3, 0), jnp.repeat(t_pos, 3, 0)

    def loss(params, s_pos, t_pos):
        logits = nnx.merge(graph, params, rest)(source, target, s_pos, t_pos, s_mask, t_mask)
        return token_cross_entropy(logits, target, t_mask), logits

    grad = jax.value_and_grad(loss, has_aux=True)
    # One program for both position layouts: one compile per scheme, not two.
    ((shared_loss, shared), shared_grads), ((rows_loss, rows), rows_grads) = jax.jit(
        lambda params: (grad(params, s_pos, t_pos), grad(params, s_rows, t_rows)))(params)
    eager_loss, eager = loss(params, s_rows, t_rows)
    assert np.isfinite(float(eager_loss))
    np.testing.assert_allclose(rows, eager, atol=1e-5, rtol=1e-5)
    np.testing.assert_allclose(rows_loss, eager_loss, rtol=1e-5)
    np.testing.assert_allclose(shared, rows, atol=1e-5, rtol=1e-5)
    np.testing.assert_allclose(shared_loss, rows_loss, rtol=1e-6)
    for a, b in zip(jax.tree.leaves(shared_grads), jax.tree.leaves(rows_grads), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6)
    flat = jax.tree_util.tree_flatten_with_path(rows_grads)[0]
    dead = [jax.tree_util.keystr(path) for path, g in flat if not jnp.any(g != 0)]
    assert dead == [], f"parameters without gradient (dead copies?): {dead}"
    required = scheme_parameters(name, rows_grads)
    standalone = build_scheme({**default_pe_config(name), **pe}, d_model=16, num_heads=2,
                              rngs=nnx.Rngs(0))
    assert bool(required) == bool(jax.tree.leaves(nnx.state(standalone, nnx.Param)))
    for path, g in required:
        assert float(jnp.max(jnp.abs(g))) > 0, f"no gradient reaches {path}"
    pe_instance = model.pe if SCHEMES[name].shared_across_layers else None
    if pe_instance is not None and DECODER_SELF in type(pe_instance).acts_in:
        q = jnp.zeros((3, 5, 2, 8))
        bias = pe_instance.logit_bias(q, q, t_pos, t_pos, DECODER_SELF)
        assert bias is None or bias.shape[0] in (1, 3)  # 3 only for content-dependent biases
        if bias is not None and name not in CONTENT_BIASES:
            assert bias.shape == (1, 2, 5, 5), "a position-only bias must stay batch-1"

    @jax.jit  # one compile; op by op, the encoder and 5 decoding steps took most of the test
    def start(params):
        model = nnx.merge(graph, params, rest)
        # [1, T]: one row of positions for the batch
        return model.init_cache(t_pos, model.encode(source, s_pos, s_mask))

    decode_step = jax.jit(lambda params, *args: nnx.merge(graph, params, rest).decode_step(*args))
    cache = start(params)
    for t in range(5):
        logits, cache = decode_step(params, target[:, t:t + 1], t_pos[:, t:t + 1], s_pos, s_mask,
                                    cache)
        visible = t_mask[:, t]  # padded query rows are no output
        np.testing.assert_allclose(logits[visible], rows[visible, t], atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize(("name", "pe"), ENTRIES, ids=IDS)
def test_a_key_is_transformed_from_itself_and_its_position_alone(name, pe):
    """The decoding cache stores keys transformed once, as they arrive: a key's transform may
    not read the queries, their positions or the other keys."""
    model = entry_model(name, pe)
    schemes = [layer.own_pe or model.pe for layer in model.decoder_layers]
    k_q, k_k, k_p = jax.random.split(jax.random.key(7), 3)
    q, k = jax.random.normal(k_q, (2, 3, 2, 8)), jax.random.normal(k_k, (2, 5, 2, 8))
    q_pos, k_pos = arange_positions(2, 3), random_positions(k_p, jnp.ones((2, 5), bool), 40)
    for scheme in schemes:
        _, keys = scheme.transform_qk(q, k, q_pos, k_pos, DECODER_SELF)
        _, first_two = scheme.transform_qk(-2 * q[:, :1], k[:, :2], q_pos[:, :1] + 9,
                                           k_pos[:, :2], DECODER_SELF)
        np.testing.assert_allclose(first_two, keys[:, :2], rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize(("name", "pe"), ENTRIES, ids=IDS)
def test_bfloat16_compute_gives_a_finite_loss(name, pe):
    graph, state = nnx.split(entry_model(name, pe, dtype="bfloat16"))
    source, target = random_inputs()
    loss = jax.jit(lambda state: loss_of(nnx.merge(graph, state), source, target,
                                         arange_positions(2, 6), arange_positions(2, 5)))(state)
    assert loss.dtype == jnp.float32 and np.isfinite(float(loss))


@pytest.mark.parametrize(("name", "pe"), ENTRIES, ids=IDS)
def test_the_scheme_says_whether_its_attention_stays_on_the_fused_kernel(name, pe):
    """``uses_fused_attention`` (what benchmarks report as cuDNN-eligible) matches the hook
    (traced, not run: whether the hook returns an output is known from its trace)."""
    model = entry_model(name, pe)
    schemes = [layer.own_pe or model.pe for layer in model.decoder_layers]
    x = jax.random.normal(jax.random.key(0), (1, 3, 2, 8))
    positions, mask = arange_positions(1, 3), jnp.tril(jnp.ones((3, 3), bool))[None]
    for scheme in schemes:
        def attend(x, scheme=scheme):
            q, k = scheme.transform_qk(x, x, positions, positions, DECODER_SELF)
            bias = scheme.logit_bias(q, k, positions, positions, DECODER_SELF)
            return scheme.explicit_attention(q, k, x, bias, mask, positions, positions,
                                             DECODER_SELF)

        out = jax.eval_shape(attend, x)
        assert (out is None) == scheme.uses_fused_attention
        assert out is None or out.shape == x.shape


@pytest.mark.parametrize(("name", "pe"), ENTRIES, ids=IDS)
def test_config_survives_config_json(name, pe, tmp_path):
    config = base_config(task="copy", pe=name)
    config.model.pe.update(pe)
    stored = json.loads(save_config(config, tmp_path).read_text())
    assert stored == json.loads(RunDir(tmp_path).config.read_text())
    restored = from_mapping(stored)
    assert restored.model.pe.to_dict() == config.model.pe.to_dict()
    fields = {**restored.model.to_dict(), "vocab_size": 13}
    assert ModelConfig.from_mapping(fields) == ModelConfig.from_mapping(
        {**config.model.to_dict(), "vocab_size": 13})
    assert tiny_config(name, pe=dict(pe)).pe["type"] == name


def test_per_layer_schemes_build_their_own_instances():
    model = tiny_model("transformer_xl", num_encoder_layers=2)
    first, second = (layer.own_pe for layer in model.encoder_layers)
    assert first is not None and second is not None
    assert not np.allclose(first.u[...], second.u[...])


def test_a_layer_pattern_repeats_over_each_stack_and_each_layer_gets_its_instance():
    model = tiny_model("rope", num_encoder_layers=5, num_decoder_layers=2,
                       pe={"layers": ("rope", "rope", "rope", "none")})
    names = [type(layer.own_pe).__name__ for layer in model.encoder_layers]
    assert names == ["RoPE", "RoPE", "RoPE", "NoPE", "RoPE"]
    assert [type(layer.own_pe).__name__ for layer in model.decoder_layers] == ["RoPE", "RoPE"]


def test_one_entry_pattern_equals_the_scheme_everywhere():
    # RoPE has no parameters, so both models hold the same parameters from the same seed.
    source, target = random_inputs()
    s_mask, t_mask = masks(source, target)
    args = (source, target, arange_positions(2, 6), arange_positions(2, 5), s_mask, t_mask)
    plain = tiny_model("rope", num_encoder_layers=2)(*args)
    pattern = tiny_model("none", num_encoder_layers=2, pe={"layers": ("rope",)})(*args)
    np.testing.assert_allclose(pattern, plain, atol=1e-6)
    mixed = tiny_model("none", num_encoder_layers=2, pe={"layers": ("rope", "none")})(*args)
    assert float(jnp.max(jnp.abs(mixed - plain))) > 1e-4


def test_an_entry_of_the_models_own_type_takes_its_options():
    model = tiny_model("alibi", num_heads=2, pe={"heads": 1, "layers": ("alibi", "t5")})
    first = model.encoder_layers[0].own_pe
    np.testing.assert_allclose(first.current_slopes()[1], 0.0)  # heads=1 carried over
    assert type(tiny_model("alibi", num_encoder_layers=2, pe={"layers": ("alibi", "t5")})
                .encoder_layers[1].own_pe).__name__ == "T5Bias"


@pytest.mark.parametrize(("layers", "message"), [
    (("rope", "learned"), r"model.pe.layers\[1\]='learned'.*at the input"),
    (("rope", "nope"), r"model.pe.layers\[1\]='nope'.*choose one of"),
    (({"type": "alibi", "slope": 2},), r"model.pe.layers\[0\].slope=2.*not a key"),
    (({"type": "rope", "rotary_fraction": 2.0},), r"model.pe.rotary_fraction"),
    ((3,), r"model.pe.layers\[0\]=3.*a scheme name"),
])
def test_bad_layer_entries_are_one_line_config_errors(layers, message):
    pe = {**default_pe_config("rope"), "layers": layers}
    with pytest.raises(ConfigError, match=message):
        check_pe_config(pe, d_model=16, num_heads=2)
