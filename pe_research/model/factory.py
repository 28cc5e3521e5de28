"""The model a config describes: built with parameters, or as an abstract structure to restore."""

from __future__ import annotations

import jax
import ml_collections
from flax import nnx

from pe_research.model.config import ModelConfig
from pe_research.model.single_stack import SingleStackTransformer
from pe_research.model.transformer import Seq2SeqTransformer, TokenModel


def model_config(config: ml_collections.ConfigDict, vocab_size: int) -> ModelConfig:
    """The typed model config; the vocabulary size comes from the task."""
    return ModelConfig.from_mapping({**config.model.to_dict(), "vocab_size": vocab_size})


def build_model(config: ml_collections.ConfigDict, vocab_size: int) -> TokenModel:
    """A freshly initialised model of ``model.architecture`` (parameters from ``config.seed``)."""
    typed = model_config(config, vocab_size)
    architecture = SingleStackTransformer if typed.single_stack else Seq2SeqTransformer
    return architecture(typed, rngs=nnx.Rngs(config.seed))


def abstract_model(config: ml_collections.ConfigDict, vocab_size: int) -> TokenModel:
    """The model's structure with shape/dtype placeholders instead of arrays (no compute)."""
    return nnx.eval_shape(lambda: build_model(config, vocab_size))


def model_line(config: ml_collections.ConfigDict, vocab_size: int, params: nnx.State) -> str:
    """``model: <what runs>; <n> parameters``, the line a run prints before training."""
    count = sum(leaf.size for leaf in jax.tree.leaves(params))
    return f"model: {model_config(config, vocab_size).describe()}; {count:,} parameters"
