"""The seq2seq Transformer, its attention with positional hooks, and its typed config."""

from pe_research.model.config import ModelConfig
from pe_research.model.transformer import Seq2SeqTransformer

__all__ = ["ModelConfig", "Seq2SeqTransformer"]
