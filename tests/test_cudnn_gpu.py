"""cuDNN attention against XLA's, on a GPU only (skipped elsewhere; CI has no GPU).

Run on a GPU machine with ``python -m pytest tests/test_cudnn_gpu.py``. cuDNN in bfloat16 by
key lengths and a causal flag (``PrefixMask``), padded to even lengths, is compared with XLA's
dense-mask attention in float32: outputs and gradients within bfloat16's error, rows that see
no key finite. The attention-level cases passed on an H200 (2026-11-26, relative errors
1.8e-3 to 6.7e-3, on other random draws of the same shapes; benchmarks/RESULTS.md); the
model-level ones (encoder-decoder, and a language model by key lengths) had not run there yet.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from tiny_models import VOCAB, arange_positions, prefix_inputs, tiny_config

from pe_research.model import Seq2SeqTransformer, SingleStackTransformer
from pe_research.model.attention import fused_attention

pytestmark = pytest.mark.skipif(jax.default_backend() != "gpu", reason="needs a GPU with cuDNN")


def relative_error(a, b) -> float:
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.linalg.norm(a - b) / max(np.linalg.norm(b), 1e-30))


@pytest.mark.parametrize(("T", "S", "causal", "with_bias"), [
    (255, 255, False, False), (255, 255, True, False), (255, 256, False, False),
    (255, 255, True, True), (254, 256, False, True), (7, 7, True, False)])
def test_cudnn_by_key_lengths_equals_xla_with_the_dense_mask(T, S, causal, with_bias):
    q, k, v, bias, mask = prefix_inputs(T, S, causal, 1 if with_bias else None, head_dim=64)

    def gradients(implementation, dtype):
        def loss(q, k, v, bias):
            cast = lambda x: None if x is None else x.astype(dtype)  # noqa: E731
            out = fused_attention(cast(q), cast(k), cast(v), cast(bias), mask, implementation)
            out = out.astype(jnp.float32)
            return jnp.sum((out * jnp.cos(out))[:2]), out
        return jax.jit(jax.value_and_grad(loss, argnums=(0, 1, 2, 3), has_aux=True,
                                          allow_int=True))(q, k, v, bias)

    (_, reference), reference_grads = gradients("xla", jnp.float32)
    (_, out), grads = gradients("cudnn", jnp.bfloat16)
    assert bool(jnp.all(jnp.isfinite(out)))
    assert relative_error(out[:2], reference[:2]) < 2e-2
    for grad, reference_grad in zip(grads, reference_grads, strict=True):
        if reference_grad is not None:
            rows = slice(0, 2) if grad.shape[0] == 3 else slice(None)
            assert relative_error(grad[rows], reference_grad[rows]) < 2e-2


@pytest.mark.parametrize(("scheme", "architecture"), [
    ("rope", "encoder_decoder"), ("alibi", "encoder_decoder"), ("t5", "encoder_decoder"),
    ("fire", "encoder_decoder"), ("alibi", "decoder_only"), ("rope", "decoder_only")])
def test_a_bfloat16_model_with_cudnn_matches_one_with_xla(scheme, architecture):
    """Padded rows, odd lengths, a row of batch padding: logits and every gradient. The
    decoder-only model is a language model's (no source slots: key lengths and causal flag)."""
    rng = np.random.default_rng(0)
    batch, target_width = 4, 7
    source_width = 9 if architecture == "encoder_decoder" else 0
    source = jnp.asarray(rng.integers(3, VOCAB, (batch, source_width)), jnp.int32)
    target = jnp.asarray(rng.integers(3, VOCAB, (batch, target_width)), jnp.int32)
    source_mask = jnp.arange(source_width)[None] < jnp.array([9, 5, 1, 0])[:, None]
    target_mask = jnp.arange(target_width)[None] < jnp.array([7, 3, 2, 0])[:, None]
    results = {}
    for implementation in ("xla", "cudnn"):
        config = tiny_config(scheme, dtype="bfloat16", attention_implementation=implementation,
                             d_model=64, num_heads=2, architecture=architecture)
        model = (Seq2SeqTransformer if architecture == "encoder_decoder"
                 else SingleStackTransformer)(config, rngs=nnx.Rngs(0))
        graph, params, rest = nnx.split(model, nnx.Param, ...)

        def loss(params, graph=graph, rest=rest):
            logits = nnx.merge(graph, params, rest)(
                source, target, arange_positions(batch, source_width),
                arange_positions(batch, target_width), source_mask, target_mask)
            logits = jnp.where(target_mask[..., None], logits, 0)
            return jnp.sum(logits ** 2), logits

        (_, logits), grads = jax.jit(jax.value_and_grad(loss, has_aux=True))(params)
        results[implementation] = (logits, jax.tree.leaves(grads))
    (logits, grads), (reference, reference_grads) = results["cudnn"], results["xla"]
    assert relative_error(logits, reference) < 3e-2
    for grad, reference_grad in zip(grads, reference_grads, strict=True):
        assert bool(jnp.all(jnp.isfinite(grad)))
        if float(jnp.linalg.norm(reference_grad.astype(jnp.float32))) > 0:
            assert relative_error(grad, reference_grad) < 8e-2
