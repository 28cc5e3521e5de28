"""The typed, frozen view of ``config.model`` that the model code reads."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import jax.numpy as jnp

from pe_research.errors import ConfigError, check_choice
from pe_research.positional.registry import check_pe_config, scheme_class

DTYPES = {"float32": jnp.float32, "bfloat16": jnp.bfloat16}
ACTIVATIONS = ("gelu", "relu")
NORM_PLACEMENTS = ("pre", "post")
ATTENTION_IMPLEMENTATIONS = ("xla", "cudnn")


@dataclasses.dataclass(frozen=True)
class ModelConfig:
    """Everything needed to build the seq2seq Transformer; ``pe`` is the scheme's block."""

    vocab_size: int
    d_model: int = 64
    num_heads: int = 4
    num_encoder_layers: int = 2
    num_decoder_layers: int = 2
    d_ff: int = 256
    dropout_rate: float = 0.0
    activation: str = "gelu"
    norm: str = "pre"
    scale_embedding: bool = True
    tie_output: bool = True
    dtype: str = "float32"
    attention_implementation: str = "xla"
    pe: Mapping[str, Any] = dataclasses.field(default_factory=lambda: {"type": "none"})

    @property
    def head_dim(self) -> int:
        return self.d_model // self.num_heads

    @property
    def compute_dtype(self) -> Any:
        return DTYPES[self.dtype]

    @classmethod
    def from_mapping(cls, model: Mapping[str, Any]) -> ModelConfig:
        """Build from ``config.model`` (a ConfigDict or dict) and validate it."""
        fields = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(model) - fields)
        if unknown:
            raise ConfigError(f"model.{unknown[0]}", model[unknown[0]],
                              f"not a model key; valid keys are {sorted(fields)}")
        values = {k: (dict(v) if k == "pe" else v) for k, v in model.items()}
        config = cls(**values)
        config.validate()
        return config

    def validate(self) -> None:
        """Raise ``ConfigError`` naming the key, the bad value and what is valid."""
        check_choice("model.activation", self.activation, ACTIVATIONS)
        check_choice("model.norm", self.norm, NORM_PLACEMENTS)
        check_choice("model.dtype", self.dtype, tuple(DTYPES))
        check_choice("model.attention_implementation", self.attention_implementation,
                ATTENTION_IMPLEMENTATIONS)
        for key in ("vocab_size", "d_model", "num_heads", "d_ff"):
            if getattr(self, key) < 1:
                raise ConfigError(f"model.{key}", getattr(self, key), "a positive integer")
        if self.d_model % self.num_heads:
            raise ConfigError("model.d_model", self.d_model,
                              f"must be divisible by model.num_heads={self.num_heads}")
        if not 0.0 <= self.dropout_rate < 1.0:
            raise ConfigError("model.dropout_rate", self.dropout_rate, "in [0, 1)")
        check_pe_config(self.pe, d_model=self.d_model, num_heads=self.num_heads)
        if self.split_input:
            if self.d_model % 2:
                raise ConfigError("model.d_model", self.d_model,
                                  "must be even with model.pe.combine='split' (half token, half "
                                  "position)")
            if self.tie_output:
                raise ConfigError("model.tie_output", True, "must be False with "
                                  "model.pe.combine='split': the d_model / 2 token embedding "
                                  "cannot read out a d_model-wide output")
            scheme_class(self.pe["type"]).check_config(self.pe, d_model=self.d_model // 2,
                                                       num_heads=self.num_heads)

    @property
    def split_input(self) -> bool:
        """True when tokens and positions each fill half the input width (combine='split')."""
        return (self.pe.get("combine", "add") == "split"
                and scheme_class(self.pe["type"]).adds_input_vectors)

    @property
    def token_width(self) -> int:
        """Width of the token embedding: d_model, or d_model / 2 with combine='split'."""
        return self.d_model // 2 if self.split_input else self.d_model

