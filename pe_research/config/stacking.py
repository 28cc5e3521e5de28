"""Which configs can train stacked in one program: those equal but for ``STACKED_KEYS``.

Members of one program share the model's graph and parameter shapes and the step loop's steps
(logging, evaluation, checkpoints); what is only data, a scalar of the step, or per-member
bookkeeping may differ: the seed, the optimizer's scalars (peak learning rate, warm-up steps,
constant or cosine decay, weight decay, clipping norm), whether the loss scores the end token
(``train.predict_eos``), the model's (dropout rate, the positional scheme's wavelength base:
``model/member_settings.py``), the task (the vocabulary is padded to the widest member's and each
member's loss is taken over its own tokens: ``training/ensemble.py``), its training and evaluation
lengths and how a batch's lengths are drawn (``data.length_sampling``, ``data.length_stream``), the
run a member starts from (``train.init_from``, ``train.init_checkpoint``: each member restores its
own, or starts fresh), the W&B name, RoPE's test-time scaling (``model.pe.scaling``: none, PI,
NTK-aware, YaRN, their factor), the logit scaling between ``none`` and ``log_n_scaling``
(``STACKED_AMONG``: ``ssmax`` has parameters of its own), FIRE's initial threshold and eps, xPos's
decay and HoPE's training length (``SCHEME_SCALARS``), what only draws the initial parameters
(``INIT_ONLY_KEYS``: each member's are drawn from its own config), and the randomized-position range
(``randomized_range``; 0: plain positions): the program draws each of its members' ranges from a
member's keys and the member takes its own (``model/inputs.member_positions``); and the largest
offset training adds to Abacus IDs (``model.pe.abacus_max_k``, traced).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pe_research.config.files import flat_config

ROPE_SCALING_KEYS = tuple(f"model.pe.scaling.{field}" for field in
                          ("type", "factor", "original_max_position", "beta_fast", "beta_slow"))
# Scalars of a scheme's forward, traced settings of the program's model (model/member_settings.py)
SCHEME_SCALARS = ("model.pe.init_threshold", "model.pe.eps", "model.pe.scale_base",
                  "model.pe.gamma", "model.pe.hope_train_length")
# Read only where a model's parameters are drawn: each member draws its own from its own config.
INIT_ONLY_KEYS = tuple(f"model.pe.{key}" for key in (
    "init_std", "init_c", "ssmax_init", "gate_init_std", "gate_bias_init", "bias_init",
    "bias_init_std"))

STACKED_KEYS = ("seed", "train.learning_rate", "train.warmup_steps", "train.schedule",
                "train.weight_decay", "train.clip_norm", "train.predict_eos", "data.train_lengths",
                "data.eval_samples", "train.eval_lengths", "eval.lengths", "wandb.name",
                "wandb.tags", "model.pe.randomize.max_position", "model.pe.abacus_max_k",
                "model.dropout_rate", "model.pe.max_wavelength", *ROPE_SCALING_KEYS,
                *SCHEME_SCALARS, *INIT_ONLY_KEYS, "data.length_sampling", "data.length_stream",
                "train.init_from", "train.init_checkpoint")
STACKED_PREFIXES = ("task.",)
# key -> the values among which it stacks (a member with another value keeps its program)
STACKED_AMONG = {"model.pe.logit_scaling": ("none", "log_n_scaling")}
# Set on every module of the program's model, so not where per-layer schemes (model.pe.layers)
# may carry bases or scalings of their own.
NOT_WITH_LAYERS = ("model.pe.max_wavelength", *ROPE_SCALING_KEYS, *SCHEME_SCALARS)


def stacked(key: str, flat: Mapping[str, Any]) -> bool:
    """Whether the dotted config ``key`` may differ between members of one program, in the
    flat config ``flat``."""
    if flat.get("model.pe.layers") and key in NOT_WITH_LAYERS:
        return False
    if key in STACKED_AMONG:
        return flat.get(key) in STACKED_AMONG[key]
    return key in STACKED_KEYS or key.startswith(STACKED_PREFIXES)


def stacked_keys_text() -> str:
    """The keys members may differ in, as a sentence's list (for errors)."""
    among = [f"{key} ({' or '.join(values)})" for key, values in STACKED_AMONG.items()]
    return ", ".join([*STACKED_KEYS, *(f"{prefix}*" for prefix in STACKED_PREFIXES), *among])


def program_key(config: Mapping[str, Any]) -> str:
    """What members of one program must share: every key of the (nested) ``config`` dict but
    the stacked ones, as text (two configs with equal keys train in one program)."""
    flat = flat_config(dict(config))
    shared = {key: value for key, value in flat.items() if not stacked(key, flat)}
    return repr(sorted(shared.items()))


def first_difference(first: Mapping[str, Any], other: Mapping[str, Any]) -> str | None:
    """The first dotted key, not stacked, whose value differs between two nested config
    dicts (None when they can train in one program)."""
    a, b = flat_config(dict(first)), flat_config(dict(other))
    for key in sorted(set(a) | set(b)):
        if not (stacked(key, a) and stacked(key, b)) and a.get(key) != b.get(key):
            return key
    return None


def randomized_range(config: Mapping[str, Any]) -> int:
    """``model.pe.randomize.max_position`` of a nested config dict (0: plain positions)."""
    return int(((config.get("model") or {}).get("pe") or {}).get("randomize", {})
               .get("max_position", 0) or 0)
