"""Scheme name -> class. Adding a scheme: write its file, add one line here."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from flax import nnx

from pe_research.core.errors import ConfigError
from pe_research.positional.abacus import ABACUS_DEFAULTS, check_abacus
from pe_research.positional.alibi import ALiBi
from pe_research.positional.base import PositionalScheme
from pe_research.positional.cope import CoPE
from pe_research.positional.dape import Dape
from pe_research.positional.dynamic_bias import DynamicBias
from pe_research.positional.fire import Fire
from pe_research.positional.fox import Fox
from pe_research.positional.kerple import KerpleLog, KerplePower
from pe_research.positional.learned import Learned
from pe_research.positional.length_scaling import SSMAX_INIT, check_logit_scaling
from pe_research.positional.nope import NoPE
from pe_research.positional.path import PaTH
from pe_research.positional.pope import PoPE
from pe_research.positional.position_coupling import PositionCoupling
from pe_research.positional.randomize import RANDOMIZE_DEFAULTS, check_randomize_config
from pe_research.positional.rope import RoPE
from pe_research.positional.scaled_sinusoidal import ScaledSinusoidal
from pe_research.positional.shaw import Shaw
from pe_research.positional.sinusoidal import Sinusoidal
from pe_research.positional.stick_breaking import StickBreaking
from pe_research.positional.t5 import T5Bias
from pe_research.positional.transformer_xl import TransformerXL
from pe_research.positional.xpos import XPos

SCHEMES: dict[str, type[PositionalScheme]] = {
    "none": NoPE,
    "sinusoidal": Sinusoidal,
    "learned": Learned,
    "rope": RoPE,
    "alibi": ALiBi,
    "t5": T5Bias,
    "shaw": Shaw,
    "transformer_xl": TransformerXL,
    "kerple_log": KerpleLog,
    "kerple_power": KerplePower,
    "fire": Fire,
    "xpos": XPos,
    "cope": CoPE,
    "scaled_sinusoidal": ScaledSinusoidal,
    "dynamic_bias": DynamicBias,
    "fox": Fox,
    "dape": Dape,
    "pope": PoPE,
    "stick_breaking": StickBreaking,
    "path": PaTH,
    "position_coupling": PositionCoupling,
}

# Keys of model.pe that belong to the model, not to any one scheme.
# ``layers``: () means one scheme everywhere; otherwise a pattern repeated over each stack's
# layers (``layer_blocks``).
# ``logit_scaling``: attention sharpened with the number of keys (``length_scaling.py``).
# ``abacus``: a table of the task's digit indices added to the token embedding (``abacus.py``).
COMMON_DEFAULTS: dict[str, Any] = {"type": "rope", "combine": "add",
                                   "randomize": RANDOMIZE_DEFAULTS, "layers": (),
                                   "logit_scaling": "none", "ssmax_init": SSMAX_INIT,
                                   **ABACUS_DEFAULTS}
# add: token + position. concat: W [token; position] + b, back to d_model. split: [token; position]
# with token and position each d_model / 2 wide, no projection (same width, no extra parameters).
COMBINE_CHOICES = ("add", "concat", "split")


def scheme_class(name: str) -> type[PositionalScheme]:
    """The class registered under ``name``; a ConfigError lists the valid names otherwise."""
    if name not in SCHEMES:
        raise ConfigError("model.pe.type", name, f"choose one of {sorted(SCHEMES)}")
    return SCHEMES[name]


def default_pe_config(name: str) -> dict[str, Any]:
    """A complete ``model.pe`` block for scheme ``name`` with every default filled in."""
    return copy.deepcopy({**COMMON_DEFAULTS, "type": name, **scheme_class(name).default_config()})


def check_keys(block: Mapping[str, Any], prefix: str = "model.pe") -> None:
    """ConfigError for a key of ``block`` that neither the model nor its scheme has."""
    allowed = set(COMMON_DEFAULTS) | set(scheme_class(block["type"]).default_config())
    for key in block:
        if key not in allowed:
            raise ConfigError(f"{prefix}.{key}", block[key], f"not a key of scheme "
                              f"{block['type']!r}; its keys are {sorted(allowed)}")


def check_pe_config(pe: Mapping[str, Any], *, d_model: int, num_heads: int) -> None:
    """Validate a ``model.pe`` block: known scheme, known keys, values the scheme accepts."""
    cls = scheme_class(pe["type"])
    check_keys(pe)
    if pe.get("combine", "add") not in COMBINE_CHOICES:
        raise ConfigError("model.pe.combine", pe["combine"], f"choose one of {COMBINE_CHOICES}")
    cls.check_config(pe, d_model=d_model, num_heads=num_heads)
    check_randomize_config(pe, cls)
    blocks = layer_blocks(pe)
    for index, block in enumerate(blocks):
        check_layer_block(block, index, d_model=d_model, num_heads=num_heads)
    check_logit_scaling(pe, [cls, *(scheme_class(block["type"]) for block in blocks)])
    check_abacus(pe)


def layer_blocks(pe: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The complete config block of each entry of ``pe['layers']`` (empty: one scheme for all).

    An entry is a scheme name or a mapping with ``type`` and any of its keys. An entry of the
    model's own ``pe['type']`` starts from the model's block (so its options apply), any other
    from that scheme's defaults.
    """
    blocks = []
    for index, entry in enumerate(pe.get("layers") or ()):
        if isinstance(entry, str):
            entry = {"type": entry}
        if not isinstance(entry, Mapping) or "type" not in entry:
            raise ConfigError(f"model.pe.layers[{index}]", entry, "a scheme name, or a mapping "
                              "with 'type' and that scheme's keys")
        name = entry["type"]
        if name not in SCHEMES:
            raise ConfigError(f"model.pe.layers[{index}]", name, f"choose one of {sorted(SCHEMES)}")
        own = {key: value for key, value in pe.items() if key != "layers"}
        base = own if name == pe["type"] else default_pe_config(name)
        blocks.append({**copy.deepcopy(dict(base)), **dict(entry), "layers": ()})
    return blocks


def check_layer_block(block: Mapping[str, Any], index: int, *, d_model: int,
                      num_heads: int) -> None:
    """A per-layer entry: a scheme that acts inside attention, with valid keys and values."""
    key = f"model.pe.layers[{index}]"
    cls = scheme_class(block["type"])
    if cls.adds_input_vectors:
        raise ConfigError(key, block["type"], "input-vector schemes act once, at the input: set "
                          "them as model.pe.type; per-layer entries must act inside attention")
    check_keys(block, key)
    cls.check_config(block, d_model=d_model, num_heads=num_heads)


def build_scheme(
    pe: Mapping[str, Any], *, d_model: int, num_heads: int, rngs: nnx.Rngs
) -> PositionalScheme:
    """Instantiate the scheme named by ``pe['type']`` from its config block."""
    return scheme_class(pe["type"])(pe, d_model=d_model, num_heads=num_heads, rngs=rngs)
