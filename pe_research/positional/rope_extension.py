"""Test-time context extension of a RoPE model by which keys a query sees and at what distance:
Self-Extend and attention sinks with a recent window. Both act in causal self-attention and
need no training; set them when evaluating a run, as ``model.pe.scaling``.

* ``self_extend`` (Jin et al. 2024, "LLM Maybe LongLM: Self-Extend LLM Context Window Without
  Tuning", authors' code datamllab/LongLM ``self_extend_patch/Llama.py``): keys closer than the
  neighbour window W (p_i - p_j < W) keep their positions; farther keys are seen at grouped
  positions, the query at floor(p_i / G) + W - W / G and the key at floor(p_j / G), so that
  grouped distances continue the neighbour ones and stay within what training saw. The authors'
  function defaults are G = 8, W = 1024; their README's rule picks them so that
  W + (N - W) / G stays within about half to two thirds of the trained length for test length N.
* ``attention_sinks`` (Xiao et al. 2024, "Efficient Streaming Language Models with Attention
  Sinks", ICLR, authors' code mit-han-lab/streaming-llm ``kv_cache.py``, ``start_size=4``): a
  query sees the first ``sinks`` tokens and the last ``window`` tokens (itself included), with
  positions counted inside that cache as the authors' position shift does: recent keys keep
  their distance, a sink at p_j is seen from min(p_i, sinks + window - 1). LM-Infinite's
  Lambda-mask (Han et al. 2024) is the same mask with sink distances capped at the window
  instead (at most ``sinks - 1`` positions apart).

Positions are the model's position values (from 0 at a sequence's first token). Encoder
self-attention is left as it is (both methods are defined for causal models).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

import jax
import jax.numpy as jnp

from pe_research.core.errors import ConfigError
from pe_research.positional.explicit_attention import scaled_logits

DEFAULT_SELF_EXTEND: dict[str, int] = {"group_size": 0, "neighbor_window": 0}
DEFAULT_ATTENTION_SINKS: dict[str, int] = {"sinks": 4, "window": 0}


@dataclasses.dataclass(frozen=True)
class ContextExtension:
    """Validated ``model.pe.self_extend`` and ``model.pe.attention_sinks`` (0: off)."""

    group_size: int = 0
    neighbor_window: int = 0
    sinks: int = 4
    window: int = 0

    @classmethod
    def from_pe(cls, pe: Mapping[str, Any]) -> ContextExtension:
        """The two blocks of ``pe`` with defaults filled; ``ConfigError`` for a bad value."""
        blocks = {"self_extend": DEFAULT_SELF_EXTEND, "attention_sinks": DEFAULT_ATTENTION_SINKS}
        values = {}
        for name, defaults in blocks.items():
            block = dict(pe.get(name) or {})
            for key, value in block.items():
                if key not in defaults:
                    raise ConfigError(f"model.pe.{name}.{key}", value,
                                      f"not a key of {name}; its keys are {sorted(defaults)}")
                if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                    raise ConfigError(f"model.pe.{name}.{key}", value, "an integer >= 0")
            values.update({**defaults, **block})
        result = cls(**values)
        if bool(result.group_size) != bool(result.neighbor_window):
            raise ConfigError("model.pe.self_extend", pe.get("self_extend"),
                              "set both group_size (>= 2) and neighbor_window (>= 1), or neither")
        if result.group_size == 1:
            raise ConfigError("model.pe.self_extend.group_size", 1,
                              ">= 2 (a group of one position is plain RoPE)")
        if result.self_extend and result.attention_sinks:
            raise ConfigError("model.pe.attention_sinks.window", result.window,
                              "0 while self_extend is set: use one test-time extension at a time")
        return result

    @property
    def self_extend(self) -> bool:
        return self.group_size > 0

    @property
    def attention_sinks(self) -> bool:
        return self.window > 0

    @property
    def active(self) -> bool:
        return self.self_extend or self.attention_sinks


def extended_logits(rotated: Callable[[jax.Array, jax.Array], jax.Array], q_BxTxHxD: jax.Array,
                    k_BxSxHxD: jax.Array, q_positions_BxT: jax.Array, k_positions_BxS: jax.Array,
                    mask_BxTxS: jax.Array,
                    extension: ContextExtension) -> tuple[jax.Array, jax.Array]:
    """(logits float32 ``[B, H, T, S]``, mask ``[B, T, S]``) of unrotated queries and keys under
    ``extension``; ``rotated(x, positions)`` is the model's RoPE at (float) positions."""
    q_at = jnp.asarray(q_positions_BxT, jnp.float32)
    k_at = jnp.asarray(k_positions_BxS, jnp.float32)
    near = scaled_logits(rotated(q_BxTxHxD, q_at), rotated(k_BxSxHxD, k_at))
    distance = (q_at[:, :, None] - k_at[:, None, :])[:, None]  # [B, 1, T, S]
    if extension.self_extend:
        group, window = extension.group_size, extension.neighbor_window
        q_grouped = jnp.floor(q_at / group) + window - window / group
        grouped = scaled_logits(rotated(q_BxTxHxD, q_grouped),
                                rotated(k_BxSxHxD, jnp.floor(k_at / group)))
        return jnp.where(distance < window, near, grouped), mask_BxTxS
    last = extension.sinks + extension.window - 1  # the query's slot in a full cache
    from_cache = scaled_logits(rotated(q_BxTxHxD, jnp.minimum(q_at, last)),
                               rotated(k_BxSxHxD, k_at))
    sink_BxS = k_at < extension.sinks
    recent = distance[:, 0] < extension.window
    logits = jnp.where(recent[:, None], near, from_cache)
    return logits, mask_BxTxS & (recent | sink_BxS[:, None, :])
