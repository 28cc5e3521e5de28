"""ALiBi (Press et al. 2022): a per-head linear penalty on distance, no position vectors.

bias[h, i, j] = -slope_h * |pos_i - pos_j|. In the causal decoder only j <= i is visible, so this
is the paper's -slope * (i - j); in the bidirectional encoder the absolute distance keeps it
symmetric. Acts in: encoder self and decoder self attention.

A symmetric bias cannot tell left from right: a bidirectional encoder with ALiBi alone maps a
string and its reverse to the same set of states (reversed), and cross-attention, which carries
no position, reads them as a set. So an encoder-decoder cannot copy both a string and its
reverse; on copy it stays near 50% exact match (docs/results.md). Use it decoder-only, as the
paper does.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from pe_research.positional.base import SELF_ATTENTION, PositionalScheme, require


def _power_of_two_slopes(num_heads: int) -> list[float]:
    start = 2.0 ** (-8.0 / num_heads)
    return [start ** (head + 1) for head in range(num_heads)]


def alibi_slopes(num_heads: int) -> np.ndarray:
    """The paper's slopes ``[H]``: geometric from 2^(-8/H); other counts interleave 2x heads."""
    if num_heads < 1:
        raise ValueError(f"num_heads must be >= 1, got {num_heads}")
    closest = 2 ** math.floor(math.log2(num_heads))
    slopes = _power_of_two_slopes(closest)
    if closest < num_heads:
        slopes += _power_of_two_slopes(2 * closest)[0::2][: num_heads - closest]
    return np.asarray(slopes, dtype=np.float32)


def alibi_bias(slopes: jax.Array, q_positions: jax.Array, k_positions: jax.Array) -> jax.Array:
    """``-slope * |q - k|``: slopes ``[H]``, positions ``[B, T]``/``[B, S]`` -> ``[B, H, T, S]``."""
    distance = jnp.abs(q_positions[:, :, None] - k_positions[:, None, :]).astype(jnp.float32)
    return -jnp.asarray(slopes)[None, :, None, None] * distance[:, None, :, :]


def head_slopes(num_heads: int, alibi_heads: int = 0) -> np.ndarray:
    """Slopes ``[H]``: the paper's slopes for the first ``alibi_heads`` heads (all when 0),
    zero (no position, NoPE) for the rest, as x-transformers' ``alibi_num_heads`` does."""
    count = alibi_heads or num_heads
    return np.concatenate([alibi_slopes(count), np.zeros(num_heads - count, np.float32)])


class ALiBi(PositionalScheme):
    """The paper's fixed slopes, or learned ones (``learnable_slopes``), on all or some heads.

    Options (defaults are the paper's): ``heads`` > 0 gives ALiBi to the first ``heads`` heads
    only, with the slopes the paper gives ``heads`` heads, and leaves the others without
    positions (an ALiBi/NoPE mix). ``learnable_slopes`` trains each ALiBi head's slope,
    parametrised by its log so it stays positive and initialised at the paper's value (as
    x-transformers' former ``LearnedAlibiPositionalBias``).
    """

    name = "alibi"
    acts_in = SELF_ATTENTION
    relative = True

    def __init__(self, pe: Mapping[str, Any], *, d_model: int, num_heads: int, rngs: nnx.Rngs):
        super().__init__(pe, d_model=d_model, num_heads=num_heads, rngs=rngs)
        self.alibi_heads = int(pe.get("heads", 0)) or num_heads
        slopes = alibi_slopes(self.alibi_heads)
        self.log_slopes = (nnx.Param(jnp.log(jnp.asarray(slopes)))
                           if pe.get("learnable_slopes", False) else None)
        self.slopes = tuple(float(s) for s in head_slopes(num_heads, self.alibi_heads))

    @classmethod
    def default_config(cls) -> dict[str, Any]:
        return {"heads": 0, "learnable_slopes": False}

    @classmethod
    def check_config(cls, pe: Mapping[str, Any], *, d_model: int, num_heads: int) -> None:
        heads = pe.get("heads", 0)
        require(isinstance(heads, int) and 0 <= heads <= num_heads, "model.pe.heads", heads,
                f"how many of the {num_heads} heads get ALiBi (0 = all)")

    def current_slopes(self) -> jax.Array:
        """``[H]`` slopes, learned ones where ``learnable_slopes``, zero on NoPE heads."""
        if self.log_slopes is None:
            return jnp.asarray(self.slopes)
        padding = jnp.zeros(self.num_heads - self.alibi_heads, jnp.float32)
        return jnp.concatenate([jnp.exp(self.log_slopes[...]), padding])

    def logit_bias(self, q_BxTxHxD, k_BxSxHxD, q_positions_BxT, k_positions_BxS, kind):
        return alibi_bias(self.current_slopes(), q_positions_BxT, k_positions_BxS)
