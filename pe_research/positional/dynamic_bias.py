"""Dynamic position bias: an MLP over the signed distance gives every head its logit bias.

    bias[h, i, j] = MLP(delta_ij)_h,   delta_ij = p_i - p_j,
    or with ``log_distance``: delta_ij = sign(p_i - p_j) log(|p_i - p_j| + 1).
The MLP is Linear(1 -> w), SiLU, then ``depth - 1`` times Linear(w -> w), SiLU, then
Linear(w -> H), with an optional LayerNorm after every hidden Linear (``norm``). Defaults follow
x-transformers' ``DynamicPositionBias`` (x_transformers/x_transformers.py: w = d_model // 4,
depth 2, no log distance, no norm); the idea is CrossFormer's dynamic position bias (Wang et al.
2022) and SwinV2's log-spaced continuous position bias (Liu et al. 2022) for the log option.
One MLP serves every layer, as there. Acts in: encoder self and decoder self attention.

The MLP is evaluated once per (query, key) pair, so it materialises ``[B, T, S, w]``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import jax
import jax.numpy as jnp
from flax import nnx

from pe_research.positional.base import SELF_ATTENTION, PositionalScheme, require


def signed_distance(q_positions_BxT: jax.Array, k_positions_BxS: jax.Array,
                    log_distance: bool = False) -> jax.Array:
    """``p_i - p_j`` (or its signed log) as float32 ``[B, T, S]``."""
    delta = (q_positions_BxT[:, :, None] - k_positions_BxS[:, None, :]).astype(jnp.float32)
    return jnp.sign(delta) * jnp.log1p(jnp.abs(delta)) if log_distance else delta


class DistanceMLP(nnx.Module):
    """Scalar distance -> ``num_heads`` biases."""

    def __init__(self, width: int, depth: int, num_heads: int, norm: bool, *, rngs: nnx.Rngs):
        sizes = [1] + [width] * depth
        self.hidden = nnx.List([nnx.Linear(sizes[i], sizes[i + 1], rngs=rngs)
                                for i in range(depth)])
        self.norms = nnx.List([nnx.LayerNorm(width, rngs=rngs) for _ in range(depth)]
                              if norm else [])
        self.out = nnx.Linear(width, num_heads, rngs=rngs)

    def __call__(self, x: jax.Array) -> jax.Array:
        """``[...]`` -> ``[..., H]``."""
        h = x[..., None]
        for index, layer in enumerate(self.hidden):
            h = layer(h)
            if len(self.norms):
                h = self.norms[index](h)
            h = jax.nn.silu(h)
        return self.out(h)


class DynamicBias(PositionalScheme):
    """One distance MLP shared by all layers."""

    name = "dynamic_bias"
    acts_in = SELF_ATTENTION
    relative = True

    def __init__(self, pe: Mapping[str, Any], *, d_model: int, num_heads: int, rngs: nnx.Rngs):
        super().__init__(pe, d_model=d_model, num_heads=num_heads, rngs=rngs)
        width = int(pe["mlp_width"]) or max(d_model // 4, 1)
        self.mlp = DistanceMLP(width, int(pe["mlp_depth"]), num_heads, bool(pe["norm"]),
                               rngs=rngs)
        self.log_distance = bool(pe["log_distance"])

    @classmethod
    def default_config(cls) -> dict[str, Any]:
        return {"mlp_width": 0, "mlp_depth": 2, "log_distance": False, "norm": False}

    @classmethod
    def check_config(cls, pe: Mapping[str, Any], *, d_model: int, num_heads: int) -> None:
        require(isinstance(pe["mlp_width"], int) and pe["mlp_width"] >= 0, "model.pe.mlp_width",
                pe["mlp_width"], "hidden units of the distance MLP (0 = d_model // 4)")
        require(isinstance(pe["mlp_depth"], int) and pe["mlp_depth"] >= 1, "model.pe.mlp_depth",
                pe["mlp_depth"], "hidden layers of the distance MLP, at least 1")

    def logit_bias(self, q_BxTxHxD, k_BxSxHxD, q_positions_BxT, k_positions_BxS, kind):
        delta = signed_distance(q_positions_BxT, k_positions_BxS, self.log_distance)
        return jnp.moveaxis(self.mlp(delta), -1, 1)  # [B, T, S, H] -> [B, H, T, S]
