"""Members of different vocabularies in one program: their state padded to the widest.

Members of one training program (``training/ensemble.py``) and of one evaluation program
(``evaluation/members_eval.py``) share a model padded to the widest member's
vocabulary. A member whose task has V tokens of the program's V_max keeps its own parameters
(initialised by a model of V tokens, as its single run's are) in the first V rows (or columns)
of the token embedding and output projection, zeros beyond. Its logits beyond V are masked out
of the loss, the metrics and the greedy choice (``mask_logits``), so those rows get no gradient
and, under Adam, no update: cropped back (``crop_to``), its state is the single run's. The
optimizer state pads and crops alike, leaf by leaf.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp


def shapes_of(tree: Any) -> list[tuple[int, ...]]:
    """The shape of every leaf of ``tree`` (arrays or ``ShapeDtypeStruct``), in tree order."""
    return [tuple(leaf.shape) for leaf in jax.tree.leaves(tree)]


def pad_to(tree: Any, like: Any) -> Any:
    """``tree`` with each leaf zero-padded at the end of every axis to its ``like`` leaf's
    shape (``like``: the same structure, arrays or ``ShapeDtypeStruct``)."""
    def pad(leaf: jax.Array, target: Any) -> jax.Array:
        extra = [(0, int(t) - int(s)) for s, t in zip(leaf.shape, target.shape, strict=True)]
        return jnp.pad(leaf, extra) if any(after for _, after in extra) else leaf
    return jax.tree.map(pad, tree, like)


def crop_to(tree: Any, like: Any) -> Any:
    """``tree`` with each leaf cut to its ``like`` leaf's shape (the inverse of ``pad_to``)."""
    def crop(leaf: jax.Array, target: Any) -> jax.Array:
        if tuple(leaf.shape) == tuple(target.shape):
            return leaf
        return leaf[tuple(slice(0, int(n)) for n in target.shape)]
    return jax.tree.map(crop, tree, like)


def mask_logits(logits_BxTxV: jax.Array, vocab_size: jax.Array | int | None) -> jax.Array:
    """Logits with every token id >= ``vocab_size`` at the lowest float: it gets probability
    exactly 0, no gradient and is never the argmax, so the loss and greedy choice are those of a
    model over ``vocab_size`` tokens (``None``: unchanged)."""
    if vocab_size is None:
        return logits_BxTxV
    ids = jnp.arange(logits_BxTxV.shape[-1])
    return jnp.where(ids < vocab_size, logits_BxTxV, jnp.finfo(logits_BxTxV.dtype).min)


def widest(vocab_sizes: Sequence[int]) -> int:
    """The index of the member with the largest vocabulary (the first of equals)."""
    return max(range(len(vocab_sizes)), key=lambda k: (vocab_sizes[k], -k))
