"""Greedy decoding: a key/value-cached ``lax.while_loop``, and a naive full-recompute reference.

Both run inside one compiled loop whose trip count is bounded by the static target length T
(the length bucket), so a jitted caller compiles once per bucket. A sequence is finished once it
emits EOS; afterwards it emits PAD, and the loop exits when every sequence is finished.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
from flax import nnx

from pe_research.special_tokens import BOS_ID, EOS_ID, PAD_ID

NEVER = -1  # an eos_id that never matches: decode all T steps (speed measurements)


def _first_state(batch: int, length: int, pad_id: int) -> tuple[jax.Array, jax.Array]:
    """Output buffer ``[B, T]`` of PAD and the per-sequence finished flags ``[B]``."""
    return jnp.full((batch, length), pad_id, jnp.int32), jnp.zeros((batch,), bool)


def _choose(logits_BxV: jax.Array, done_B: jax.Array, pad_id: int) -> jax.Array:
    """Greedy token ``[B]`` (int32); PAD for finished sequences."""
    return jnp.where(done_B, pad_id, jnp.argmax(logits_BxV, axis=-1).astype(jnp.int32))


def _running(step: jax.Array, length: int, done_B: jax.Array) -> jax.Array:
    return (step < length) & ~jnp.all(done_B)


def greedy_decode(model: Any, source_BxS: jax.Array, source_positions_BxS: jax.Array,
                  source_mask_BxS: jax.Array, target_positions_BxT: jax.Array, *,
                  bos_id: int = BOS_ID, eos_id: int = EOS_ID, pad_id: int = PAD_ID) -> jax.Array:
    """Greedy tokens ``[B, T]`` (int32) with a key/value cache; T = target_positions' length.

    Step t feeds the token chosen at step t-1 (BOS at t = 0) at position
    ``target_positions_BxT[:, t]`` and keeps every earlier key/value in the cache.
    """
    batch, length = target_positions_BxT.shape
    encoded_BxSxD = model.encode(source_BxS, source_positions_BxS, source_mask_BxS)
    graphdef, state = nnx.split(model)
    output_BxT, done_B = _first_state(batch, length, pad_id)
    carry = (jnp.zeros((), jnp.int32), jnp.full((batch, 1), bos_id, jnp.int32),
             model.init_cache(batch, length), output_BxT, done_B)

    def body(carry):
        step, tokens_Bx1, cache, output_BxT, done_B = carry
        positions_Bx1 = jax.lax.dynamic_slice_in_dim(target_positions_BxT, step, 1, axis=1)
        logits_BxV, cache = nnx.merge(graphdef, state).decode_step(
            tokens_Bx1, positions_Bx1, encoded_BxSxD, source_positions_BxS, source_mask_BxS, cache)
        next_B = _choose(logits_BxV, done_B, pad_id)
        output_BxT = output_BxT.at[:, step].set(next_B)
        return step + 1, next_B[:, None], cache, output_BxT, done_B | (next_B == eos_id)

    carry = jax.lax.while_loop(lambda c: _running(c[0], length, c[4]), body, carry)
    return carry[3]


def naive_greedy_decode(model: Any, source_BxS: jax.Array, source_positions_BxS: jax.Array,
                        source_mask_BxS: jax.Array, target_positions_BxT: jax.Array, *,
                        bos_id: int = BOS_ID, eos_id: int = EOS_ID,
                        pad_id: int = PAD_ID) -> jax.Array:
    """Reference for ``greedy_decode``: every step re-runs the whole decoder on ``[B, T]``.

    No cache: the causal mask alone hides the not-yet-decoded slots. Same output contract.
    """
    batch, length = target_positions_BxT.shape
    encoded_BxSxD = model.encode(source_BxS, source_positions_BxS, source_mask_BxS)
    graphdef, state = nnx.split(model)
    output_BxT, done_B = _first_state(batch, length, pad_id)
    inputs_BxT = output_BxT.at[:, 0].set(bos_id)
    all_real_BxT = jnp.ones((batch, length), bool)

    def body(carry):
        step, inputs_BxT, output_BxT, done_B = carry
        logits_BxTxV = nnx.merge(graphdef, state).decode(
            inputs_BxT, target_positions_BxT, encoded_BxSxD, source_positions_BxS,
            source_mask_BxS, all_real_BxT)
        logits_BxV = jax.lax.dynamic_index_in_dim(logits_BxTxV, step, axis=1, keepdims=False)
        next_B = _choose(logits_BxV, done_B, pad_id)
        inputs_BxT = inputs_BxT.at[:, step + 1].set(next_B, mode="drop")
        output_BxT = output_BxT.at[:, step].set(next_B)
        return step + 1, inputs_BxT, output_BxT, done_B | (next_B == eos_id)

    carry = (jnp.zeros((), jnp.int32), inputs_BxT, output_BxT, done_B)
    carry = jax.lax.while_loop(lambda c: _running(c[0], length, c[3]), body, carry)
    return carry[2]
