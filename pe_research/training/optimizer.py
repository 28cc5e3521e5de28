"""The optimizer a config's ``train`` block describes: optax schedule, clipping, AdamW."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import jax
import jax.numpy as jnp
import optax

# The optimizer settings members of one program may each have their own of: scalars the update
# reads, passed to the stacked step as traced values (``training/step.py``).
OPTIMIZER_SETTINGS = ("learning_rate", "weight_decay", "clip_norm")


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
