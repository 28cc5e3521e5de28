"""Position coupling (Cho et al. 2024): a learned absolute table read at the task's coupled IDs.

Source: HanseulJo/position-coupling, ``src/data/addition.py``
(``AdditionDatasetWithCoupledPositions``: digits of equal significance share an ID; in training
the IDs start at s uniform in [1, max_position - W - 1], W the wider operand's width, so the
largest ID s + W + 1 stays in the table; at test at 1) and
``configs/task/addition_coupled.yaml`` (``max_position: 132``). The task supplies the IDs with
start 1 (``tasks/digit_positions.py``); ``model.inputs.batch_positions`` adds the random start.
The table is the GPT-2 position table the authors' decoder reads (rows N(0, 0.02^2)), one row per
ID 0..max_position (0: BOS-less padding, never a real token's).

Acts in: the input only.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import jax
import jax.numpy as jnp
from flax import nnx

from pe_research.core.errors import ConfigError
from pe_research.positional.base import PositionalScheme, require


class PositionCoupling(PositionalScheme):
    """One embedding row per coupled position ID, initialised N(0, init_std^2)."""

    name = "position_coupling"
    adds_input_vectors = True
    task_positions = "coupled"

    def __init__(self, pe: Mapping[str, Any], *, d_model: int, num_heads: int, rngs: nnx.Rngs):
        super().__init__(pe, d_model=d_model, num_heads=num_heads, rngs=rngs)
        init = nnx.initializers.normal(stddev=float(pe["init_std"]))
        self.table = nnx.Param(init(rngs.params(), (int(pe["max_position"]) + 1, d_model),
                                    jnp.float32))

    @classmethod
    def default_config(cls) -> dict[str, Any]:
        return {"max_position": 132, "init_std": 0.02}

    @classmethod
    def check_config(cls, pe: Mapping[str, Any], *, d_model: int, num_heads: int) -> None:
        require(pe["max_position"] >= 2, "model.pe.max_position", pe["max_position"],
                "the largest position ID, >= 2")
        if int((pe.get("randomize") or {}).get("max_position", 0)):
            raise ConfigError("model.pe.randomize.max_position", pe["randomize"]["max_position"],
                              "position coupling draws its own random start; set it to 0")

    @classmethod
    def check_ids(cls, pe: Mapping[str, Any], largest_id: int, where: str) -> None:
        """ConfigError if the task's coupled IDs (started at 1) reach past the table."""
        if largest_id > pe["max_position"]:
            raise ConfigError("model.pe.max_position", pe["max_position"],
                              f"{where} has coupled IDs up to {largest_id}; set "
                              f"model.pe.max_position >= {largest_id}")

    def input_vectors(self, positions_BxT: jax.Array) -> jax.Array:
        return jnp.take(self.table[...], positions_BxT, axis=0)
