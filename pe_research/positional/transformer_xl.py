"""Transformer-XL relative attention (Dai et al. 2019), as in the Chomsky-hierarchy benchmarks.

    A_ij = q_i . k_j  +  q_i . W_R R(p_i - p_j)  +  u . k_j  +  v . W_R R(p_i - p_j)
         = q_i . k_j  +  u . k_j  +  (q_i + v) . W_R R(p_i - p_j)
where R(d) is the sinusoidal vector (width d_model, ``sinusoidal``) of the signed distance
d = p_i - p_j, W_R a learned projection d_model -> heads x head size, and u, v learned global
content and position biases per head. Everything is scaled by 1/sqrt(D) like the content term;
the last two terms are the logit bias.

Both directions: R is evaluated at the signed distance, so the bidirectional encoder covers
d in [-L, L) (keys after the query get their own embeddings) and the causal decoder [0, L).
Instead of a table over every distance (and the "relative shift"), which randomized positions
would make thousands of rows long, the term is computed exactly for arbitrary (offset, randomized)
positions in one of two ways, chosen from the shapes at hand (``pair_tensor_pays``):
- rows sharing their positions (``[1, T]`` and ``[1, S]``: every plain or batch-drawn draw):
  W_R R(p_i - p_j) once per query-key pair, ``[T, S, H, D]``, then a product over the head size D
  per row; the pair tensor is the batch's, not each row's;
- positions per row: the angle-difference identity
    sin(a - b) = sin a cos b - cos a sin b,   cos(a - b) = cos a cos b + sin a sin b
  turns the term into a dot product between a query-side and a key-side vector of width E =
  d_model per head, E / D times the multiply-adds of the content product.
u, v, W_R belong to each layer (not shared), as in the randomized-positions benchmark code. Acts
in: encoder self and decoder self attention.

As in the authors' code (kimiyoung/transformer-xl, ``mem_transformer.py``: ``rw_head_q = w_head_q
+ r_w_bias``), u enters the query, so the attention kernel's own product computes
(q_i + u) . k_j; the bias is then the position term alone, with (q_i + u) + (v - u) = q_i + v.
A separate u . k_j term cost the cached decoder a copy of every cached key at every step.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from pe_research.positional.base import SELF_ATTENTION, PositionalScheme, require
from pe_research.positional.sinusoidal import sinusoidal


def relative_sinusoid_logits(query_BxTxHxD: jax.Array, w_r_ExHxD: jax.Array,
                             q_positions_BxT: jax.Array, k_positions_BxS: jax.Array,
                             max_wavelength: float = 10_000.0) -> jax.Array:
    """``query_i . W_R R(p_i - p_j)`` (unscaled) as float32 ``[B, H, T, S]``; R has width E.

    Positions of one row each (``[1, T]``, ``[1, S]``) go through the pair tensor where it
    takes at most half the multiply-adds (``pair_tensor_pays``), any others through the identity."""
    batch, queries, heads, head_dim = query_BxTxHxD.shape
    if q_positions_BxT.shape[0] == 1 and k_positions_BxS.shape[0] == 1 and pair_tensor_pays(
            batch, queries, k_positions_BxS.shape[1], heads, head_dim, w_r_ExHxD.shape[0]):
        return pair_sinusoid_logits(query_BxTxHxD, w_r_ExHxD, q_positions_BxT[0],
                                    k_positions_BxS[0], max_wavelength)
    return identity_sinusoid_logits(query_BxTxHxD, w_r_ExHxD, q_positions_BxT, k_positions_BxS,
                                    max_wavelength)


def pair_tensor_pays(batch: int, queries: int, keys: int, heads: int, head_dim: int,
                     width: int) -> bool:
    """Whether the pair tensor (``pair_sinusoid_logits``) takes at most half the multiply-adds
    of the identity (``identity_sinusoid_logits``) for these shapes: from 20 rows at the table
    model's T = S = 128, H = D = 8, E = 64."""
    pairs = queries * keys * heads * head_dim
    pair_cost = pairs * width + batch * pairs
    identity_cost = batch * queries * heads * (head_dim * width + keys * width)
    # half, not merely fewer: its product contracts the narrow head size D over a pair tensor
    # larger than the cache, where the identity's contracts E (docs/performance.md)
    return 2 * pair_cost <= identity_cost


def pair_sinusoid_logits(query_BxTxHxD: jax.Array, w_r_ExHxD: jax.Array, q_positions_T: jax.Array,
                         k_positions_S: jax.Array, max_wavelength: float = 10_000.0) -> jax.Array:
    """``query_i . W_R R(p_i - p_j)`` as float32 ``[B, H, T, S]`` for positions every row shares:
    the projected sinusoid of each pair's distance ``[T, S, H, D]``, then a product over D."""
    distances_TxS = q_positions_T[:, None] - k_positions_S[None, :]
    pair_HxTxDxS = jnp.einsum("tse,ehd->htds",
                              sinusoidal(distances_TxS, w_r_ExHxD.shape[0], max_wavelength),
                              w_r_ExHxD)
    # heads and queries lead both operands, so the product is H x T matrix products [B, D] x
    # [D, S] whose [H, T, B, S] output moves to [B, H, T, S] in rows of S
    query_HxTxBxD = query_BxTxHxD.astype(jnp.float32).transpose(2, 1, 0, 3)
    logits_HxTxBxS = jax.lax.dot_general(query_HxTxBxD, pair_HxTxDxS,
                                         (((3,), (2,)), ((0, 1), (0, 1))))
    return logits_HxTxBxS.transpose(2, 0, 1, 3)


