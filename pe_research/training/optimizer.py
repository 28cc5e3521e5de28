"""The optimizer a config's ``train`` block describes: optax schedule, clipping, AdamW."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import jax
import jax.numpy as jnp
import optax

# The optimizer settings members of one program may each have their own of: scalars the update
# reads, passed to the stacked step as traced values (``training/step.py``).
OPTIMIZER_SETTINGS = ("learning_rate", "weight_decay", "clip_norm", "warmup_steps", "schedule")


def setting_value(train: Mapping[str, Any], key: str) -> float:
    """A setting of ``OPTIMIZER_SETTINGS`` as the number a stacked step takes (``schedule``: 1 for
    cosine decay, 0 for constant)."""
    value = train[key]
    return float(value == "cosine") if key == "schedule" else float(value)


def learning_rate_schedule(train: Mapping[str, Any]) -> optax.Schedule:
    """Linear warm-up to ``learning_rate``, then constant or cosine decay to 0 at ``steps``.

    Update 0 already uses ``learning_rate / warmup_steps`` (no update is spent at zero), and
    update ``warmup_steps - 1`` the full rate. ``learning_rate``, ``warmup_steps`` and
    ``schedule`` may be traced scalars (an ensemble member's own; ``schedule`` 1 for cosine, 0
    for constant), which optax's schedules, taking step counts as Python numbers, do not admit;
    the values are theirs (``optax.join_schedules([linear_schedule, cosine_decay_schedule])``)
    to rounding.
    """
    peak, warmup, total = train["learning_rate"], train["warmup_steps"], train["steps"]
    kind = train["schedule"]
    cosine = kind == "cosine" if isinstance(kind, str) else jnp.asarray(kind) > 0

    def schedule(count: jax.Array | int) -> jax.Array:
        count = jnp.asarray(count, jnp.float32)
        ramp = peak * (count + 1) / jnp.maximum(warmup, 1)
        after = jnp.broadcast_to(jnp.asarray(peak, jnp.float32), count.shape)
        if cosine is not False:
            decay_steps = jnp.maximum(total - warmup, 1)
            done = jnp.minimum(count - warmup, decay_steps) / decay_steps
            decayed = after * (0.5 * (1 + jnp.cos(jnp.pi * done)))
            after = decayed if cosine is True else jnp.where(cosine, decayed, after)
        return jnp.where(count < warmup, ramp, after)

    return schedule


def decays(param: jax.Array) -> bool:
    """Whether weight decay applies: to matrices, not to biases, scales and other vectors."""
    return param.ndim > 1


def make_optimizer(train: Mapping[str, Any]) -> optax.GradientTransformation:
    """Global-norm clipping (if ``clip_norm`` > 0) then AdamW; no decay on biases and norms.

    ``train`` values of ``OPTIMIZER_SETTINGS`` may be traced scalars (an ensemble member's own);
    a traced ``clip_norm`` of 0 clips nothing, as the untraced 0 does."""
    adamw = optax.adamw(learning_rate_schedule(train), weight_decay=train["weight_decay"],
                        mask=lambda params: jax.tree.map(decays, params))
    clip_norm = train["clip_norm"]
    # Always a chain, so the optimizer state has one structure whether or not clipping is on:
    # a run can then be resumed with a different train.clip_norm, and members with and without
    # clipping share a program.
    if isinstance(clip_norm, jax.Array):
        # A norm below infinity always passes optax's test, which then returns the update as is.
        clip = optax.clip_by_global_norm(jnp.where(clip_norm > 0, clip_norm, jnp.inf))
    else:
        clip = optax.clip_by_global_norm(clip_norm) if clip_norm > 0 else optax.identity()
    return optax.chain(clip, adamw)
