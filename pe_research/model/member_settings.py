"""The model's scalars each member of a stacked program may have its own of.

They are plain attributes of the model's modules (but one), read when the model is called, so a
program sets a member's values on its model as traced scalars after merging it
(``set_member_settings``) and members that differ only in them share one compiled program:

* ``dropout_rate`` (``model.dropout_rate``): every layer's and the embedding's dropout;
* ``max_wavelength`` (``model.pe.max_wavelength``): the wavelength base of the sinusoidal and
  rotary schemes (RoPE's theta; sinusoidal, scaled sinusoidal, Transformer-XL, xPos, PoPE), a
  common axis of length-extrapolation sweeps (e.g. Men et al. 2024, "Base of RoPE Bounds
  Context Length").
* ``scaling_*`` (``model.pe.scaling.*``): RoPE's test-time scaling (PI, NTK-aware, YaRN and
  their factor, trained length and YaRN's betas), whose frequencies the members of a
  fine-tuning study compute each from their own (``positional/rope_scaling.py``);
* ``logit_scaling`` (``model.pe.logit_scaling``): ``none`` or ``log_n_scaling``, which have the
  same parameters (``ssmax`` adds its own and does not stack: ``config/stacking.py``);
* ``init_threshold``, ``eps`` (``model.pe.*``): FIRE's L0, whose learned multiple is the
  threshold of its normalised distance, and the eps of that normaliser;
* ``scale_base``, ``gamma`` (``model.pe.*``): xPos's decay, B and gamma in zeta_i^((n - m) / B);
* ``hope_train_length`` (``model.pe.hope_train_length``): HoPE's L, below whose period RoPE's
  frequencies stop rotating (0: HoPE off), which varies with the training lengths a sweep
  stacks;
* ``abacus_max_k`` (``model.pe.abacus_max_k``): the largest offset training adds to Abacus IDs,
  the one setting that is no module's attribute: it is read where a training batch's IDs are
  offset (``model/inputs.forward``).

A setting whose values are names (``CHOICES``) passes as its index in the choices.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import jax
from flax import nnx

from pe_research.positional.length_scaling import LOGIT_SCALINGS
from pe_research.positional.rope_scaling import SCALING_TYPES

# attribute of the model's modules -> the config key it comes from
MODEL_SETTINGS = {"dropout_rate": "model.dropout_rate",
                  "max_wavelength": "model.pe.max_wavelength",
                  "scaling_type": "model.pe.scaling.type",
                  "scaling_factor": "model.pe.scaling.factor",
                  "scaling_original_max_position": "model.pe.scaling.original_max_position",
                  "scaling_beta_fast": "model.pe.scaling.beta_fast",
                  "scaling_beta_slow": "model.pe.scaling.beta_slow",
                  "logit_scaling": "model.pe.logit_scaling",
                  "init_threshold": "model.pe.init_threshold", "eps": "model.pe.eps",
                  "scale_base": "model.pe.scale_base", "gamma": "model.pe.gamma",
                  "hope_train_length": "model.pe.hope_train_length",
                  "abacus_max_k": "model.pe.abacus_max_k"}
# a setting named by a choice -> its choices (the traced value is the choice's index)
CHOICES = {"model.pe.scaling.type": SCALING_TYPES, "model.pe.logit_scaling": LOGIT_SCALINGS}


def config_value(config: Mapping[str, Any], key: str) -> Any:
    """The value of the dotted ``key`` in a nested config (None where it is absent)."""
    value: Any = config
    for part in key.split("."):
        value = value.get(part) if hasattr(value, "get") else None
    return value


def setting_number(key: str, value: Any) -> float:
    """The traced value of config ``key``'s ``value``: the number, or a choice's index."""
    return float(CHOICES[key].index(value) if key in CHOICES else value)


def members_model_settings(configs: Sequence[Mapping[str, Any]]) -> dict[str, list[float]]:
    """``{attribute: [member k's value]}`` for the settings of ``MODEL_SETTINGS`` the members'
    configs differ in (a setting every member shares stays in the program's model)."""
    settings = {}
    for attribute, key in MODEL_SETTINGS.items():
        values = [config_value(config, key) for config in configs]
        if None not in values and len({setting_number(key, value) for value in values}) > 1:
            settings[attribute] = [setting_number(key, value) for value in values]
    return settings


def set_member_settings(model: nnx.Module,
                        settings: Mapping[str, jax.Array] | None) -> nnx.Module:
    """``model`` with each module's attribute named in ``settings`` set to its (traced) value."""
    for attribute, value in (settings or {}).items():
        model.set_attributes(**{attribute: value}, raise_if_not_found=False)
    return model
