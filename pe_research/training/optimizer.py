"""The optimizer a config's ``train`` block describes: optax schedule, clipping, AdamW, applied
leaf by leaf or to all parameters as one vector (``train.optimizer_layout``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import jax
import jax.numpy as jnp
import optax
from jax.flatten_util import ravel_pytree


def learning_rate_schedule(train: Mapping[str, Any]) -> optax.Schedule:
    """Linear warm-up to ``learning_rate``, then constant or cosine decay to 0 at ``steps``.

    Update 0 already uses ``learning_rate / warmup_steps`` (no update is spent at zero), and
    update ``warmup_steps - 1`` the full rate.
    """
    peak, warmup, total = train["learning_rate"], train["warmup_steps"], train["steps"]
    if train["schedule"] == "cosine":
        after = optax.cosine_decay_schedule(peak, decay_steps=max(total - warmup, 1))
    else:
        after = optax.constant_schedule(peak)
    if not warmup:
        return after
    ramp = optax.linear_schedule(peak / warmup, peak, transition_steps=max(warmup - 1, 1))
    return optax.join_schedules([ramp, after], boundaries=[warmup])


def decays(param: jax.Array) -> bool:
    """Whether weight decay applies: to matrices, not to biases, scales and other vectors."""
    return param.ndim > 1


def on_one_vector_layout(train: Mapping[str, Any]) -> bool:
    """Whether ``train`` optimizes all parameters as one vector (``optimizer_layout`` 'flat')."""
    return train["optimizer_layout"] == "flat"


def make_optimizer(train: Mapping[str, Any]) -> optax.GradientTransformation:
    """Global-norm clipping (if ``clip_norm`` > 0) then AdamW; no decay on biases and norms."""
    flat = on_one_vector_layout(train)
    # a flat vector's decay is masked by zeroing the other leaves' share (``on_one_vector``)
    mask = None if flat else (lambda params: jax.tree.map(decays, params))
    adamw = optax.adamw(learning_rate_schedule(train), weight_decay=train["weight_decay"],
                        mask=mask)
    # Always a chain, so the optimizer state has one structure whether or not clipping is on:
    # a run can then be resumed with a different train.clip_norm.
    clip = optax.clip_by_global_norm(train["clip_norm"]) if train["clip_norm"] > 0 \
        else optax.identity()
    chain = optax.chain(clip, adamw)
    return on_one_vector(chain) if flat else chain


def on_one_vector(inner: optax.GradientTransformation) -> optax.GradientTransformation:
    """``inner`` applied to all leaves concatenated into one ``[P]`` vector: the same updates
    (up to the summation order of the gradient norm) in a few fused operations instead of a
    few per parameter, which is what a small model's step spends its launches on (an ensemble's
    step on a GPU: benchmarks/RESULTS.md). Its state holds ``[P]`` moments."""

    def init(params: Any) -> Any:
        return inner.init(flatten(params))

    def update(grads: Any, state: Any, params: Any = None) -> tuple[Any, Any]:
        flat_grads, unflatten = ravel_pytree(grads)
        # Weight decay adds ``weight_decay * params``: zeros where a leaf takes none.
        decayed = None if params is None else flatten(
            jax.tree.map(lambda p: p if decays(p) else jnp.zeros_like(p), params))
        updates, state = inner.update(flat_grads, state, decayed)
        return unflatten(updates), state

    return optax.GradientTransformation(init, update)


def flatten(tree: Any) -> jax.Array:
    """The leaves of ``tree`` raveled and concatenated in tree order: ``[P]``."""
    return ravel_pytree(tree)[0]


def gradient_norm(grads: Any, train: Mapping[str, Any]) -> jax.Array:
    """The global L2 norm of ``grads``, computed as the optimizer's clipping computes it (so
    the two are one computation in the compiled step)."""
    if on_one_vector_layout(train):
        return optax.tree.norm(flatten(grads))
    return optax.global_norm(grads)
