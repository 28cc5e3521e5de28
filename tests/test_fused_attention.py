"""What keeps bfloat16 and cuDNN on a GPU's fast paths, checked on any backend: attention padded
to even lengths (cuDNN's backward needs them) equals the unpadded one, attention by key lengths
and a causal flag (a ``PrefixMask``, as cuDNN takes it) equals attention under the dense mask,
and the token embedding's gradient scatters into float32."""

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from tiny_models import forward, prefix_inputs, random_inputs, tiny_model

from pe_research.model.attention import fused_attention
from pe_research.model.masks import (
    PrefixMask,
    cross_mask,
    decoder_self_mask,
    encoder_self_mask,
    prefix_masks,
)
from pe_research.positional.explicit_attention import attention
from pe_research.positional.registry import SCHEMES

pytestmark = pytest.mark.battery  # every scheme (or architecture): make test runs it


def attention_inputs(T: int, S: int, bias_batch: int | None, seed: int = 0):
    """q ``[2, T, 2, 8]``, k and v ``[2, S, 2, 8]``, a bias ``[bias_batch, 2, T, S]`` (or None)
    and a mask hiding the second row's last two keys."""
    keys = jax.random.split(jax.random.key(seed), 4)
    q = jax.random.normal(keys[0], (2, T, 2, 8))
    k = jax.random.normal(keys[1], (2, S, 2, 8))
    v = jax.random.normal(keys[2], (2, S, 2, 8))
    bias = None if bias_batch is None else jax.random.normal(keys[3], (bias_batch, 2, T, S))
    mask = np.ones((2, T, S), bool)
    mask[1, :, -2:] = False
    return q, k, v, bias, jnp.asarray(mask)


@pytest.mark.parametrize(("T", "S", "bias_batch"),
                         [(5, 7, 1), (5, 6, 2), (4, 7, None), (1, 9, 1), (6, 8, 1)])
