"""DAPE (Zheng et al. 2024, "DAPE: Data-Adaptive Positional Encoding for Length Extrapolation",
NeurIPS): a base scheme's logit bias, corrected by an MLP that reads the attention logits.

For every (query i, key j) the H content logits and the H base biases form one 2H-vector, and
    logits'[:, i, j] = logits[:, i, j] + bias[:, i, j] + MLP([logits[:, i, j]; bias[:, i, j]])
with MLP = Linear(2H -> w), LeakyReLU(0.01), Linear(w -> H), w = ``mlp_width`` (32). As in the
authors' code (chuanyang-Zheng/DAPE, megatron/model/positional_embeddings.py, class
``AliBi_C``): the logits are the scaled q . k / sqrt(D), the MLP is applied before the mask and
the softmax, each attention layer has its own MLP, and its Linear layers start from PyTorch's
default initialisation (uniform in +-1/sqrt(fan_in), weights and biases). The base is a
relative bias scheme named by ``base`` (the paper uses ALiBi and Kerple) with its defaults.

The MLP runs per (query, key) pair, so it materialises ``[B, T, S, w]``. Acts where its base
acts (self-attention); attention is computed explicitly (the MLP needs the logits).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import jax
import jax.numpy as jnp
from flax import nnx

from pe_research.positional.alibi import ALiBi
from pe_research.positional.base import SELF_ATTENTION, PositionalScheme, require
from pe_research.positional.dynamic_bias import DynamicBias
from pe_research.positional.explicit_attention import (
    masked_softmax,
    scaled_logits,
    weighted_values,
)
from pe_research.positional.fire import Fire
from pe_research.positional.kerple import KerpleLog, KerplePower
from pe_research.positional.t5 import T5Bias

# The relative bias schemes DAPE may correct (each builds from its own defaults).
BASES: dict[str, type[PositionalScheme]] = {
    "alibi": ALiBi, "kerple_log": KerpleLog, "kerple_power": KerplePower, "t5": T5Bias,
    "fire": Fire, "dynamic_bias": DynamicBias}


def torch_linear(fan_in: int, fan_out: int, rngs: nnx.Rngs) -> nnx.Linear:
    """A Linear layer initialised as PyTorch's ``nn.Linear``: U(+-1/sqrt(fan_in)) everywhere."""
    bound = fan_in ** -0.5

    def bias_init(key, shape, dtype=jnp.float32):
        return jax.random.uniform(key, shape, dtype, -bound, bound)

    kernel_init = nnx.initializers.variance_scaling(1 / 3, "fan_in", "uniform")
    return nnx.Linear(fan_in, fan_out, kernel_init=kernel_init, bias_init=bias_init, rngs=rngs)


def dape_correction(logits_BxHxTxS: jax.Array, bias_BxHxTxS: jax.Array, hidden: nnx.Linear,
                    out: nnx.Linear) -> jax.Array:
    """``MLP([logits; bias])`` over the head axis, float32 ``[B, H, T, S]``."""
    bias_BxHxTxS = jnp.broadcast_to(bias_BxHxTxS, logits_BxHxTxS.shape)  # a batch-1 base bias
    features = jnp.concatenate([logits_BxHxTxS, bias_BxHxTxS], axis=1)  # [B, 2H, T, S]
    h = jax.nn.leaky_relu(hidden(jnp.moveaxis(features, 1, -1)), negative_slope=0.01)
    return jnp.moveaxis(out(h), -1, 1)


class Dape(PositionalScheme):
    """A base bias scheme plus a per-layer logits-and-bias MLP."""

    name = "dape"
    acts_in = SELF_ATTENTION  # where every allowed base acts
    relative = True  # every allowed base is relative, and the MLP reads only logits and bias
    shared_across_layers = False
    extra_logit_terms = {"dape_mlp": "DAPE's correction: MLP([q.k / sqrt(D); bias]) across heads"}

    def __init__(self, pe: Mapping[str, Any], *, d_model: int, num_heads: int, rngs: nnx.Rngs):
        super().__init__(pe, d_model=d_model, num_heads=num_heads, rngs=rngs)
        base = BASES[pe["base"]]
        self.base = base({"type": pe["base"], **base.default_config()}, d_model=d_model,
                         num_heads=num_heads, rngs=rngs)
        width = int(pe["mlp_width"])
        self.hidden = torch_linear(2 * num_heads, width, rngs)
        self.out = torch_linear(width, num_heads, rngs)

    @classmethod
    def default_config(cls) -> dict[str, Any]:
        return {"base": "alibi", "mlp_width": 32}

    @classmethod
    def check_config(cls, pe: Mapping[str, Any], *, d_model: int, num_heads: int) -> None:
        require(pe["base"] in BASES, "model.pe.base", pe["base"],
                f"the relative bias scheme DAPE corrects, one of {tuple(BASES)}")
        require(isinstance(pe["mlp_width"], int) and pe["mlp_width"] >= 1, "model.pe.mlp_width",
                pe["mlp_width"], "hidden units of DAPE's MLP, at least 1")

    def logit_bias(self, q_BxTxHxD, k_BxSxHxD, q_positions_BxT, k_positions_BxS, kind):
        return self.base.logit_bias(q_BxTxHxD, k_BxSxHxD, q_positions_BxT, k_positions_BxS, kind)

    def extra_logits(self, q_BxTxHxD, k_BxSxHxD, bias_BxHxTxS, mask_BxTxS, q_positions_BxT,
                     k_positions_BxS, kind):
        logits = scaled_logits(q_BxTxHxD, k_BxSxHxD)
        return {"dape_mlp": dape_correction(logits, bias_BxHxTxS, self.hidden, self.out)}

    def explicit_attention(self, q_BxTxHxD, k_BxSxHxD, v_BxSxHxD, bias_BxHxTxS, mask_BxTxS,
                           q_positions_BxT, k_positions_BxS, kind):
        correction = self.extra_logits(q_BxTxHxD, k_BxSxHxD, bias_BxHxTxS, mask_BxTxS,
                                       q_positions_BxT, k_positions_BxS, kind)["dape_mlp"]
        logits = scaled_logits(q_BxTxHxD, k_BxSxHxD) + bias_BxHxTxS + correction
        probs = masked_softmax(logits, mask_BxTxS)
        return weighted_values(probs, v_BxSxHxD).astype(q_BxTxHxD.dtype)
