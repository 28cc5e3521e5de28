"""Looking inside a model: geometry of position vectors and the attention-logit decomposition.

vectors        the token and position parts of the model's input, split exactly
geometry       norms of position vectors (raw, and folded through the first LayerNorm's scale)
orthogonality  cosines between token and position vectors
shape          position-by-position cosines and a 3-component PCA
streams        the residual stream carried as content + position parts, layer by layer
decomposition  self-attention logits split into additive content/position terms
figures        every figure, drawn from exactly the data written to JSON/NPZ
embedding_file position/token embeddings read from a .safetensors or .npz file
report         everything together: figures (PNG), numbers (JSON), arrays (NPZ)
publish        the written report into the run's W&B run
run_inputs     a run's model at a checkpoint and real examples (for `pe-research analyze`)
"""

from pe_research.analysis.decomposition import attention_terms, decompose
from pe_research.analysis.geometry import norm_profile
from pe_research.analysis.orthogonality import cosine_matrix, token_position_orthogonality
from pe_research.analysis.report import (
    Report,
    analytic_report,
    embedding_report,
    model_report,
    write_report,
)
from pe_research.analysis.shape import position_cosines, principal_components
from pe_research.analysis.vectors import input_parts, position_table, token_table

__all__ = [
    "Report",
    "analytic_report",
    "attention_terms",
    "cosine_matrix",
    "decompose",
    "embedding_report",
    "input_parts",
    "model_report",
    "norm_profile",
    "position_cosines",
    "position_table",
    "principal_components",
    "token_position_orthogonality",
    "token_table",
    "write_report",
]
