"""Test-time RoPE scaling: position interpolation, NTK-aware base change, YaRN.

Plain RoPE rotates channel pair i by ``p * theta_i`` with ``theta_i = b^(-2i/D)`` (b is
``max_wavelength``, D the head size). Each method below changes the frequencies ``theta_i`` so
that a model trained on positions below L can be evaluated on positions up to ``s * L``
(``s = factor``) without retraining:

* ``pi``   (Chen et al. 2023):  theta'_i = theta_i / s  (every position is divided by s).
* ``ntk``  (bloc97 2023):       b' = b * s^(D / (D - 2)),  theta'_i = b'^(-2i/D): the highest
  frequency (i = 0) is unchanged and the lowest (i = D/2 - 1) is divided by exactly s.
* ``yarn`` (Peng et al. 2023):  with wavelength lambda_i = 2 pi / theta_i, r_i = L / lambda_i,
  ramp g_i = clip((r_i - beta_slow) / (beta_fast - beta_slow), 0, 1),
  theta'_i = (1 - g_i) * theta_i / s + g_i * theta_i   (high frequencies kept, low ones
  interpolated), and attention logits multiplied by 1/t with sqrt(1/t) = 0.1 ln(s) + 1.

Members of one stacked program may each have their own scaling: their fields are then traced
scalars, ``type`` an index into ``SCALING_TYPES`` (``model/member_settings.py``), and the
functions below select each member's method with ``jnp.where`` instead of a Python branch.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import Any

import jax
import jax.numpy as jnp

from pe_research.core.errors import ConfigError

SCALING_TYPES = ("none", "pi", "ntk", "yarn")
DEFAULT_SCALING: dict[str, Any] = {
    "type": "none",
    "factor": 1.0,
    "original_max_position": 0,
    "beta_fast": 32.0,
    "beta_slow": 1.0,
}


@dataclasses.dataclass(frozen=True)
class RopeScaling:
    """A validated ``model.pe.scaling`` block; in a stacked program, fields the members differ
    in are traced scalars (``type``: an index into ``SCALING_TYPES``)."""

    type: str | jax.Array = "none"
    factor: float | jax.Array = 1.0
    original_max_position: int | jax.Array = 0
    beta_fast: float | jax.Array = 32.0
    beta_slow: float | jax.Array = 1.0

    @classmethod
    def from_mapping(cls, scaling: Mapping[str, Any] | None) -> RopeScaling:
        """Fill defaults, reject unknown keys and impossible values with a ``ConfigError``."""
        scaling = dict(scaling or {})
        for key in scaling:
            if key not in DEFAULT_SCALING:
                raise ConfigError(f"model.pe.scaling.{key}", scaling[key],
                                  f"not a scaling key; valid keys are {sorted(DEFAULT_SCALING)}")
        values = {**DEFAULT_SCALING, **scaling}
        result = cls(type=str(values["type"]), factor=float(values["factor"]),
                     original_max_position=int(values["original_max_position"]),
                     beta_fast=float(values["beta_fast"]), beta_slow=float(values["beta_slow"]))
        result.validate()
        return result

    def validate(self) -> None:
        if self.type not in SCALING_TYPES:
            raise ConfigError("model.pe.scaling.type", self.type, f"choose one of {SCALING_TYPES}")
        if self.factor < 1.0:
            raise ConfigError("model.pe.scaling.factor", self.factor,
                              ">= 1 (eval length / trained length)")
        if self.type == "yarn" and self.original_max_position < 1:
            raise ConfigError("model.pe.scaling.original_max_position",
                              self.original_max_position,
                              "yarn needs the trained context length L (a positive integer)")
        if self.type == "yarn" and not 0 < self.beta_slow < self.beta_fast:
            raise ConfigError("model.pe.scaling.beta_fast", self.beta_fast,
                              f"yarn needs 0 < beta_slow ({self.beta_slow}) < beta_fast")


def rope_inverse_wavelengths(head_dim: int, max_wavelength: float = 10_000.0) -> jax.Array:
    """Unscaled frequencies ``theta_i = b^(-2i/D)``, ``[D/2]`` float32."""
    fraction = 2.0 * jnp.arange(head_dim // 2, dtype=jnp.float32) / head_dim
    return max_wavelength ** (-fraction)


def yarn_ramp(head_dim: int, max_wavelength: float, scaling: RopeScaling) -> jax.Array:
    """YaRN's per-pair weight ``g_i`` in [0, 1]: 1 keeps the frequency, 0 fully interpolates."""
    theta = rope_inverse_wavelengths(head_dim, max_wavelength)
    rotations_in_context = scaling.original_max_position * theta / (2.0 * math.pi)  # r_i
    ramp = (rotations_in_context - scaling.beta_slow) / (scaling.beta_fast - scaling.beta_slow)
    return jnp.clip(ramp, 0.0, 1.0)


def scaled_inverse_wavelengths(head_dim: int, max_wavelength: float,
                               scaling: RopeScaling) -> jax.Array:
    """Frequencies ``theta'_i`` ``[D/2]`` after the scaling method (formulas in the module doc);
    a traced ``scaling.type`` (an index into ``SCALING_TYPES``) selects its method's."""
    if not isinstance(scaling.type, str):
        methods = [scaled_inverse_wavelengths(head_dim, max_wavelength,
                                              dataclasses.replace(scaling, type=name))
                   for name in SCALING_TYPES]
        return jnp.stack(methods)[jnp.asarray(scaling.type).astype(jnp.int32)]
    theta = rope_inverse_wavelengths(head_dim, max_wavelength)
    factor = scaling.factor
    if scaling.type == "none":
        return theta
    if scaling.type == "pi":
        return theta / factor
    if scaling.type == "ntk":
        if head_dim <= 2:  # a single pair is both the highest and the lowest frequency
            return theta
        base = max_wavelength * factor ** (head_dim / (head_dim - 2))
        return rope_inverse_wavelengths(head_dim, base)
    ramp = yarn_ramp(head_dim, max_wavelength, scaling)
    return (1.0 - ramp) * theta / factor + ramp * theta


def attention_scale(scaling: RopeScaling) -> float | jax.Array:
    """Factor applied to both q and k: YaRN's ``sqrt(1/t) = 0.1 ln(s) + 1``, else 1 (a traced
    scalar where the type or the factor is traced)."""
    if isinstance(scaling.type, str) and isinstance(scaling.factor, float):
        if scaling.type == "yarn" and scaling.factor > 1.0:
            return 0.1 * math.log(scaling.factor) + 1.0
        return 1.0
    if isinstance(scaling.type, str) and scaling.type != "yarn":
        return 1.0
    yarn = True if isinstance(scaling.type, str) else \
        jnp.asarray(scaling.type) == SCALING_TYPES.index("yarn")
    factor = jnp.asarray(scaling.factor, jnp.float32)
    return jnp.where(yarn & (factor > 1.0), 0.1 * jnp.log(factor) + 1.0, 1.0)
