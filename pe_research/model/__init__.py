"""The seq2seq Transformer, its attention with positional hooks, its typed config and factory."""

from pe_research.model.config import ModelConfig
from pe_research.model.factory import abstract_model, build_model, model_config
from pe_research.model.transformer import Seq2SeqTransformer

__all__ = ["ModelConfig", "Seq2SeqTransformer", "abstract_model", "build_model", "model_config"]
