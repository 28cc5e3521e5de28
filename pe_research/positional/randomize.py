"""Randomized positions (Ruoss et al. 2023), an option of every scheme that consumes positions.

``model.pe.randomize = {max_position: M, eval_policy: 'randomized' | 'plain',
per: 'example' | 'batch', eval_per: 'example' | 'batch'}``. With M > 0, the n real tokens of a
sequence get a sorted, uniformly random n-subset of ``[0, M)`` instead of ``0 .. n - 1``, so a
model trained on short sequences has already seen every position (and every distance) up to M.
Policy at evaluation: ``randomized`` (the paper's: sample at test time too, with the key the
caller gives) or ``plain`` (``0 .. n - 1``). M = 0 turns it off. ``per``: ``example`` draws every
row independently; ``batch`` draws once per batch, as the paper's code does
(``jnp.sort(jax.random.choice(key, max_len, (length,), replace=False))`` per batch in
google-deepmind/randomized_positional_encodings, models/positional_encodings.py): one sorted
draw for the batch's longest row, whose first n positions every row with n real tokens takes.
With rows of one length (the paper's batches, ``data.length_sampling = per_batch``) that is
exactly the paper's draw.

``eval_per`` is the same choice at evaluation, made separately: ``example`` (the default) scores
every test example on its own draw, so an evaluated length averages over as many draws as it
has examples; ``batch`` scores a whole batch on one draw, as the paper's evaluation does. Every
example's positions have the same distribution either way, so both estimate the same accuracy;
one draw is the noisier estimate.

Positions that every row shares (plain ones, and per-batch draws) come back as ``[1, T]``, so
every bias scheme computes its ``[1, H, T, S]`` bias once and attention broadcasts it over the
batch (the padding is the mask's business). Per-example draws are ``[B, T]``.

Padding does not change the positions of real tokens: the subset is the top-n of M random scores,
so the same key gives the same real positions at any padded length. Padded slots get the next
sampled values (sorted among themselves), so every slot holds a distinct position below M.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import jax
import jax.numpy as jnp

from pe_research.core.errors import ConfigError, check_choice
from pe_research.positional.base import PositionalScheme

RANDOMIZE_DEFAULTS: dict[str, Any] = {"max_position": 0, "eval_policy": "randomized",
                                      "per": "example", "eval_per": "example"}
EVAL_POLICIES = ("randomized", "plain")
DRAWS = ("example", "batch")


def randomize_settings(pe: Mapping[str, Any]) -> tuple[int, str]:
    """``(max_position, eval_policy)`` of a ``model.pe`` block, defaults filled in."""
    block = {**RANDOMIZE_DEFAULTS, **dict(pe.get("randomize") or {})}
    return int(block["max_position"]), str(block["eval_policy"])


def randomize_draw(pe: Mapping[str, Any], training: bool = True) -> str:
    """``'example'`` or ``'batch'``: how often randomized positions are drawn in training
    (``per``) or at evaluation (``eval_per``)."""
    block = {**RANDOMIZE_DEFAULTS, **dict(pe.get("randomize") or {})}
    return str(block["per" if training else "eval_per"])


def check_randomize_config(pe: Mapping[str, Any], scheme: type[PositionalScheme]) -> None:
    """Raise ``ConfigError`` for unknown keys or impossible values of ``model.pe.randomize``.

    A scheme that ignores positions (``consumes_positions = False``) refuses randomization; one
    with a bounded position range (a learned table) must cover ``[0, max_position)``.
    """
    block = pe.get("randomize") or {}
    if not hasattr(block, "keys"):  # a dict or a ConfigDict (which is not a Mapping)
        raise ConfigError("model.pe.randomize", block,
                          f"a mapping with keys {sorted(RANDOMIZE_DEFAULTS)}")
    for key in block:
        if key not in RANDOMIZE_DEFAULTS:
            raise ConfigError(f"model.pe.randomize.{key}", block[key],
                              f"not a randomize key; valid keys are {sorted(RANDOMIZE_DEFAULTS)}")
    max_position = block.get("max_position", 0)
    if isinstance(max_position, bool) or not isinstance(max_position, int) or max_position < 0:
        raise ConfigError("model.pe.randomize.max_position", max_position,
                          "an integer >= 0 (0 turns randomized positions off)")
    policy = block.get("eval_policy", "randomized")
    if policy not in EVAL_POLICIES:
        raise ConfigError("model.pe.randomize.eval_policy", policy,
                          f"choose one of {EVAL_POLICIES}")
    check_choice("model.pe.randomize.per", block.get("per", "example"), DRAWS)
    check_choice("model.pe.randomize.eval_per", block.get("eval_per", "example"), DRAWS)
    if max_position and not getattr(scheme, "consumes_positions", True):
        raise ConfigError("model.pe.randomize.max_position", max_position,
                          f"scheme {scheme.name!r} does not use positions; set it to 0")
    if max_position:  # randomized positions reach max_position - 1 at any sequence length
        scheme.check_positions(pe, max_position)


def check_randomize(pe: Mapping[str, Any], max_length: int) -> None:
    """ConfigError if randomized positions cannot cover ``max_length`` tokens (BOS/EOS included)."""
    max_position, _ = randomize_settings(pe)
    if 0 < max_position < max_length:
        raise ConfigError(
            "model.pe.randomize.max_position", max_position,
            f"must be >= the longest sequence used ({max_length} tokens), since each token needs "
            f"a distinct position in [0, max_position); or 0 to turn randomization off")


def plain_positions(mask_BxT: jax.Array) -> jax.Array:
    """``0 .. T - 1``, shared by every row: int32 ``[1, T]``."""
    return jnp.arange(mask_BxT.shape[-1], dtype=jnp.int32)[None, :]


def example_keys(key: jax.Array, first_row: jax.Array | int, rows: int) -> jax.Array:
    """One key per row ``[B]``: row r draws from ``fold_in(key, first_row + r)``, so an
    example's positions depend on its index in the evaluated set, not on how it is batched."""
    return jax.vmap(lambda row: jax.random.fold_in(key, row))(first_row + jnp.arange(rows))


