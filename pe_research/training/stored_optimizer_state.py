"""The optimizer state as checkpoints store it: leaf by leaf, whichever
``train.optimizer_layout`` a run trains with, so a run resumes under either layout and
checkpoints written before the flat layout existed still restore."""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from pe_research.runs.checkpoint import abstract_like
from pe_research.training.optimizer import make_optimizer, on_one_vector_layout

Shapes = tuple[tuple[int, ...], ...]


def stored_state(opt_state: Any, params: Any, train: Mapping[str, Any]) -> Any:
    """``opt_state`` of ``train``'s layout in the stored (per-leaf) layout."""
    if not on_one_vector_layout(train):
        return opt_state
    skeleton = jax.eval_shape(_per_leaf(train).init, params)
    leaves = _split(jax.tree.leaves(opt_state), _shapes(params))
    return jax.tree.unflatten(jax.tree.structure(skeleton), leaves)


def trained_state(stored: Any, params: Any, train: Mapping[str, Any]) -> Any:
    """A stored (per-leaf) optimizer state in ``train``'s layout."""
    if not on_one_vector_layout(train):
        return stored
    skeleton = jax.eval_shape(make_optimizer(train).init, params)
    moments = tuple(leaf.ndim == 1 for leaf in jax.tree.leaves(skeleton))
    leaves = _join(jax.tree.leaves(stored), _shapes(params), moments)
    return jax.tree.unflatten(jax.tree.structure(skeleton), leaves)


def stored_skeleton(params: Any, train: Mapping[str, Any],
                    sharding: jax.sharding.Sharding) -> Any:
    """Shapes, dtypes and ``sharding`` of the stored optimizer state, for Orbax to restore."""
    return abstract_like(jax.eval_shape(_per_leaf(train).init, params), sharding)


def _per_leaf(train: Mapping[str, Any]) -> Any:
    return make_optimizer({**dict(train), "optimizer_layout": "leaves"})


def _shapes(params: Any) -> Shapes:
    return tuple(tuple(leaf.shape) for leaf in jax.tree.leaves(params))


def _offsets(shapes: Shapes) -> list[int]:
    return np.cumsum([0, *(math.prod(shape) for shape in shapes)]).tolist()


# Jitted, so that arrays spread over several processes convert too (eager slicing refuses them).
@functools.partial(jax.jit, static_argnums=1)
def _split(leaves: list[jax.Array], shapes: Shapes) -> list[jax.Array]:
    """Every ``[P]`` leaf (a moment over all parameters) cut into arrays of ``shapes``; the
    others (step counts) as they are."""
    offsets = _offsets(shapes)
    out = []
    for leaf in leaves:
        if leaf.ndim != 1:
            out.append(leaf)
            continue
        out += [leaf[start:end].reshape(shape)
                for start, end, shape in zip(offsets[:-1], offsets[1:], shapes, strict=True)]
    return out


@functools.partial(jax.jit, static_argnums=(1, 2))
def _join(leaves: list[jax.Array], shapes: Shapes, moments: tuple[bool, ...]) -> list[jax.Array]:
    """The inverse of ``_split``: where ``moments`` says so, ``len(shapes)`` consecutive leaves
    raveled into one ``[P]`` array; other leaves one for one."""
    remaining = iter(leaves)
    out = []
    for moment in moments:
        if moment:
            out.append(jnp.concatenate([next(remaining).ravel() for _ in shapes]))
        else:
            out.append(next(remaining))
    return out
