"""Positional schemes: pure functions for their math, NNX modules for the model, a registry."""

from pe_research.positional.alibi import alibi_bias, alibi_slopes
from pe_research.positional.base import (
    CROSS,
    DECODER_SELF,
    ENCODER_SELF,
    AttentionKind,
    PositionalScheme,
)
from pe_research.positional.registry import (
    SCHEMES,
    build_scheme,
    check_pe_config,
    default_pe_config,
    scheme_class,
)
from pe_research.positional.rope import apply_rope, rope_angles
from pe_research.positional.sinusoidal import sinusoidal
from pe_research.positional.t5 import t5_relative_bucket

__all__ = [
    "CROSS",
    "DECODER_SELF",
    "ENCODER_SELF",
    "SCHEMES",
    "AttentionKind",
    "PositionalScheme",
    "alibi_bias",
    "alibi_slopes",
    "apply_rope",
    "build_scheme",
    "check_pe_config",
    "default_pe_config",
    "rope_angles",
    "scheme_class",
    "sinusoidal",
    "t5_relative_bucket",
]