def evaluation_keys(pe: Mapping[str, Any], key: jax.Array, first_row: jax.Array | int,
                    rows: int) -> jax.Array:
    """What evaluation draws a batch's positions from: one key per row ``[B]`` (``example_keys``)
    under ``eval_per = example``, else ``key`` itself."""
    return example_keys(key, first_row, rows) if randomize_draw(pe, training=False) == "example" \
        else key


def split_key(key: jax.Array) -> tuple[jax.Array, jax.Array]:
    """Two keys from one; from one key per row ``[B]``, two such ``[B]`` arrays."""
    if key.shape:
        pairs_Bx2 = jax.vmap(jax.random.split)(key)
        return pairs_Bx2[:, 0], pairs_Bx2[:, 1]
    first, second = jax.random.split(key)
    return first, second


def random_positions(key: jax.Array, mask_BxT: jax.Array, max_position: int) -> jax.Array:
    """Sorted distinct random positions in ``[0, max_position)`` for real tokens, ``[B, T]``.

    ``mask`` is True on the real tokens, a prefix of each row; rows are sampled independently,
    from one key, or from their own (``key`` of shape ``[B]``, e.g. ``example_keys``).
    """
    batch, length = mask_BxT.shape
    sampled = min(length, max_position)
    if key.shape:
        if key.shape != (batch,):
            raise ValueError(f"{key.shape[0]} keys for {batch} rows")
        scores_BxM = jax.vmap(lambda row_key: jax.random.uniform(row_key, (max_position,)))(key)
    else:
        scores_BxM = jax.random.uniform(key, (batch, max_position))
    _, chosen_BxK = jax.lax.top_k(scores_BxM, sampled)  # a random subset, in random order
    if sampled < length:  # only padding can lie beyond max_position slots (check_randomize)
        filler = jnp.full((batch, length - sampled), max_position - 1, chosen_BxK.dtype)
        chosen_BxK = jnp.concatenate([chosen_BxK, filler], axis=-1)
    real_BxT = jnp.arange(length) < jnp.sum(mask_BxT, axis=-1, keepdims=True)
    # Sort real and padded slots separately: padded values are offset by M so they sort last.
    ordered = jnp.sort(jnp.where(real_BxT, chosen_BxK, chosen_BxK + max_position), axis=-1)
    return jnp.where(ordered >= max_position, ordered - max_position, ordered).astype(jnp.int32)


def make_positions(pe: Mapping[str, Any], mask_BxT: jax.Array, key: jax.Array | None,
                   training: bool) -> jax.Array:
    """Positions int32 for one side of a batch under ``model.pe.randomize``: ``[1, T]`` when
    every row shares them, ``[B, T]`` for per-example draws.

    Plain ``0 .. T - 1`` when randomization is off, or at evaluation with policy ``plain``;
    otherwise ``random_positions(key, mask, max_position)`` (deterministic for a given key),
    drawn once for the batch's longest row with ``per = batch`` (``eval_per`` at evaluation).
    """
    max_position, policy = randomize_settings(pe)
    if max_position == 0 or (not training and policy == "plain"):
        return plain_positions(mask_BxT)
    if key is None:
        raise ValueError("randomized positions need an RNG key (model.pe.randomize.max_position "
                         f"= {max_position}, training={training}, eval_policy={policy!r})")
    mask_BxT = jnp.asarray(mask_BxT, bool)
    if randomize_draw(pe, training) == "batch":  # real tokens are a prefix: the longest row's mask
        return random_positions(key, jnp.any(mask_BxT, axis=0, keepdims=True), max_position)
    return random_positions(key, mask_BxT, max_position)
