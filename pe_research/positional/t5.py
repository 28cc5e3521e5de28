"""T5 relative bias (Raffel et al. 2020): a learned scalar per head per log-spaced distance bucket.

relative_position = key_position - query_position. Half the buckets are exact distances, the
rest grow logarithmically up to ``max_distance``; beyond it everything shares the last bucket.
Bidirectional in the encoder (separate buckets for each sign), unidirectional in the decoder
(keys after the query share bucket 0). One table per stack, shared by its layers, as in T5.
Acts in: encoder self and decoder self attention.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from pe_research.positional.base import (
    ENCODER_SELF,
    SELF_ATTENTION,
    PositionalScheme,
    require,
)


def t5_relative_bucket(
    relative_position: jax.Array,
    bidirectional: bool,
    num_buckets: int = 32,
    max_distance: int = 128,
) -> jax.Array:
    """Bucket index (int32, same shape) of ``relative_position = key - query``."""
    distance = -jnp.asarray(relative_position, jnp.int32)  # > 0 when the key is in the past
    bucket = jnp.zeros_like(distance)
    if bidirectional:
        num_buckets //= 2
        bucket += (distance < 0).astype(jnp.int32) * num_buckets
        distance = jnp.abs(distance)
    else:
        distance = jnp.maximum(distance, 0)
    max_exact = num_buckets // 2
    log_ratio = jnp.log(distance.astype(jnp.float32) / max_exact + np.finfo(np.float32).eps)
    log_bucket = max_exact + (
        log_ratio / np.log(max_distance / max_exact) * (num_buckets - max_exact)
    ).astype(jnp.int32)
    log_bucket = jnp.minimum(log_bucket, num_buckets - 1)
    return bucket + jnp.where(distance < max_exact, distance, log_bucket)


class T5Bias(PositionalScheme):
    """Learned ``[num_buckets, H]`` bias tables, one for the encoder and one for the decoder."""

    name = "t5"
    acts_in = SELF_ATTENTION
    relative = True

    def __init__(self, pe: Mapping[str, Any], *, d_model: int, num_heads: int, rngs: nnx.Rngs):
        super().__init__(pe, d_model=d_model, num_heads=num_heads, rngs=rngs)
        self.num_buckets = int(pe["num_buckets"])
        self.max_distance = int(pe["max_distance"])
        init = nnx.initializers.normal(stddev=float(pe["init_std"]))
        shape = (self.num_buckets, num_heads)
        self.encoder_table = nnx.Param(init(rngs.params(), shape, jnp.float32))
        self.decoder_table = nnx.Param(init(rngs.params(), shape, jnp.float32))

    @classmethod
    def default_config(cls) -> dict[str, Any]:
        return {"num_buckets": 32, "max_distance": 128, "init_std": 0.1}

    @classmethod
    def check_config(cls, pe: Mapping[str, Any], *, d_model: int, num_heads: int) -> None:
        buckets, distance = pe["num_buckets"], pe["max_distance"]
        require(buckets >= 4 and buckets % 2 == 0, "model.pe.num_buckets", buckets, "even, >= 4")
        require(distance > buckets // 2, "model.pe.max_distance", distance,
                f"> num_buckets / 2 = {buckets // 2}")

    def logit_bias(self, q_BxTxHxD, k_BxSxHxD, q_positions_BxT, k_positions_BxS, kind):
        return self.bias_at(self.max_distance, q_positions_BxT, k_positions_BxS, kind)

    def bias_at(self, max_distance: int, q_positions_BxT: jax.Array, k_positions_BxS: jax.Array,
                kind) -> jax.Array:
        """The bias ``[B, H, T, S]`` with distances bucketed up to ``max_distance``."""
        relative_BxTxS = k_positions_BxS[:, None, :] - q_positions_BxT[:, :, None]
        bidirectional = kind is ENCODER_SELF
        table = self.encoder_table if bidirectional else self.decoder_table
        buckets = t5_relative_bucket(relative_BxTxS, bidirectional, self.num_buckets,
                                     max_distance)
        return jnp.moveaxis(jnp.take(table[...], buckets, axis=0), -1, 1)
