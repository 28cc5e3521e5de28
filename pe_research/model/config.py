"""The typed, frozen view of ``config.model`` that the model code reads."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import jax.numpy as jnp

from pe_research.core.errors import ConfigError, check_choice
from pe_research.model.ablation import parse_ablated_heads, site_layers
from pe_research.positional.base import DECODER_SELF, ENCODER_SELF, AttentionKind
from pe_research.positional.registry import check_pe_config, scheme_class

DTYPES = {"float32": jnp.float32, "bfloat16": jnp.bfloat16}
ACTIVATIONS = ("gelu", "relu")
NORM_PLACEMENTS = ("pre", "post")
ATTENTION_IMPLEMENTATIONS = ("xla", "cudnn")
# encoder_decoder: the seq2seq Transformer. encoder_only: one bidirectional stack over the source
# followed by one slot per output token (num_encoder_layers layers). decoder_only: one causal
# stack over source, SEP, target (num_decoder_layers layers).
ARCHITECTURES = ("encoder_decoder", "encoder_only", "decoder_only")


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
    architecture: str = "encoder_decoder"
    ablated_heads: str = ""  # heads whose output is zeroed, e.g. "2:1" (model/ablation.py)
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
        check_choice("model.architecture", self.architecture, ARCHITECTURES)
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
        self.check_scheme_acts()
        self.ablated_by_site()
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
    def single_stack(self) -> bool:
        """True for encoder-only and decoder-only models (one stack over source and target)."""
        return self.architecture != "encoder_decoder"

    @property
    def stack_kind(self) -> AttentionKind:
        """The one attention kind of a single-stack model."""
        return DECODER_SELF if self.architecture == "decoder_only" else ENCODER_SELF

    @property
    def num_layers(self) -> int:
        """Layers of a single-stack model: num_encoder_layers (encoder-only) or
        num_decoder_layers (decoder-only)."""
        return (self.num_decoder_layers if self.architecture == "decoder_only"
                else self.num_encoder_layers)

    def describe(self) -> str:
        """One line naming the model that runs, and for a single stack the key of its depth."""
        if self.single_stack:
            key = ("num_decoder_layers" if self.architecture == "decoder_only"
                   else "num_encoder_layers")
            depth = f"{self.num_layers} layers (model.{key})"
        else:
            depth = f"{self.num_encoder_layers}+{self.num_decoder_layers} layers"
        base = f" over {self.pe['base']}" if "base" in self.pe else ""
        return (f"{self.architecture.replace('_', '-')}, {depth}, d_model {self.d_model}, "
                f"{self.num_heads} heads, d_ff {self.d_ff}, positions {self.pe['type']}{base}")

    def check_scheme_acts(self) -> None:
        """ConfigError when the scheme has no way to reach a single-stack model's attention."""
        if not self.single_stack:
            return
        scheme = scheme_class(self.pe["type"])
        if (scheme.acts_in and not scheme.adds_input_vectors
                and self.stack_kind not in scheme.acts_in):
            kinds = sorted(kind.value for kind in scheme.acts_in)
            raise ConfigError("model.pe.type", self.pe["type"],
                              f"acts only in {kinds} attention, and model.architecture="
                              f"{self.architecture!r} has only {self.stack_kind.value} "
                              "attention; choose another scheme or architecture")
        if self.num_layers < 1:
            key = ("model.num_decoder_layers" if self.architecture == "decoder_only"
                   else "model.num_encoder_layers")
            raise ConfigError(key, self.num_layers, f"the number of layers of the "
                              f"{self.architecture} model; at least 1")

    def ablated_by_site(self) -> dict[tuple[str, int], tuple[int, ...]]:
        """``model.ablated_heads`` as ``{(site, layer): heads}``, sites 'self' (single stack),
        'encoder', 'decoder', 'cross'; ConfigError for a malformed or missing head."""
        layers = site_layers(self.architecture, self.num_encoder_layers, self.num_decoder_layers)
        return parse_ablated_heads(self.ablated_heads, layers, self.num_heads)

    @property
    def split_input(self) -> bool:
        """True when tokens and positions each fill half the input width (combine='split')."""
        return (self.pe.get("combine", "add") == "split"
                and scheme_class(self.pe["type"]).adds_input_vectors)

    @property
    def token_width(self) -> int:
        """Width of the token embedding: d_model, or d_model / 2 with combine='split'."""
        return self.d_model // 2 if self.split_input else self.d_model