def test_attention_padded_to_even_lengths_equals_the_unpadded_one(T, S, bias_batch):
    q, k, v, bias, mask = attention_inputs(T, S, bias_batch)

    def loss(pad, q, k, v, bias):
        out = fused_attention(q, k, v, bias, mask, "xla", pad_to_even=pad)
        return jnp.sum(out * jnp.cos(out)), out

    grads = {}
    for pad in (False, True):
        (value, out), grad = jax.jit(jax.value_and_grad(
            lambda *a, pad=pad: loss(pad, *a), argnums=(0, 1, 2, 3), has_aux=True,
            allow_int=True))(q, k, v, bias)
        assert out.shape == q.shape
        grads[pad] = (value, out, grad)
    (value, out, grad), (value_p, out_p, grad_p) = grads[False], grads[True]
    np.testing.assert_allclose(out_p, out, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(value_p, value, rtol=1e-5)
    for g, g_p in zip(grad, grad_p, strict=True):
        if g is not None:
            np.testing.assert_allclose(g_p, g, rtol=1e-4, atol=1e-6)


def test_attention_pads_only_for_cudnn_by_default():
    q, k, v, bias, mask = attention_inputs(5, 7, 1)
    text = jax.jit(lambda *a: fused_attention(*a, mask, "xla")).lower(q, k, v, bias).as_text()
    assert "stablehlo.pad" not in text
    padded = jax.jit(lambda *a: fused_attention(*a, mask, "xla", pad_to_even=True)).lower(
        q, k, v, bias).as_text()
    assert "stablehlo.pad" in padded


@pytest.mark.parametrize(("T", "S", "causal", "bias_batch", "pad"), [
    (5, 5, False, None, False), (4, 7, False, None, False),
    (7, 7, True, None, False), (6, 6, True, 3, False), (5, 5, True, 1, True),
    (5, 7, False, 1, True), (3, 8, True, 1, False), (5, 9, True, None, True)])
def test_attention_by_key_lengths_equals_the_dense_mask(T, S, causal, bias_batch, pad):
    """Outputs and gradients of every row that sees a key; the row that sees none stays
    finite. ``pad``: cuDNN with a bias pads odd lengths on top (their mask is the lengths')."""
    q, k, v, bias, mask = prefix_inputs(T, S, causal, bias_batch)
    assert isinstance(mask, PrefixMask) and mask.causal == causal

    def run(by_lengths: bool):
        def loss(q, k, v, bias):
            out = fused_attention(q, k, v, bias, mask, "xla", pad_to_even=pad and by_lengths,
                                  by_lengths=by_lengths)
            return jnp.sum((out * jnp.cos(out))[:2]), out
        return jax.jit(jax.value_and_grad(loss, argnums=(0, 1, 2, 3), has_aux=True,
                                          allow_int=True))(q, k, v, bias)

    (value, out), grad = run(False)
    (value_l, out_l), grad_l = run(True)
    text = jax.jit(lambda *a: fused_attention(*a, mask, "xla", by_lengths=True)).lower(
        q, k, v, bias).as_text()
    assert "tensor<3x" + f"{T}x{S}xi1>" not in text  # the dense mask is not used at all
    assert bool(jnp.all(jnp.isfinite(out_l)))
    np.testing.assert_allclose(out_l[:2], out[:2], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(value_l, value, rtol=1e-5)
    for g, g_l in zip(grad, grad_l, strict=True):
        if g is not None:
            np.testing.assert_allclose(g_l[:2] if g_l.shape[0] == 3 else g_l,
                                       g[:2] if g.shape[0] == 3 else g, rtol=1e-4, atol=1e-6)


def test_cudnn_gets_the_bias_in_the_dtype_of_q(monkeypatch):
    """A float32 bias beside bfloat16 q went to cuDNN as it was, and its gradient came back
    wrong on an H200; xla keeps the float32 bias."""
    dtypes = []

    def attend(q, k, v, bias=None, **kwargs):
        dtypes.append((kwargs["implementation"], bias.dtype))
        return q

    monkeypatch.setattr(jax.nn, "dot_product_attention", attend)
    q, k, v, bias, prefix = prefix_inputs(6, 6, True, 1)
    q, k, v = (x.astype(jnp.bfloat16) for x in (q, k, v))
    for implementation in ("cudnn", "xla"):
        fused_attention(q, k, v, bias, prefix, implementation, by_lengths=True)
    assert dtypes == [("cudnn", jnp.bfloat16), ("xla", jnp.float32)]
    # xla's default, the written-out kernel, adds the float32 bias to float32 logits.
    written = fused_attention(q, k, v, bias, prefix, "xla")
    expected = attention(q, k, v, bias, prefix.dense)
    rounded = attention(q, k, v, bias.astype(jnp.bfloat16), prefix.dense)
    np.testing.assert_array_equal(written, expected)
    assert not np.array_equal(np.asarray(written), np.asarray(rounded))


def test_prefix_masks_are_the_dense_masks_with_their_key_lengths():
    source_mask = jnp.arange(6)[None] < jnp.array([6, 3, 0])[:, None]
    target_mask = jnp.arange(4)[None] < jnp.array([4, 1, 2])[:, None]
    (encoder,) = prefix_masks(source_mask)
    decoder, cross = prefix_masks(source_mask, target_mask)
    np.testing.assert_array_equal(encoder.dense, encoder_self_mask(source_mask))
    np.testing.assert_array_equal(decoder.dense, decoder_self_mask(target_mask))
    np.testing.assert_array_equal(cross.dense, cross_mask(target_mask, source_mask))
    np.testing.assert_array_equal(encoder.key_lengths, [6, 3, 0])
    np.testing.assert_array_equal(cross.key_lengths, [6, 3, 0])
    np.testing.assert_array_equal(decoder.key_lengths, [4, 1, 2])
    assert (encoder.causal, decoder.causal, cross.causal) == (False, True, False)


def scatter_types(text: str) -> set[str]:
    """Element types of every scatter's result in a StableHLO module's text."""
    types = set()
    for match in re.finditer(r"stablehlo\.scatter.*?\}\) : \(([^)]*)\)", text, re.DOTALL):
        types.add(re.search(r"tensor<[0-9x]*x?(\w+)>", match.group(1)).group(1))
    return types


@pytest.mark.parametrize("scheme", list(SCHEMES))
def test_bfloat16_gradients_scatter_into_float32_only(scheme):
    """The token embedding's gradient above all (before: a bfloat16 scatter-add, 28x slower on
    an H200); no scheme adds a bfloat16 scatter either (lowered only, nothing compiled)."""
    model = tiny_model(scheme, dtype="bfloat16")
    source, target = random_inputs()
    graphdef, params, rest = nnx.split(model, nnx.Param, ...)

    def loss(params):
        return jnp.sum(forward(nnx.merge(graphdef, params, rest), source, target))

    text = jax.jit(jax.grad(loss)).lower(params).as_text()
    assert scatter_types(text) == {"f32"}


def kernel_inputs(bias_shape, dtype=jnp.float32, E=8, D=8):
    """q ``[3, 5, 2, E]``, k ``[3, 7, 2, E]``, v ``[3, 7, 2, D]``, a bias of ``bias_shape`` (or
    None) and a mask: row 1 sees 4 keys, row 2 none (a batch-padding row)."""
    keys = jax.random.split(jax.random.key(0), 4)
    q = jax.random.normal(keys[0], (3, 5, 2, E), dtype)
    k = jax.random.normal(keys[1], (3, 7, 2, E), dtype)
    v = jax.random.normal(keys[2], (3, 7, 2, D), dtype)
    bias = None if bias_shape is None else jax.random.normal(keys[3], bias_shape, dtype)
    mask = jnp.broadcast_to(jnp.arange(7) < jnp.array([7, 4, 0])[:, None, None], (3, 5, 7))
    return q, k, v, bias, mask


def loss_and_grads(attend, q, k, v, bias):
    """Value and gradients (q, k, v, bias) of a loss that weighs every output differently."""
    def loss(q, k, v, bias):
        out = attend(q, k, v, bias)
        return jnp.sum(jnp.sin(out) * jnp.arange(1, out.shape[-1] + 1))
    argnums = (0, 1, 2) if bias is None else (0, 1, 2, 3)
    return jax.jit(jax.value_and_grad(loss, argnums=argnums))(q, k, v, bias)


@pytest.mark.parametrize("bias_shape", [None, (3, 2, 5, 7), (1, 2, 5, 7), (1, 2, 1, 7),
                                        (3, 1, 1, 7)])
def test_the_written_kernel_equals_jax_attention_with_its_gradients(bias_shape):
    """Values and gradients, batch-padding rows included, against jax's own XLA attention (its
    backward by autodiff); a broadcast bias gets its gradient summed over the broadcast axes."""
    q, k, v, bias, mask = kernel_inputs(bias_shape)
    value, grads = loss_and_grads(lambda *a: attention(*a, mask), q, k, v, bias)
    expected_value, expected_grads = loss_and_grads(
        lambda q, k, v, b: jax.nn.dot_product_attention(q, k, v, bias=b, mask=mask[:, None],
                                                        implementation="xla"), q, k, v, bias)
    np.testing.assert_allclose(value, expected_value, rtol=1e-5, atol=1e-4)
    for grad, expected in zip(grads, expected_grads, strict=True):
        assert grad.shape == expected.shape
        np.testing.assert_allclose(grad, expected, rtol=1e-5, atol=1e-6)


def test_the_written_kernel_matches_float64_with_keys_wider_than_values():
    """Keys and queries 12 wide over values 8 wide (PoPE's and FoX's layout), against the same
    attention by autodiff in float64."""
    q, k, v, bias, mask = kernel_inputs((1, 2, 5, 7), E=12)
    scale = 1 / np.sqrt(8)

    def autodiff(q, k, v, bias):
        logits = jnp.einsum("bthe,bshe->bhts", q, k) * scale + bias
        probs = jax.nn.softmax(jnp.where(mask[:, None], logits, -1e300), axis=-1)
        return jnp.einsum("bhts,bshd->bthd", probs, v)

    value, grads = loss_and_grads(lambda *a: attention(*a, mask), q, k, v, bias)
    with jax.enable_x64():
        wide = [np.asarray(x, np.float64) for x in (q, k, v, bias)]
        expected_value, expected_grads = loss_and_grads(autodiff, *wide)
        assert expected_value.dtype == np.float64
    np.testing.assert_allclose(value, expected_value, rtol=1e-5)
    for grad, expected in zip(grads, expected_grads, strict=True):
        np.testing.assert_allclose(grad, expected, rtol=1e-4, atol=1e-5)


def test_the_written_kernel_keeps_bfloat16_inputs_and_float32_logits():
    """bfloat16 q, k, v give bfloat16 outputs and gradients, and the same outputs as jax's XLA
    attention (float32 logits and softmax in both)."""
    q, k, v, bias, mask = kernel_inputs((1, 2, 5, 7), jnp.bfloat16)
    bias = bias.astype(jnp.float32)
    out = attention(q, k, v, bias, mask)
    expected = jax.nn.dot_product_attention(q, k, v, bias=bias, mask=mask[:, None],
                                            implementation="xla")
    assert out.dtype == jnp.bfloat16
    np.testing.assert_allclose(out.astype(np.float32), expected.astype(np.float32), atol=1e-2)
    _, grads = loss_and_grads(lambda *a: attention(*a, mask), q, k, v, bias)
    assert [g.dtype for g in grads] == [jnp.bfloat16] * 3 + [jnp.float32]
    wide = [x.astype(jnp.float32) for x in (q, k, v)]
    _, expected = loss_and_grads(lambda *a: attention(*a, mask), *wide, bias)
    for grad, exact in zip(grads, expected, strict=True):
        np.testing.assert_allclose(grad.astype(np.float32), exact,
                                   atol=0.03 * float(np.max(np.abs(exact))))


@pytest.mark.parametrize("scheme", ["t5", "pope", "fox"])
def test_a_bfloat16_model_gets_finite_gradients_through_the_written_kernel(scheme):
    """The fused path (T5's bias) and the schemes with wider keys (PoPE, FoX), computed: XLA-CPU
    refused a bfloat16 x bfloat16 -> float32 product in an earlier backward only when run."""
    model = tiny_model(scheme, dtype="bfloat16")
    source, target = random_inputs()
    graphdef, params, rest = nnx.split(model, nnx.Param, ...)

    def loss(params):
        return jnp.sum(forward(nnx.merge(graphdef, params, rest), source, target) ** 2)

    grads = jax.tree.leaves(jax.jit(jax.grad(loss))(params))
    assert all(bool(jnp.all(jnp.isfinite(g))) for g in grads)
    assert any(float(jnp.max(jnp.abs(g))) > 0 for g in grads)


def test_a_batch_1_bias_gets_the_rows_summed_as_a_product():
    """The model's XLA attention with a batch-1 bias equals the same bias repeated per row (its
    gradient the rows' sum), and the backward sums the rows as a product with ones."""
    q, k, v, bias, mask = prefix_inputs(5, 5, True, 1)

    def loss(bias, rows):
        out = fused_attention(q, k, v, jnp.repeat(bias, rows, 0), mask, "xla")
        return jnp.sum((out * jnp.cos(out))[:2])

    shared = jax.jit(jax.value_and_grad(loss), static_argnums=1)
    (value, grad), (repeated_value, repeated_grad) = shared(bias, 1), shared(bias, 3)
    np.testing.assert_allclose(value, repeated_value, rtol=1e-6)
    np.testing.assert_allclose(grad, repeated_grad, rtol=1e-5, atol=1e-7)
    text = jax.jit(jax.grad(loss), static_argnums=1).lower(bias, 1).as_text()
    assert re.search(r"stablehlo\.dot_general.*tensor<3xf32>, tensor<3x", text)
