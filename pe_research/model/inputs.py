"""What the model is given for a batch: positions for each side, the target tokens the loss
scores, and the teacher-forced forward pass that puts them together.

Positions are explicit inputs: drawn here (``make_positions``) from the scheme's config and a
key, so randomized positions, offsets and interpolation are only other position arrays.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import jax
import jax.numpy as jnp

from pe_research.model.member_settings import set_member_settings
from pe_research.model.single_stack import pack
from pe_research.model.transformer import TokenModel
from pe_research.positional.abacus import offset_ids, uses_abacus
from pe_research.positional.randomize import make_positions, randomize_settings, split_key
from pe_research.positional.registry import scheme_class
from pe_research.tasks.vocabulary import EOS_ID

Batch = Mapping[str, jax.Array]
EVAL_KEY_TAG = 0x0E7A1  # folded into the seed for evaluation-time random positions


def eval_position_key(seed: int) -> jax.Array:
    """The key range evaluation draws test positions from (matters only if randomized)."""
    return jax.random.split(jax.random.fold_in(jax.random.key(seed), EVAL_KEY_TAG))[0]


def batch_positions(pe: Mapping[str, Any], batch: Batch, key: jax.Array, training: bool,
                    architecture: str = "encoder_decoder") -> tuple[jax.Array, jax.Array]:
    """Source and target positions for a batch, ``[1, S]``/``[1, T]`` where rows share them;
    ``key`` is one key, or one per row ``[B]`` (``example_keys``).

    Encoder-decoder: each side from 0 (or drawn) on its own; shared by the rows unless drawn
    per example (``make_positions``). Single-stack models: one draw over the packed joint
    sequence (each row's source, then its target side: ``model/single_stack.py``), split at S:
    ``[1, S]``/``[1, T]`` when shared too. A row with n source tokens then has its target token
    j at joint position ``n + j``, i.e. in ``source_positions[n + j]`` or ``target_positions[n +
    j - S]``.
    """
    kind = scheme_class(pe["type"]).task_positions
    if kind is not None:
        return task_positions(pe, batch, kind, key, training, architecture)
    if architecture == "encoder_decoder":
        source_key, target_key = split_key(key)
        return (make_positions(pe, batch["source_mask"], source_key, training),
                make_positions(pe, batch["target_mask"], target_key, training))
    source_mask, target_mask = batch["source_mask"], batch["target_mask"]
    width, length = source_mask.shape[1], target_mask.shape[1]
    real = jnp.sum(target_mask, axis=-1) + jnp.sum(source_mask, axis=-1)
    joint_mask_BxW = jnp.arange(width + length)[None, :] < real[:, None]
    joint = make_positions(pe, joint_mask_BxW, split_key(key)[0], training)
    return joint[:, :width], joint[:, width:]


def task_positions(pe: Mapping[str, Any], batch: Batch, kind: str, key: jax.Array,
                   training: bool, architecture: str) -> tuple[jax.Array, jax.Array]:
    """The task's position IDs of ``kind`` as the scheme's positions ``[B, S]``/``[B, T]``
    (packed for single-stack models, as ``batch_positions``). In training each row's IDs
    start at s uniform in [1, max_position - its largest ID + 1] (they come started at 1)."""
    if f"source_{kind}" not in batch:
        raise ValueError(f"model.pe.type={pe['type']} reads the task's {kind!r} position IDs, "
                         "which this batch lacks: use a task that supplies them (addition)")
    source, target = batch[f"source_{kind}"], batch[f"target_{kind}"]
    if training:
        largest_B = jnp.maximum(jnp.max(source, axis=-1), jnp.max(target, axis=-1))
        room_B = jnp.maximum(int(pe["max_position"]) - largest_B, 0)
        uniform_B = (jax.vmap(lambda k: jax.random.uniform(k))(key) if key.shape else
                     jax.random.uniform(key, largest_B.shape))
        shift_B = jnp.floor(uniform_B * (room_B + 1)).astype(jnp.int32)
        source = jnp.where(source > 0, source + shift_B[:, None], 0)
        target = jnp.where(target > 0, target + shift_B[:, None], 0)
    if architecture == "encoder_decoder":
        return source, target
    joint = pack(source, target, jnp.sum(batch["source_mask"], axis=-1), 0)
    return joint[:, :source.shape[1]], joint[:, source.shape[1]:]


def abacus_inputs(pe: Mapping[str, Any], batch: Batch, key: jax.Array, training: bool,
                  max_k: jax.Array | None = None) -> tuple[jax.Array, jax.Array] | None:
    """The Abacus IDs of the source ``[B, S]`` and of the target's input slots ``[B, T]``, with
    the training offset (up to ``max_k``, traced, where a stacked member has its own); None
    when the model has no Abacus table."""
    if not uses_abacus(pe):
        return None
    return (offset_ids(pe, batch["source_abacus"], key, training, max_k),
            offset_ids(pe, batch["target_abacus"], key, training, max_k))


def with_range(pe: Mapping[str, Any], max_position: int) -> dict[str, Any]:
    """The ``model.pe`` block ``pe`` with its randomized range set to ``max_position``."""
    return {**pe, "randomize": {**dict(pe.get("randomize") or {}),
                                "max_position": int(max_position)}}


def member_positions(pe: Mapping[str, Any], batch: Batch, key: jax.Array, training: bool,
                     architecture: str, ranges: Sequence[int] = (),
                     own_range: jax.Array | None = None) -> tuple[jax.Array, jax.Array]:
    """``batch_positions`` of a program member whose randomized range is ``own_range`` (traced;
    one of the program's ``ranges``, 0 for plain positions): each range's draw from the same
    ``key``, the member's selected, so it gets the positions its run of its own would. Without
    ``own_range``, those of ``pe``."""
    positions = batch_positions(pe, batch, key, training, architecture)
    if own_range is None:
        return positions
    drawn_already = randomize_settings(pe)[0]
    for other in sorted(set(ranges) - {drawn_already}):
        drawn = batch_positions(with_range(pe, other), batch, key, training, architecture)
        positions = tuple(jnp.where(own_range == other, new, old)
                          for new, old in zip(drawn, positions, strict=True))
    return positions


def joint_argument(model: TokenModel, batch: Batch) -> dict[str, jax.Array]:
    """The batch's joint mask as a single-stack model takes it (its width cuts the packed
    sequence); nothing for an encoder-decoder, which packs nothing."""
    if model.config.architecture == "encoder_decoder" or "joint_mask" not in batch:
        return {}
    return {"joint_mask_BxW": batch["joint_mask"]}


def forward(model: TokenModel, batch: Batch, key: jax.Array, training: bool,
            ranges: Sequence[int] = (), own_range: jax.Array | None = None,
            settings: Mapping[str, jax.Array] | None = None) -> jax.Array:
    """Teacher-forced logits ``[B, T, V]``; dropout only in training. ``own_range`` (traced: an
    ensemble member's randomized range, one of the program's ``ranges``) selects its positions
    (``member_positions``) and leaves every key as it is; ``settings`` (traced scalars, a
    member's own, keyed by ``member_settings.MODEL_SETTINGS``) replace the model's."""
    position_key, dropout_key = jax.random.split(key)
    source_positions, target_positions = member_positions(
        model.config.pe, batch, position_key, training, model.config.architecture, ranges,
        own_range)
    set_member_settings(model, settings)
    use_dropout = training and ("dropout_rate" in (settings or {})
                                or model.config.dropout_rate > 0)
    return model(batch["source"], batch["target_input"], source_positions, target_positions,
                 batch["source_mask"], batch["target_mask"],
                 dropout_key=dropout_key if use_dropout else None,
                 abacus_ids=abacus_inputs(model.config.pe, batch, position_key, training,
                                          (settings or {}).get("abacus_max_k")),
                 **joint_argument(model, batch))


def scored_mask(batch: Batch, predict_eos: bool | jax.Array = True) -> jax.Array:
    """``[B, T]`` the target tokens the loss and training metrics score: every real one, or
    (``train.predict_eos`` False, the -EOS model of Newman et al. 2020) all but the end token.
    ``predict_eos`` may be traced (an ensemble member's own)."""
    if isinstance(predict_eos, bool):
        return batch["target_mask"] if predict_eos else \
            batch["target_mask"] & (batch["target_output"] != EOS_ID)
    return batch["target_mask"] & (predict_eos | (batch["target_output"] != EOS_ID))
