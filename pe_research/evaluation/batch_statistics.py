"""What one evaluation batch is scored with: the per-example sums of every metric, teacher-forced
and greedy-decoded (``range_eval`` sums them over a length's batches)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import ml_collections

from pe_research.model.decoding import greedy_decode, slot_choices
from pe_research.model.inputs import abacus_inputs, joint_argument, member_positions, scored_mask
from pe_research.model.metrics import (
    Outputs,
    example_sums,
    range_metrics,
    training_metrics,
)
from pe_research.model.padded_vocab import mask_logits
from pe_research.positional.randomize import evaluation_keys
from pe_research.tasks.registry import task_class
from pe_research.tasks.vocabulary import EOS_ID


def example_statistics(model: Any, batch: Mapping[str, jax.Array], position_key: jax.Array,
                       oracle_length: bool = False, first_row: jax.Array | int = 0,
                       decode: bool = True, vocab_size: jax.Array | int | None = None,
                       ranges: Sequence[int] = (), own_range: jax.Array | None = None,
                       ) -> dict[str, jax.Array]:
    """Per-example ``[B]`` numerators and counts of every metric; traced once per shape.
    ``oracle_length`` decodes a second time, at the true length (``oracle_exact_match``);
    without ``decode`` (a task scored by teacher forcing, such as language modelling) only the
    teacher-forced metrics are computed, over the tokens the model was trained to predict.
    Randomized positions drawn per example come from the example's index in its length's set
    (``first_row`` is the batch's first), so splitting a batch changes no draw. With
    ``vocab_size`` a model padded to a wider vocabulary is scored over its first
    ``vocab_size`` tokens, as the model of that vocabulary (``model/padded_vocab.py``); with
    ``own_range`` (traced, one of ``ranges``) on the positions of that randomized range
    (``inputs.member_positions``)."""
    pe = model.config.pe
    position_key = evaluation_keys(pe, position_key, first_row, batch["source"].shape[0])
    source_positions, target_positions = member_positions(
        pe, batch, position_key, False, model.config.architecture, ranges, own_range)
    abacus_ids = abacus_inputs(pe, batch, position_key, training=False)
    logits = model(batch["source"], batch["target_input"], source_positions, target_positions,
                   batch["source_mask"], batch["target_mask"], abacus_ids=abacus_ids,
                   **joint_argument(model, batch))
    logits = mask_logits(logits, vocab_size)
    if not decode:  # such tasks have no end token (train.predict_eos False): never scored
        outputs = Outputs(logits, batch["target_output"], scored_mask(batch, predict_eos=False))
        return example_sums(outputs, training_metrics())
    # the end token's step: the number of real target tokens, less one
    eos_steps_B = jnp.sum(batch["target_mask"], axis=-1) - 1 if oracle_length else None
    if model.config.architecture == "encoder_only":
        # Its decoding is the argmax of these logits: one forward traced and compiled, not three.
        decoded = slot_choices(logits, batch["target_mask"], vocab_size=vocab_size)
        oracle_decoded = None if eos_steps_B is None else slot_choices(
            logits, batch["target_mask"], eos_steps_B=eos_steps_B, vocab_size=vocab_size)
    else:
        def decode_ending_at(steps_B: jax.Array | None) -> jax.Array:
            return greedy_decode(model, batch["source"], source_positions, batch["source_mask"],
                                 target_positions, target_mask_BxT=batch["target_mask"],
                                 eos_id=EOS_ID, eos_steps_B=steps_B, abacus_ids=abacus_ids,
                                 vocab_size=vocab_size)

        decoded = decode_ending_at(None)
        oracle_decoded = None if eos_steps_B is None else decode_ending_at(eos_steps_B)
    outputs = Outputs(logits, batch["target_output"], batch["target_mask"], decoded,
                      oracle_decoded)
    return example_sums(outputs, range_metrics(oracle_length))


def decodes_at_oracle_length(config: ml_collections.ConfigDict) -> bool:
    """Whether range evaluation also decodes at the true length: when ``eval.oracle_length``
    asks, and always for a run trained without the end token, which never learned to stop."""
    return bool(config.eval.oracle_length) or not config.train.get("predict_eos", True)


def task_decodes(config: ml_collections.ConfigDict) -> bool:
    """Whether range evaluation decodes: not for tasks scored by teacher forcing alone."""
    return task_class(config.task.name).decodes
