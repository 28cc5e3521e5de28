"""The Transformers (encoder-decoder, encoder-only, decoder-only), their attention with
positional hooks, their typed config and factory."""

from pe_research.model.config import ModelConfig
from pe_research.model.factory import abstract_model, build_model, model_config, model_line
from pe_research.model.single_stack import SingleStackTransformer
from pe_research.model.transformer import Seq2SeqTransformer, TokenModel

__all__ = ["ModelConfig", "Seq2SeqTransformer", "SingleStackTransformer", "TokenModel",
           "abstract_model", "build_model", "model_config", "model_line"]
