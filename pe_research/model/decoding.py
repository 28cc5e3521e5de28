"""Greedy decoding: a key/value-cached ``lax.while_loop``, and a naive full-recompute reference.

Both run inside a compiled loop whose trip count is bounded by the static target length T
(the length bucket), so a jitted caller compiles once per bucket; from T = 256 on the cached
loop runs in segments over a growing part of its cache (``cache_widths``). A sequence is
finished once it emits EOS; afterwards it emits PAD, and the loop exits when every sequence is
finished.

By architecture: the encoder-decoder encodes once and decodes with a cache; the decoder-only
model prefills source and SEP into its cache and then generates; the encoder-only model reads
all outputs at once at its slots (it is given the number of outputs, ``target_mask``).

With ``eos_steps_B`` (the oracle length of Newman et al. 2020, "The EOS Decision and Length
Extrapolation", Sec. 3) the model does not decide where a sequence ends: EOS is never chosen
before step ``eos_steps_B`` and always at it, so the decoded tokens measure what the model
writes, apart from when it stops.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
from flax import nnx

from pe_research.model.masks import PrefixMask
from pe_research.model.padded_vocab import mask_logits
from pe_research.model.single_stack import joint_positions, pack, packed_mask
from pe_research.tasks.vocabulary import BOS_ID, EOS_ID, PAD_ID

NEVER = -1  # an eos_id that never matches: decode all T steps (speed measurements)
SEGMENTED_FROM = 256  # below, one loop: segments save less than their compile costs


def _first_state(batch: int, length: int, pad_id: int) -> tuple[jax.Array, jax.Array]:
    """Output buffer ``[B, T]`` of PAD and the per-sequence finished flags ``[B]``."""
    return jnp.full((batch, length), pad_id, jnp.int32), jnp.zeros((batch,), bool)


def _choose(logits_BxV: jax.Array, done_B: jax.Array, pad_id: int, step: jax.Array | int = 0,
            eos_steps_B: jax.Array | None = None, eos_id: int = EOS_ID,
            vocab_size: jax.Array | int | None = None) -> jax.Array:
    """Greedy token ``[B]`` (int32) among the first ``vocab_size`` (default all); PAD for
    finished sequences. With ``eos_steps_B``, EOS at exactly that step (never before, whatever
    its logit). Broadcasts: logits ``[B, T, V]`` with ``done``, ``step`` and ``eos_steps``
    shaped to ``[B, T]`` choose every slot at once."""
    logits_BxV = mask_logits(logits_BxV, vocab_size)
    if eos_steps_B is not None:
        logits_BxV = logits_BxV.at[..., eos_id].set(-jnp.inf)
    chosen_B = jnp.argmax(logits_BxV, axis=-1).astype(jnp.int32)
    if eos_steps_B is not None:
        chosen_B = jnp.where(step == eos_steps_B, eos_id, chosen_B)
    return jnp.where(done_B, pad_id, chosen_B)


def _running(step: jax.Array, length: int, done_B: jax.Array) -> jax.Array:
    return (step < length) & ~jnp.all(done_B)


def greedy_decode(model: Any, source_BxS: jax.Array, source_positions_BxS: jax.Array,
                  source_mask_BxS: jax.Array, target_positions_BxT: jax.Array, *,
                  target_mask_BxT: jax.Array | None = None, bos_id: int = BOS_ID,
                  eos_id: int = EOS_ID, pad_id: int = PAD_ID,
                  eos_steps_B: jax.Array | None = None,
                  widths: Sequence[int] | None = None,
                  abacus_ids: tuple[jax.Array, jax.Array] | None = None,
                  vocab_size: jax.Array | int | None = None) -> jax.Array:
    """Greedy tokens ``[B, T]`` (int32) with a key/value cache; T = target_positions' length.

    Step t feeds the token chosen at step t-1 (BOS at t = 0) at position
    ``target_positions_BxT[:, t]`` and keeps every earlier key/value in the cache.
    ``target_mask_BxT`` (the output slots) is read by the encoder-only model only, which is
    given its number of slots; there ``eos_steps_B`` fixes what its end slot holds.
    ``eos_steps_B`` ``[B]``: the oracle length, the step of each sequence's EOS (-1: none).
    ``widths``: the loop runs in segments, the steps before ``widths[i]`` over the cache's
    first ``widths[i]`` slots (after the decoder-only model's prefill; default
    ``cache_widths(T)``). ``abacus_ids``: the source's ``[B, S]`` and the target slots'
    ``[B, T]`` Abacus IDs (a model with an Abacus table); step t reads slot t's.
    ``vocab_size``: choose among the model's first tokens only (a model padded to a wider
    vocabulary, ``model/padded_vocab.py``).
    """
    architecture = model.config.architecture
    if architecture == "encoder_only":
        return slot_decode(model, source_BxS, source_positions_BxS, source_mask_BxS,
                           target_positions_BxT, target_mask_BxT, pad_id, eos_steps_B, eos_id,
                           abacus_ids, vocab_size)
    if architecture == "decoder_only":
        return causal_greedy_decode(model, source_BxS, source_positions_BxS, source_mask_BxS,
                                    target_positions_BxT, bos_id, eos_id, pad_id, eos_steps_B,
                                    widths, abacus_ids, vocab_size)
    batch, length = source_BxS.shape[0], target_positions_BxT.shape[1]
    source_ids, target_ids = abacus_ids or (None, None)
    encoded_BxSxD = model.encode(source_BxS, source_positions_BxS, source_mask_BxS,
                                 abacus_ids_BxS=source_ids)
    graphdef, state = nnx.split(model)
    output_BxT, done_B = _first_state(batch, length, pad_id)
    cache = model.init_cache(target_positions_BxT, encoded_BxSxD)
    carry = (jnp.zeros((), jnp.int32), jnp.full((batch, 1), bos_id, jnp.int32), cache,
             output_BxT, done_B)

    def body(carry):
        step, tokens_Bx1, cache, output_BxT, done_B = carry
        positions_Bx1 = jax.lax.dynamic_slice_in_dim(target_positions_BxT, step, 1, axis=1)
        ids_Bx1 = (None if target_ids is None else
                   jax.lax.dynamic_slice_in_dim(target_ids, step, 1, axis=1))
        logits_BxV, cache = nnx.merge(graphdef, state).decode_step(
            tokens_Bx1, positions_Bx1, source_positions_BxS, source_mask_BxS, cache, ids_Bx1)
        next_B = _choose(logits_BxV, done_B, pad_id, step, eos_steps_B, eos_id, vocab_size)
        output_BxT = output_BxT.at[:, step].set(next_B)
        return step + 1, next_B[:, None], cache, output_BxT, done_B | (next_B == eos_id)

    return _in_segments(body, carry, _checked(widths, length), 0)[3]


def _checked(widths: Sequence[int] | None, length: int) -> tuple[int, ...]:
    """``widths`` (default ``cache_widths(length)``), checked to rise to ``length``."""
    widths = cache_widths(length) if widths is None else tuple(widths)
    if list(widths) != sorted(set(widths)) or widths[-1] != length or widths[0] < 1:
        raise ValueError(f"widths {widths}: increasing, from 1 up to the target length {length}")
    return widths


def _in_segments(body, carry: tuple, ends: Sequence[int], offset: int) -> tuple:
    """``lax.while_loop`` of ``body`` over ``carry`` = (step, tokens, cache, output, done), one
    loop per end: its steps before that end, over the cache's first ``offset + end`` slots."""
    for end in ends:
        step, tokens_Bx1, narrow, output_BxT, done_B = jax.lax.while_loop(
            lambda c, end=end: _running(c[0], end, c[4]), body,
            (carry[0], carry[1], _first_slots(carry[2], offset + end), carry[3], carry[4]))
        carry = (step, tokens_Bx1, _written_back(carry[2], narrow), output_BxT, done_B)
    return carry