def identity_sinusoid_logits(query_BxTxHxD: jax.Array, w_r_ExHxD: jax.Array,
                             q_positions_BxT: jax.Array, k_positions_BxS: jax.Array,
                             max_wavelength: float = 10_000.0) -> jax.Array:
    """``query_i . W_R R(p_i - p_j)`` as float32 ``[B, H, T, S]`` for any positions: query- and
    key-side vectors of width E per head from the angle-difference identity."""
    width = w_r_ExHxD.shape[0]
    # Projection of each query onto every sinusoid channel: [B, T, H, E], E interleaved sin/cos.
    projected = jnp.einsum("bthd,ehd->bthe", query_BxTxHxD.astype(jnp.float32), w_r_ExHxD)
    on_sin, on_cos = projected[..., 0::2], projected[..., 1::2]
    q_angles = sinusoidal(q_positions_BxT, width, max_wavelength)[:, :, None, :]  # [B, T, 1, E]
    sin_a, cos_a = q_angles[..., 0::2], q_angles[..., 1::2]
    k_angles = sinusoidal(k_positions_BxS, width, max_wavelength)  # [B, S, E]
    sin_b, cos_b = k_angles[..., 0::2], k_angles[..., 1::2]
    # s sin(a-b) + c cos(a-b) = (s sin a + c cos a) cos b + (c sin a - s cos a) sin b
    query_side = jnp.concatenate([on_sin * sin_a + on_cos * cos_a,
                                  on_cos * sin_a - on_sin * cos_a], axis=-1)
    key_side = jnp.concatenate([cos_b, sin_b], axis=-1)
    return jnp.einsum("bthf,bsf->bhts", query_side, key_side)


class TransformerXL(PositionalScheme):
    """Learned u, v ``[H, D]`` and W_R ``[d_model, H, D]`` per layer; fixed sinusoids."""

    name = "transformer_xl"
    acts_in = SELF_ATTENTION
    relative = True
    shared_across_layers = False

    def __init__(self, pe: Mapping[str, Any], *, d_model: int, num_heads: int, rngs: nnx.Rngs):
        super().__init__(pe, d_model=d_model, num_heads=num_heads, rngs=rngs)
        self.max_wavelength = float(pe["max_wavelength"])
        bias_init = nnx.initializers.normal(stddev=float(pe["bias_init_std"]))
        shape = (num_heads, self.head_dim)
        self.u = nnx.Param(bias_init(rngs.params(), shape, jnp.float32))
        self.v = nnx.Param(bias_init(rngs.params(), shape, jnp.float32))
        # Same initialiser as the model's own projections (LeCun normal over d_model inputs).
        projection_init = nnx.initializers.lecun_normal(in_axis=0, out_axis=(1, 2))
        self.w_r = nnx.Param(projection_init(rngs.params(), (d_model, *shape), jnp.float32))

    @classmethod
    def default_config(cls) -> dict[str, Any]:
        return {"max_wavelength": 10_000.0, "bias_init_std": 0.02}

    @classmethod
    def check_config(cls, pe: Mapping[str, Any], *, d_model: int, num_heads: int) -> None:
        require(d_model % 2 == 0, "model.d_model", d_model,
                "transformer_xl embeds distances in sinusoids of width d_model; make it even")
        require(pe["max_wavelength"] > 0, "model.pe.max_wavelength", pe["max_wavelength"], "> 0")
        require(pe["bias_init_std"] >= 0, "model.pe.bias_init_std", pe["bias_init_std"], ">= 0")

    def transform_qk(self, q_BxTxHxD, k_BxSxHxD, q_positions_BxT, k_positions_BxS, kind):
        """Queries plus the content bias u; keys as they are."""
        return (q_BxTxHxD + self.u[...]).astype(q_BxTxHxD.dtype), k_BxSxHxD

    def logit_bias(self, q_BxTxHxD, k_BxSxHxD, q_positions_BxT, k_positions_BxS, kind):
        """``(q_i + v) . W_R R(p_i - p_j) / sqrt(D)`` float32 ``[B, H, T, S]``, from the
        transformed queries ``q_i + u``."""
        query_plus_v = q_BxTxHxD.astype(jnp.float32) + (self.v[...] - self.u[...])
        position = relative_sinusoid_logits(query_plus_v, self.w_r[...], q_positions_BxT,
                                            k_positions_BxS, self.max_wavelength)
        return position / np.sqrt(q_BxTxHxD.shape[-1])
