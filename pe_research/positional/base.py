"""The contract every positional scheme fulfils: hook points and a config block.

A scheme is an NNX module. The model calls its hooks and knows nothing else about it:

1. ``input_vectors(positions)`` -> ``[B, T, D]`` or ``None``: combined with token embeddings.
2. ``transform_qk(q, k, q_positions, k_positions, kind)`` -> ``(q, k)``: inside attention.
3. ``logit_bias(q, k, q_positions, k_positions, kind)`` -> ``[B, H, Tq, Tk]`` or ``None``.
4. ``explicit_attention(q, k, v, bias, mask, q_positions, k_positions, kind)`` -> ``[B, Tq, H, D]``
   or ``None`` (default): only for schemes that need the mask or the attention weights; None
   keeps the fused ``jax.nn.dot_product_attention``.
5. ``extra_logits(q, k, bias, mask, q_positions, k_positions, kind)`` -> ``{name: [B, H, Tq, Tk]}``:
   the logit terms that ``explicit_attention`` adds to ``q.k / sqrt(D) + bias``, named in
   ``extra_logit_terms``. The scheme's own attention is built from them, and the attention
   decomposition (``analysis/decomposition.py``) shows them, so the two cannot disagree.

Schemes declare the attention kinds they act in (``acts_in``); the model never calls hooks 2
to 4 for a kind outside it, so every scheme can assume the kind it receives is one it handles.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import Any, ClassVar

import jax
from flax import nnx

from pe_research.core.errors import ConfigError
from pe_research.positional.explicit_attention import masked_softmax


class AttentionKind(enum.Enum):
    """Where an attention layer sits; schemes behave differently in each."""

    ENCODER_SELF = "encoder_self"  # bidirectional
    DECODER_SELF = "decoder_self"  # causal
    CROSS = "cross"  # decoder queries, encoder keys

    @property
    def bidirectional(self) -> bool:
        return self is not AttentionKind.DECODER_SELF


ENCODER_SELF, DECODER_SELF, CROSS = AttentionKind
SELF_ATTENTION = frozenset({ENCODER_SELF, DECODER_SELF})


class PositionalScheme(nnx.Module):
    """Base class: every hook defaults to 'do nothing'; subclasses override what they use."""

    name: ClassVar[str] = ""
    acts_in: ClassVar[frozenset[AttentionKind]] = frozenset()
    # True for schemes whose input_vectors returns vectors (the model then builds the combiner).
    adds_input_vectors: ClassVar[bool] = False
    # A scheme with per-layer parameters sets this False: each attention layer it acts in builds
    # its own instance.
    shared_across_layers: ClassVar[bool] = True
    # False for a scheme that ignores positions (randomizing them is then refused).
    consumes_positions: ClassVar[bool] = True
    # True when shifting every position by a constant changes no output (the contract tests
    # check it for every scheme that says so).
    relative: ClassVar[bool] = False
    # Name -> description of each logit term ``extra_logits`` returns (none by default).
    extra_logit_terms: ClassVar[dict[str, str]] = {}
    # True when ``explicit_attention`` adds to the output a term beyond softmax(logits) . v.
    adds_value_term: ClassVar[bool] = False
    # True when ``transform_qk`` only appends per-key values the scheme's own hooks read, so
    # that the decoding cache holds them, and leaves q . k as it is (FoX's log forget gates).
    transform_carries_key_state: ClassVar[bool] = False
    # True when ``explicit_attention`` is softmax(q . k / sqrt(D) + bias) . v over the queries and
    # keys it is given (RoPE's test-time extensions), so that a logit scaling reaches every term.
    own_attention_is_q_dot_k: ClassVar[bool] = False
    # The kind of task-supplied position IDs (``Task.position_kinds``) the scheme reads as its
    # positions instead of 0, 1, 2, ... (position coupling's ``coupled``), or None.
    task_positions: ClassVar[str | None] = None

    def __init__(self, pe: Mapping[str, Any], *, d_model: int, num_heads: int, rngs: nnx.Rngs):
        self.d_model = d_model
        self.num_heads = num_heads
        self.head_dim = d_model // num_heads

    @classmethod
    def default_config(cls) -> dict[str, Any]:
        """The scheme's own ``model.pe`` keys and defaults (not type, combine, randomize)."""
        return {}

    @classmethod
    def check_config(cls, pe: Mapping[str, Any], *, d_model: int, num_heads: int) -> None:
        """Raise ``ConfigError`` for values this scheme cannot work with."""

    @classmethod
    def check_positions(cls, pe: Mapping[str, Any], max_position: int) -> None:
        """Raise ``ConfigError`` if positions up to ``max_position`` (exclusive) are unsupported."""

    def input_vectors(self, positions_BxT: jax.Array) -> jax.Array | None:
        """Per-position vectors ``[B, T, D]`` combined with the token embeddings, or None."""
        return None

    def transform_qk(
        self,
        q_BxTxHxD: jax.Array,
        k_BxSxHxD: jax.Array,
        q_positions_BxT: jax.Array,
        k_positions_BxS: jax.Array,
        kind: AttentionKind,
    ) -> tuple[jax.Array, jax.Array]:
        """Position-dependent transform of queries and keys (identity by default). A key's
        transform may read that key and its position only: the decoding cache stores keys
        transformed once, as they arrive."""
        return q_BxTxHxD, k_BxSxHxD

    def logit_bias(
        self,
        q_BxTxHxD: jax.Array,
        k_BxSxHxD: jax.Array,
        q_positions_BxT: jax.Array,
        k_positions_BxS: jax.Array,
        kind: AttentionKind,
    ) -> jax.Array | None:
        """Additive attention-logit bias ``[B, H, T, S]`` (float32), or None."""
        return None

    def explicit_attention(
        self,
        q_BxTxHxD: jax.Array,
        k_BxSxHxD: jax.Array,
        v_BxSxHxD: jax.Array,
        bias_BxHxTxS: jax.Array | None,
        mask_BxTxS: jax.Array,
        q_positions_BxT: jax.Array,
        k_positions_BxS: jax.Array,
        kind: AttentionKind,
    ) -> jax.Array | None:
        """The attention output ``[B, T, H, D]`` computed by the scheme, or None (fused path)."""
        return None

    def attention_weights(self, logits_BxHxTxS: jax.Array, mask_BxTxS: jax.Array,
                          kind: AttentionKind) -> jax.Array:
        """The weights ``[B, H, T, S]`` its attention puts on each key, from the full logits:
        the masked softmax (stick-breaking has its own rule); for the attention decomposition."""
        return masked_softmax(logits_BxHxTxS, mask_BxTxS)

    @property
    def uses_fused_attention(self) -> bool:
        """Whether attention where the scheme acts runs on ``jax.nn.dot_product_attention`` with
        the model's implementation (cuDNN when requested), not on ``explicit_attention``."""
        return type(self).explicit_attention is PositionalScheme.explicit_attention

    def extra_logits(
        self,
        q_BxTxHxD: jax.Array,
        k_BxSxHxD: jax.Array,
        bias_BxHxTxS: jax.Array | None,
        mask_BxTxS: jax.Array,
        q_positions_BxT: jax.Array,
        k_positions_BxS: jax.Array,
        kind: AttentionKind,
    ) -> dict[str, jax.Array]:
        """Logit terms ``{name: [B, H, T, S]}`` (float32, in softmax units) that the scheme's
        attention adds to ``q.k / sqrt(D) + bias``; empty by default."""
        return {}


def require(condition: bool, key: str, value: object, valid: str) -> None:
    """Raise ``ConfigError(key, value, valid)`` unless ``condition`` holds."""
    if not condition:
        raise ConfigError(key, value, valid)
