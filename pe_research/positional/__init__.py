"""Positional schemes: pure functions for their math, NNX modules for the model, a registry."""

from pe_research.positional.alibi import alibi_bias, alibi_slopes
from pe_research.positional.base import (
    CROSS,
    DECODER_SELF,
    ENCODER_SELF,
    AttentionKind,
    PositionalScheme,
)
from pe_research.positional.cope import cope_logits, cope_positions
from pe_research.positional.fire import fire_log_transform, fire_normalized_distance
from pe_research.positional.kerple import kerple_log_bias, kerple_power_bias
from pe_research.positional.randomize import (
    check_randomize,
    example_keys,
    make_positions,
    random_positions,
    split_key,
)
from pe_research.positional.registry import (
    SCHEMES,
    build_scheme,
    check_pe_config,
    default_pe_config,
    scheme_class,
)
from pe_research.positional.rope import apply_rope, rope_angles
from pe_research.positional.shaw import shaw_logit_bias, shaw_relative_index, shaw_value_term
from pe_research.positional.sinusoidal import sinusoidal
from pe_research.positional.t5 import t5_relative_bucket
from pe_research.positional.transformer_xl import relative_sinusoid_logits
from pe_research.positional.xpos import apply_xpos, xpos_scale

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
    "apply_xpos",
    "build_scheme",
    "check_pe_config",
    "check_randomize",
    "cope_logits",
    "cope_positions",
    "default_pe_config",
    "example_keys",
    "fire_log_transform",
    "fire_normalized_distance",
    "kerple_log_bias",
    "kerple_power_bias",
    "make_positions",
    "random_positions",
    "relative_sinusoid_logits",
    "rope_angles",
    "scheme_class",
    "shaw_logit_bias",
    "shaw_relative_index",
    "shaw_value_term",
    "sinusoidal",
    "split_key",
    "t5_relative_bucket",
    "xpos_scale",
]