def cache_widths(length: int) -> tuple[int, ...]:
    """Widths of the cache the decoding loop's segments read: T/8, T/4, T/2, T from T = 256 on.

    A step reads every slot of its cache, written or not; in segments, the first T/8 steps read
    T/8 slots, and so on: 0.67 of the reads of T steps over all T slots, and fewer still when
    the loop stops early. One loop body is compiled per segment."""
    if length < SEGMENTED_FROM:
        return (length,)
    return tuple(sorted({-(-length // 8), -(-length // 4), -(-length // 2), length}))


def _first_slots(cache: list[dict], width: int) -> list[dict]:
    """Each layer's self-attention cache narrowed to its first ``width`` slots."""
    return [{**c, "k": c["k"][..., :width], "v": c["v"][..., :width],
             "positions": c["positions"][:, :width]} for c in cache]


def _written_back(full: list[dict], narrow: list[dict]) -> list[dict]:
    """``full`` with ``narrow``'s slots (and index) written over its first ones."""
    return [{**n, "k": f["k"].at[..., :n["k"].shape[-1]].set(n["k"]),
             "v": f["v"].at[..., :n["v"].shape[-1]].set(n["v"]), "positions": f["positions"]}
            for f, n in zip(full, narrow, strict=True)]


def naive_greedy_decode(model: Any, source_BxS: jax.Array, source_positions_BxS: jax.Array,
                        source_mask_BxS: jax.Array, target_positions_BxT: jax.Array, *,
                        bos_id: int = BOS_ID, eos_id: int = EOS_ID, pad_id: int = PAD_ID,
                        eos_steps_B: jax.Array | None = None,
                        abacus_ids: tuple[jax.Array, jax.Array] | None = None) -> jax.Array:
    """Reference for ``greedy_decode``: every step re-runs the whole decoder on ``[B, T]``.

    No cache: the causal mask alone hides the not-yet-decoded slots. Same output contract.
    """
    batch, length = source_BxS.shape[0], target_positions_BxT.shape[1]
    if model.config.architecture == "encoder_only":
        return slot_decode(model, source_BxS, source_positions_BxS, source_mask_BxS,
                           target_positions_BxT, None, pad_id, abacus_ids=abacus_ids)
    single_stack = model.config.architecture == "decoder_only"
    source_ids, target_ids = abacus_ids or (None, None)
    encoded_BxSxD = None if single_stack else model.encode(
        source_BxS, source_positions_BxS, source_mask_BxS, abacus_ids_BxS=source_ids)
    graphdef, state = nnx.split(model)
    output_BxT, done_B = _first_state(batch, length, pad_id)
    inputs_BxT = output_BxT.at[:, 0].set(bos_id)
    all_real_BxT = jnp.ones((batch, length), bool)

    def body(carry):
        step, inputs_BxT, output_BxT, done_B = carry
        current = nnx.merge(graphdef, state)
        if single_stack:
            logits_BxTxV = current(source_BxS, inputs_BxT, source_positions_BxS,
                                   target_positions_BxT, source_mask_BxS, all_real_BxT,
                                   abacus_ids=abacus_ids)
        else:
            logits_BxTxV = current.decode(inputs_BxT, target_positions_BxT, encoded_BxSxD,
                                          source_positions_BxS, source_mask_BxS, all_real_BxT,
                                          abacus_ids_BxT=target_ids)
        logits_BxV = jax.lax.dynamic_index_in_dim(logits_BxTxV, step, axis=1, keepdims=False)
        next_B = _choose(logits_BxV, done_B, pad_id, step, eos_steps_B, eos_id)
        inputs_BxT = inputs_BxT.at[:, step + 1].set(next_B, mode="drop")
        output_BxT = output_BxT.at[:, step].set(next_B)
        return step + 1, inputs_BxT, output_BxT, done_B | (next_B == eos_id)

    carry = (jnp.zeros((), jnp.int32), inputs_BxT, output_BxT, done_B)
    carry = jax.lax.while_loop(lambda c: _running(c[0], length, c[3]), body, carry)
    return carry[2]


def slot_decode(model: Any, source_BxS: jax.Array, source_positions_BxS: jax.Array,
                source_mask_BxS: jax.Array, target_positions_BxT: jax.Array,
                target_mask_BxT: jax.Array | None, pad_id: int = PAD_ID,
                eos_steps_B: jax.Array | None = None, eos_id: int = EOS_ID,
                abacus_ids: tuple[jax.Array, jax.Array] | None = None,
                vocab_size: jax.Array | int | None = None) -> jax.Array:
    """Encoder-only: the argmax at every real output slot (PAD elsewhere), in one pass; with
    ``eos_steps_B`` ``[B]``, EOS at that slot and never at another (the oracle length)."""
    shape = (source_BxS.shape[0], target_positions_BxT.shape[1])
    if target_mask_BxT is None:
        target_mask_BxT = jnp.ones(shape, bool)
    unused_BxT = jnp.zeros(shape, jnp.int32)  # slots ignore their tokens
    logits_BxTxV = model(source_BxS, unused_BxT, source_positions_BxS, target_positions_BxT,
                         source_mask_BxS, target_mask_BxT, abacus_ids=abacus_ids)
    return slot_choices(logits_BxTxV, target_mask_BxT, pad_id, eos_steps_B, eos_id, vocab_size)


def slot_choices(logits_BxTxV: jax.Array, target_mask_BxT: jax.Array, pad_id: int = PAD_ID,
                 eos_steps_B: jax.Array | None = None, eos_id: int = EOS_ID,
                 vocab_size: jax.Array | int | None = None) -> jax.Array:
    """``[B, T]``: what ``slot_decode`` chooses from the encoder-only model's logits at its slots
    (its teacher-forced logits: the slots ignore their tokens)."""
    eos_steps_Bx1 = None if eos_steps_B is None else eos_steps_B[:, None]
    return _choose(logits_BxTxV, ~target_mask_BxT, pad_id,
                   jnp.arange(logits_BxTxV.shape[1])[None, :], eos_steps_Bx1, eos_id, vocab_size)


def causal_greedy_decode(model: Any, source_BxS: jax.Array, source_positions_BxS: jax.Array,
                         source_mask_BxS: jax.Array, target_positions_BxT: jax.Array,
                         bos_id: int = BOS_ID, eos_id: int = EOS_ID, pad_id: int = PAD_ID,
                         eos_steps_B: jax.Array | None = None,
                         widths: Sequence[int] | None = None,
                         abacus_ids: tuple[jax.Array, jax.Array] | None = None,
                         vocab_size: jax.Array | int | None = None) -> jax.Array:
    """Decoder-only: prefill ``source SEP`` into the cache, then one token per step (in
    segments: the steps before ``widths[i]`` over the cache's first S + ``widths[i]`` slots).

    The joint sequence is that of ``SingleStackTransformer`` (packed: row b's target token t
    sits at index n_b + t after its n_b source tokens), so the cached and the teacher-forced
    model see the same keys; each row writes its cache at its own index.
    """
    (batch, width), length = source_BxS.shape, target_positions_BxT.shape[1]
    count_B = jnp.sum(source_mask_BxS, axis=-1).astype(jnp.int32)
    positions = joint_positions(source_positions_BxS, target_positions_BxT)  # [1 or B, S + T]
    tokens = pack(source_BxS, jnp.full((batch, 1), bos_id, jnp.int32), count_B, pad_id)
    real_BxW = pack(source_mask_BxS.astype(bool), jnp.ones((batch, 1), bool), count_B, False)
    # The prefill's S + 1 queries see the cache's S + T keys: key lengths and a causal flag
    # aligned at the first key (query i sees keys 0..i), as jax's xla path and cuDNN apply it
    # (tests/test_cudnn_gpu.py's causal cases with fewer queries than keys; an H200 passed them).
    prefill = packed_mask(jnp.pad(real_BxW, ((0, 0), (0, length - 1))), causal=True)
    visible = PrefixMask(prefill.dense[:, :width + 1], prefill.key_lengths, causal=True)
    cache = [{**layer_cache, "index": jnp.zeros((batch,), jnp.int32)}
             for layer_cache in model.empty_cache(batch, positions, model.layers)]
    joint_ids = (None if abacus_ids is None else  # [B, S + T], packed as the positions
                 pack(abacus_ids[0], abacus_ids[1], count_B, 0))
    logits_BxV, cache = model.run_cached(
        tokens, positions[:, :width + 1], visible, cache, read_B=count_B,
        abacus_ids_BxL=None if joint_ids is None else joint_ids[:, :width + 1])
    cache = [{**layer_cache, "index": count_B + 1} for layer_cache in cache]
    graphdef, state = nnx.split(model)
    output_BxT, done_B = _first_state(batch, length, pad_id)
    first_B = _choose(logits_BxV, done_B, pad_id, 0, eos_steps_B, eos_id, vocab_size)
    output_BxT = output_BxT.at[:, 0].set(first_B)
    all_positions = jnp.broadcast_to(positions, (batch, width + length))

    def body(carry):
        step, tokens_Bx1, cache, output_BxT, done_B = carry
        slot_B = count_B + step  # this token's index in its packed row
        positions_Bx1 = jnp.take_along_axis(all_positions, slot_B[:, None], axis=1)
        keys_W = jnp.arange(cache[0]["k"].shape[-1])  # the segment's slots
        visible_Bx1xW = PrefixMask(keys_W[None, None, :] <= slot_B[:, None, None], slot_B + 1)
        ids_Bx1 = (None if joint_ids is None else
                   jnp.take_along_axis(joint_ids, slot_B[:, None], axis=1))
        logits_BxV, cache = nnx.merge(graphdef, state).run_cached(
            tokens_Bx1, positions_Bx1, visible_Bx1xW, cache, abacus_ids_BxL=ids_Bx1)
        next_B = _choose(logits_BxV, done_B, pad_id, step, eos_steps_B, eos_id, vocab_size)
        output_BxT = output_BxT.at[:, step].set(next_B)
        return step + 1, next_B[:, None], cache, output_BxT, done_B | (next_B == eos_id)

    carry = (jnp.ones((), jnp.int32), first_B[:, None], cache, output_BxT,
             first_B == eos_id)
    # Step t writes slot count + t < width + t: the steps before an end fit width + end slots.
    return _in_segments(body, carry, _checked(widths, length), width)[3]
