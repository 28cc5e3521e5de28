"""Abacus embeddings (McLeish et al. 2024): a learned table added to the token embedding at
each digit's index within its number, beside any attention-side scheme.

Source: mcleish7/arithmetic ``abacus.py`` (``Abacus``: table of ``max_seq_length=1024`` rows,
``max_k=99``; in training one k uniform in [0, max_k] per batch is added to every non-zero ID,
none at test) and ``cramming/architectures/components.py`` (the table's vectors are added to
the token embeddings). The task supplies the IDs (``tasks/digit_positions.py``), so the model
needs no list of digit tokens. The table is initialised as the token embedding is (the
authors use torch's default N(0, 1) for both, so the two start at one scale).

Settings (``model.pe``, with any ``type``): ``abacus`` True/False, ``abacus_max_k``,
``abacus_table_size``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import jax
import jax.numpy as jnp
from flax import nnx

from pe_research.core.errors import ConfigError

ABACUS_DEFAULTS: dict[str, Any] = {"abacus": False, "abacus_max_k": 99,
                                   "abacus_table_size": 1024}
ABACUS_KEY_TAG = 0xABAC  # folded into the position key for the training offset


def uses_abacus(pe: Mapping[str, Any]) -> bool:
    """Whether the model adds Abacus embeddings."""
    return bool(pe.get("abacus", False))


def check_abacus(pe: Mapping[str, Any]) -> None:
    """ConfigError for a bad Abacus setting."""
    if not isinstance(pe.get("abacus", False), bool):
        raise ConfigError("model.pe.abacus", pe["abacus"], "True or False")
    max_k = pe.get("abacus_max_k", ABACUS_DEFAULTS["abacus_max_k"])
    size = pe.get("abacus_table_size", ABACUS_DEFAULTS["abacus_table_size"])
    if isinstance(max_k, bool) or not isinstance(max_k, int) or max_k < 0:
        raise ConfigError("model.pe.abacus_max_k", max_k, "an integer >= 0")
    if isinstance(size, bool) or not isinstance(size, int) or size <= max_k + 1:
        raise ConfigError("model.pe.abacus_table_size", size,
                          f"an integer > abacus_max_k + 1 = {max_k + 1}")


def check_abacus_ids(pe: Mapping[str, Any], largest_id: int, where: str) -> None:
    """ConfigError if IDs up to ``largest_id`` plus the training offset miss the table."""
    needed = largest_id + int(pe.get("abacus_max_k", ABACUS_DEFAULTS["abacus_max_k"])) + 1
    if needed > int(pe.get("abacus_table_size", ABACUS_DEFAULTS["abacus_table_size"])):
        raise ConfigError("model.pe.abacus_table_size", pe["abacus_table_size"],
                          f"{where} has digit runs of {largest_id}, which with abacus_max_k "
                          f"need {needed} rows; set model.pe.abacus_table_size >= {needed}")


def offset_ids(pe: Mapping[str, Any], ids: jax.Array, key: jax.Array, training: bool,
               max_k: jax.Array | None = None) -> jax.Array:
    """``ids`` with one k uniform in [0, abacus_max_k] added to every non-zero ID (training;
    ``key`` a key, or one per row whose first is used: one k per batch), as they are at test.
    ``max_k`` (traced: a stacked member's own) replaces ``pe``'s."""
    if not training:
        return ids
    key = key if not key.shape else key[0]
    if max_k is None:
        max_k = int(pe.get("abacus_max_k", ABACUS_DEFAULTS["abacus_max_k"]))
    else:  # the same draw as from the Python int: randint's bound is an int32 either way
        max_k = jnp.asarray(max_k).astype(jnp.int32)
    k = jax.random.randint(jax.random.fold_in(key, ABACUS_KEY_TAG), (), 0, max_k + 1)
    return jnp.where(ids > 0, ids + k, 0)


class AbacusTable(nnx.Module):
    """The Abacus table ``[abacus_table_size, width]``."""

    def __init__(self, pe: Mapping[str, Any], width: int, dtype: Any, rngs: nnx.Rngs):
        size = int(pe.get("abacus_table_size", ABACUS_DEFAULTS["abacus_table_size"]))
        self.embed = nnx.Embed(size, width, dtype=dtype, param_dtype=jnp.float32, rngs=rngs)

    def __call__(self, ids_BxT: jax.Array) -> jax.Array:
        """``[B, T, width]``: the rows of ``ids``."""
        return jnp.take(self.embed.embedding[...], ids_BxT, axis=0).astype(self.embed.dtype)
