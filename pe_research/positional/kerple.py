"""Kerple (Chi et al. 2022): conditionally positive definite kernels of distance as logit biases.

    kerple_log:    bias[h, i, j] = -r1_h * log(1 + r2_h * |p_i - p_j|)
    kerple_power:  bias[h, i, j] = -r1_h * |p_i - p_j| ^ r2_h

Parameterisation (as in the authors' GPT-NeoX code): r1, r2 are raw per-head parameters, used
through a clamp, r >= 0.01 (and r2 <= 2 for the power, where the kernel stops being
conditionally positive definite). The authors clamp the stored values after every step; here the
clamp is applied when the parameters are read, with a straight-through gradient, so the value
used is the same and a clamped parameter still receives its gradient and can move back.
Initialisation as theirs: log r1 ~ U(0, 2), r2 ~ U(0, 1); power r1 ~ U(0, 1), r2 ~ U(0, 2).

The distance is |p_i - p_j|: the causal decoder sees only j <= i (the paper's kernel), the
bidirectional encoder gets the same symmetric kernel. One set of parameters per layer, as in the
authors' code. Acts in: encoder self and decoder self attention.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import jax
import jax.numpy as jnp
from flax import nnx

from pe_research.positional.base import SELF_ATTENTION, PositionalScheme

CLAMP_MIN = 0.01
MAX_POWER = 2.0


def clamp_straight_through(raw: jax.Array, low: float, high: float | None = None) -> jax.Array:
    """``clip(raw, low, high)`` in the forward pass, identity gradient in the backward pass."""
    return raw + jax.lax.stop_gradient(jnp.clip(raw, low, high) - raw)


def distance(q_positions_BxT: jax.Array, k_positions_BxS: jax.Array) -> jax.Array:
    """``|p_i - p_j|`` as float32 ``[B, 1, T, S]`` (broadcasts over heads)."""
    diff = q_positions_BxT[:, :, None] - k_positions_BxS[:, None, :]
    return jnp.abs(diff).astype(jnp.float32)[:, None]


def kerple_log_bias(r1_H: jax.Array, r2_H: jax.Array, q_positions_BxT: jax.Array,
                    k_positions_BxS: jax.Array) -> jax.Array:
    """``-r1 * log(1 + r2 * |p_i - p_j|)``: positive ``[H]`` parameters -> ``[B, H, T, S]``."""
    r1, r2 = r1_H[None, :, None, None], r2_H[None, :, None, None]
    return -r1 * jnp.log1p(r2 * distance(q_positions_BxT, k_positions_BxS))


def kerple_power_bias(r1_H: jax.Array, r2_H: jax.Array, q_positions_BxT: jax.Array,
                      k_positions_BxS: jax.Array) -> jax.Array:
    """``-r1 * |p_i - p_j| ^ r2``: positive ``[H]`` parameters -> ``[B, H, T, S]``."""
    r1, r2 = r1_H[None, :, None, None], r2_H[None, :, None, None]
    d = distance(q_positions_BxT, k_positions_BxS)
    positive = d > 0
    # d^r2 = exp(r2 log d) away from 0; at d = 0 the bias is 0 and the gradient w.r.t. r2 too.
    power = jnp.where(positive, jnp.exp(r2 * jnp.log(jnp.where(positive, d, 1.0))), 0.0)
    return -r1 * power


class _Kerple(PositionalScheme):
    """Two clamped per-head parameters and a kernel of distance; one instance per layer."""

    acts_in = SELF_ATTENTION
    relative = True
    shared_across_layers = False
    # (high of the r1 initial range, high of the r2 initial range, upper clamp of r2)
    init_high: tuple[float, float] = (1.0, 1.0)
    r2_max: float | None = None

    def __init__(self, pe: Mapping[str, Any], *, d_model: int, num_heads: int, rngs: nnx.Rngs):
        super().__init__(pe, d_model=d_model, num_heads=num_heads, rngs=rngs)
        high1, high2 = self.init_high
        self.r1 = nnx.Param(jax.random.uniform(rngs.params(), (num_heads,), maxval=high1))
        self.r2 = nnx.Param(jax.random.uniform(rngs.params(), (num_heads,), maxval=high2))

    def kernel_parameters(self) -> tuple[jax.Array, jax.Array]:
        """The clamped ``(r1, r2)`` used in the kernel, each ``[H]``."""
        return (clamp_straight_through(self.r1[...], CLAMP_MIN),
                clamp_straight_through(self.r2[...], CLAMP_MIN, self.r2_max))


class KerpleLog(_Kerple):
    """``-r1 log(1 + r2 |i - j|)``; the paper's best variant."""

    name = "kerple_log"
    init_high = (2.0, 1.0)

    def logit_bias(self, q_BxTxHxD, k_BxSxHxD, q_positions_BxT, k_positions_BxS, kind):
        return kerple_log_bias(*self.kernel_parameters(), q_positions_BxT, k_positions_BxS)


class KerplePower(_Kerple):
    """``-r1 |i - j|^r2`` with ``0 < r2 <= 2``."""

    name = "kerple_power"
    init_high = (1.0, 2.0)
    r2_max = MAX_POWER

    def logit_bias(self, q_BxTxHxD, k_BxSxHxD, q_positions_BxT, k_positions_BxS, kind):
        return kerple_power_bias(*self.kernel_parameters(), q_positions_BxT, k_positions_BxS)
