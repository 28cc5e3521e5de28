"""Learned absolute position embeddings: a trainable table ``[max_len, d_model]``.

Acts in: the input only. Positions at or beyond ``max_len`` have no row; they are refused at
config validation and at trace time rather than silently clipped.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import jax
import jax.numpy as jnp
from flax import nnx

from pe_research.core.errors import ConfigError
from pe_research.positional.base import PositionalScheme, require


class Learned(PositionalScheme):
    """One embedding row per absolute position, initialised N(0, init_std^2)."""

    name = "learned"
    adds_input_vectors = True

    def __init__(self, pe: Mapping[str, Any], *, d_model: int, num_heads: int, rngs: nnx.Rngs):
        super().__init__(pe, d_model=d_model, num_heads=num_heads, rngs=rngs)
        self.max_len = int(pe["max_len"])
        init = nnx.initializers.normal(stddev=float(pe["init_std"]))
        self.table = nnx.Param(init(rngs.params(), (self.max_len, d_model), jnp.float32))

    @classmethod
    def default_config(cls) -> dict[str, Any]:
        return {"max_len": 512, "init_std": 0.02}

    @classmethod
    def check_config(cls, pe: Mapping[str, Any], *, d_model: int, num_heads: int) -> None:
        require(pe["max_len"] >= 1, "model.pe.max_len", pe["max_len"], "a table size >= 1")

    @classmethod
    def check_positions(cls, pe: Mapping[str, Any], max_position: int) -> None:
        if max_position > pe["max_len"]:
            raise ConfigError(
                "model.pe.max_len",
                pe["max_len"],
                f"the learned table has {pe['max_len']} rows but positions up to "
                f"{max_position - 1} are requested; set model.pe.max_len >= {max_position}",
            )

    def input_vectors(self, positions_BxT: jax.Array) -> jax.Array:
        self.check_positions({"max_len": self.max_len}, positions_BxT.shape[-1])
        return jnp.take(self.table[...], positions_BxT, axis=0)
