"""Rotary position embedding, RoPE (Su et al. 2021): rotate each query/key pair of channels.

For head channel pairs (d_i, d_{i + D/2}), i < D/2, and position p:
    angle_i(p) = (p / scale) / max_wavelength^(2i/D)
    [x_i, x_{i+D/2}] -> [x_i cos - x_{i+D/2} sin,  x_{i+D/2} cos + x_i sin]
so q_m . k_n depends on m - n only. Acts in: encoder self and decoder self attention.

``model.pe.scaling`` selects a test-time frequency scaling (PI, NTK-aware, YaRN) for evaluating
beyond the trained length; see ``rope_scaling`` for the formulas. The default is ``none``.
``model.pe.self_extend`` and ``model.pe.attention_sinks`` are test-time extensions that change
which keys a query sees and at which distance, in causal self-attention (``rope_extension``);
with one set, that attention is written out instead of fused.

Three options restrict the rotation (defaults: full RoPE):

- ``rotary_fraction`` r: partial RoPE (GPT-J / GPT-NeoX ``rotary_pct``; x-transformers'
  ``rotary_emb_dim``). Only the first R = 2 round(r D / 2) channels of each head rotate, with
  the frequencies of an R-wide RoPE; the other D - R channels carry no position.
- ``drop_lowest_frequencies`` f: p-RoPE (Barbero et al. 2025, "Round and Round We Go! What makes
  Rotary Positional Encodings useful?", ICLR). The floor(f R / 2) lowest frequencies are set to
  zero, so those channel pairs are not rotated and stay free for content; the paper's p, the
  fraction of frequencies kept, is 1 - f.
- ``hope_train_length`` L: HoPE (Chen et al. 2025, "HoPE: A Novel Positional Encoding Without
  Long-Term Decay for Enhanced Context Awareness and Extrapolation", ACL, arXiv 2410.21216). A
  frequency theta_i that does not complete one period over the training length,
  theta_i L < 2 pi, is set to zero, so its channel pair is position-independent and only the
  high-frequency pairs rotate. The abstract states the method ("replaces the specific
  components in RoPE with position-independent ones, retaining only high-frequency signals");
  the threshold theta_i >= 2 pi / L is the split as implementations of HoPE state it. The
  authors' code was not found to check it against. 0 (the default) turns HoPE off.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import jax
import jax.numpy as jnp
from flax import nnx

from pe_research.positional.base import DECODER_SELF, SELF_ATTENTION, PositionalScheme, require
from pe_research.positional.explicit_attention import masked_softmax, weighted_values
from pe_research.positional.rope_extension import (
    DEFAULT_ATTENTION_SINKS,
    DEFAULT_SELF_EXTEND,
    ContextExtension,
    extended_logits,
)
from pe_research.positional.rope_scaling import (
    DEFAULT_SCALING,
    RopeScaling,
    attention_scale,
    scaled_inverse_wavelengths,
)


def rope_angles(
    positions: jax.Array, head_dim: int, max_wavelength: float = 10_000.0, scale: float = 1.0
) -> jax.Array:
    """Rotation angles ``[..., T, D/2]`` for positions ``[..., T]`` (float32)."""
    fraction = 2.0 * jnp.arange(head_dim // 2, dtype=jnp.float32) / head_dim
    inverse_wavelength = max_wavelength ** (-fraction)
    return (jnp.asarray(positions, jnp.float32)[..., None] / scale) * inverse_wavelength


def rotate(x: jax.Array, angles: jax.Array) -> jax.Array:
    """Rotate channel pairs of ``x [..., T, H, D]`` by ``angles [..., T, D/2]``."""
    first, second = jnp.split(x.astype(jnp.float32), 2, axis=-1)
    cos = jnp.cos(angles)[..., None, :]  # broadcast over heads
    sin = jnp.sin(angles)[..., None, :]
    rotated = jnp.concatenate([first * cos - second * sin, second * cos + first * sin], axis=-1)
    return rotated.astype(x.dtype)


def apply_rope(
    x: jax.Array, positions: jax.Array, max_wavelength: float = 10_000.0, scale: float = 1.0
) -> jax.Array:
    """RoPE on ``x [..., T, H, D]`` at ``positions [..., T]``; ``scale`` divides positions (PI)."""
    return rotate(x, rope_angles(positions, x.shape[-1], max_wavelength, scale))


def rotated_width(head_dim: int, rotary_fraction: float) -> int:
    """R: the even number of channels per head that partial RoPE rotates."""
    return 2 * round(rotary_fraction * head_dim / 2)


def drop_lowest(angles: jax.Array, fraction: float) -> jax.Array:
    """Angles ``[..., R/2]`` with the floor(fraction R/2) lowest frequencies (last) set to 0."""
    dropped = int(fraction * angles.shape[-1])
    keep = jnp.arange(angles.shape[-1]) < angles.shape[-1] - dropped
    return jnp.where(keep, angles, 0.0)


def hope_keeps(inverse_wavelengths: jax.Array, train_length: int | jax.Array) -> jax.Array:
    """Which frequencies ``[R/2]`` HoPE keeps: those completing a period in ``train_length``
    (a Python int, or a traced scalar: a stacked member's own)."""
    return inverse_wavelengths * train_length >= 2 * math.pi


def rotate_part(x: jax.Array, angles: jax.Array) -> jax.Array:
    """Rotate the first ``2 * angles.shape[-1]`` channels of ``x [..., T, H, D]``; keep the rest."""
    width = 2 * angles.shape[-1]
    if width == x.shape[-1]:
        return rotate(x, angles)
    return jnp.concatenate([rotate(x[..., :width], angles), x[..., width:]], axis=-1)


class RoPE(PositionalScheme):
    """Rotates queries and keys in self-attention; cross-attention is left untouched."""

    name = "rope"
    acts_in = SELF_ATTENTION
    relative = True
    own_attention_is_q_dot_k = True  # a test-time extension's attention: logit scaling reaches it

    def __init__(self, pe: Mapping[str, Any], *, d_model: int, num_heads: int, rngs: nnx.Rngs):
        super().__init__(pe, d_model=d_model, num_heads=num_heads, rngs=rngs)
        self.max_wavelength = float(pe["max_wavelength"])
        scaling = RopeScaling.from_mapping(pe.get("scaling"))
        # One attribute per field: a stacked program sets a member's own (model/member_settings)
        self.scaling_type = scaling.type
        self.scaling_factor = scaling.factor
        self.scaling_original_max_position = scaling.original_max_position
        self.scaling_beta_fast = scaling.beta_fast
        self.scaling_beta_slow = scaling.beta_slow
        self.rotated = rotated_width(self.head_dim, float(pe.get("rotary_fraction", 1.0)))
        self.dropped = float(pe.get("drop_lowest_frequencies", 0.0))
        self.hope_train_length = int(pe.get("hope_train_length", 0))
        self.extension = ContextExtension.from_pe(pe)

    @classmethod
    def default_config(cls) -> dict[str, Any]:
        return {"max_wavelength": 10_000.0, "scaling": dict(DEFAULT_SCALING),
                "rotary_fraction": 1.0, "drop_lowest_frequencies": 0.0, "hope_train_length": 0,
                "self_extend": dict(DEFAULT_SELF_EXTEND),
                "attention_sinks": dict(DEFAULT_ATTENTION_SINKS)}

    @classmethod
    def check_config(cls, pe: Mapping[str, Any], *, d_model: int, num_heads: int) -> None:
        head_dim = d_model // num_heads
        require(
            head_dim % 2 == 0,
            "model.d_model",
            d_model,
            f"rope rotates channel pairs, so d_model / num_heads must be even "
            f"(got head dim {head_dim} = {d_model} / {num_heads})",
        )
        require(pe["max_wavelength"] > 0, "model.pe.max_wavelength", pe["max_wavelength"], "> 0")
        RopeScaling.from_mapping(pe.get("scaling"))
        fraction = pe.get("rotary_fraction", 1.0)
        require(isinstance(fraction, int | float) and 0 < fraction <= 1
                and rotated_width(head_dim, fraction) >= 2, "model.pe.rotary_fraction",
                fraction, f"a fraction in (0, 1] that leaves at least one channel pair of the "
                f"head ({head_dim} channels) rotating")
        dropped = pe.get("drop_lowest_frequencies", 0.0)
        require(isinstance(dropped, int | float) and 0 <= dropped < 1,
                "model.pe.drop_lowest_frequencies", dropped,
                "a fraction in [0, 1) of the lowest frequencies to stop rotating (p-RoPE)")
        train_length = pe.get("hope_train_length", 0)
        require(isinstance(train_length, int) and (train_length == 0 or train_length >= 7),
                "model.pe.hope_train_length", train_length,
                "0 (HoPE off) or the training length in positions, at least 7 (below 2 pi no "
                "RoPE frequency completes a period and nothing would rotate)")
        ContextExtension.from_pe(pe)

    @property
    def scaling(self) -> RopeScaling:
        """The test-time scaling (its fields traced where a stacked program set a member's)."""
        return RopeScaling(self.scaling_type, self.scaling_factor,
                           self.scaling_original_max_position, self.scaling_beta_fast,
                           self.scaling_beta_slow)

    def rotation_angles(self, positions: jax.Array) -> jax.Array:
        """Angles ``[B, T, R/2]`` from the (possibly scaled) frequencies of an R-wide RoPE."""
        if isinstance(self.scaling_type, str) and self.scaling_type == "none":
            angles = rope_angles(positions, self.rotated, self.max_wavelength)
        else:
            theta = scaled_inverse_wavelengths(self.rotated, self.max_wavelength, self.scaling)
            angles = jnp.asarray(positions, jnp.float32)[..., None] * theta
        train_length = self.hope_train_length
        if not isinstance(train_length, int) or train_length:  # traced: a member's own
            inverse = rope_angles(jnp.ones(()), self.rotated, self.max_wavelength)
            keeps = hope_keeps(inverse, train_length)
            if not isinstance(train_length, int):
                keeps = keeps | (train_length == 0)  # 0: HoPE off for this member
            angles = jnp.where(keeps, angles, 0.0)
        return drop_lowest(angles, self.dropped) if self.dropped else angles

    def rotate_at(self, x_BxTxHxD: jax.Array, positions_BxT: jax.Array) -> jax.Array:
        """``x`` rotated at ``positions`` (and scaled by YaRN's temperature, whose square the
        logits grow by)."""
        x = rotate_part(x_BxTxHxD, self.rotation_angles(positions_BxT))
        scale = attention_scale(self.scaling)
        return x if isinstance(scale, float) and scale == 1.0 else (x * scale).astype(x.dtype)

    def extends(self, kind) -> bool:
        """Whether a test-time extension acts in attention of ``kind`` (causal only)."""
        return self.extension.active and kind is DECODER_SELF

    @property
    def uses_fused_attention(self) -> bool:
        return not self.extension.active

    def transform_qk(self, q_BxTxHxD, k_BxSxHxD, q_positions_BxT, k_positions_BxS, kind):
        """Rotated queries and keys; unrotated where an extension rotates them per key pair."""
        if self.extends(kind):
            return q_BxTxHxD, k_BxSxHxD
        return (self.rotate_at(q_BxTxHxD, q_positions_BxT),
                self.rotate_at(k_BxSxHxD, k_positions_BxS))

    def explicit_attention(self, q_BxTxHxD, k_BxSxHxD, v_BxSxHxD, bias_BxHxTxS, mask_BxTxS,
                           q_positions_BxT, k_positions_BxS, kind):
        """Self-Extend's or the sinks' attention where one is set, else None (fused)."""
        if not self.extends(kind):
            return None
        logits, mask = extended_logits(self.rotate_at, q_BxTxHxD, k_BxSxHxD, q_positions_BxT,
                                       k_positions_BxS, mask_BxTxS, self.extension)
        if bias_BxHxTxS is not None:
            logits = logits + bias_BxHxTxS
        probs = masked_softmax(logits, mask)
        return weighted_values(probs, v_BxSxHxD).astype(q_BxTxHxD.dtype)
