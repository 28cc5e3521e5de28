"""The model and optimizer a config describes, as functional NNX state for ``jax.jit``."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import jax
import jax.numpy as jnp
import ml_collections
import optax
from flax import nnx
from jax.sharding import Mesh

from pe_research.mesh import replicated
from pe_research.model import ModelConfig, Seq2SeqTransformer
from pe_research.steps import Steps, make_steps


def model_config(config: ml_collections.ConfigDict, vocab_size: int) -> ModelConfig:
    """The typed model config; the vocabulary size comes from the task."""
    return ModelConfig.from_mapping({**config.model.to_dict(), "vocab_size": vocab_size})


def build_model(config: ml_collections.ConfigDict, vocab_size: int) -> Seq2SeqTransformer:
    """A freshly initialised model (parameters from ``config.seed``)."""
    return Seq2SeqTransformer(model_config(config, vocab_size), rngs=nnx.Rngs(config.seed))


def abstract_model(config: ml_collections.ConfigDict, vocab_size: int) -> Seq2SeqTransformer:
    """The model's structure with shape/dtype placeholders instead of arrays (no compute)."""
    return nnx.eval_shape(lambda: build_model(config, vocab_size))


def learning_rate_schedule(train: Mapping[str, Any]) -> optax.Schedule:
    """Linear warm-up to ``learning_rate``, then constant or cosine decay to 0 at ``steps``."""
    peak, warmup, total = train["learning_rate"], train["warmup_steps"], train["steps"]
    cosine = train["schedule"] == "cosine"

    def schedule(count: jax.Array) -> jax.Array:
        count = jnp.asarray(count, jnp.float32)
        factor = jnp.minimum(1.0, (count + 1.0) / warmup) if warmup else jnp.float32(1.0)
        if cosine:
            progress = jnp.clip((count - warmup) / max(total - warmup, 1), 0.0, 1.0)
            factor = factor * 0.5 * (1.0 + jnp.cos(math.pi * progress))
        return peak * factor

    return schedule


def make_optimizer(train: Mapping[str, Any]) -> optax.GradientTransformation:
    """Global-norm clipping (if ``clip_norm`` > 0) then AdamW; no decay on biases and norms."""
    adamw = optax.adamw(learning_rate_schedule(train), weight_decay=train["weight_decay"],
                        mask=lambda params: jax.tree.map(lambda p: p.ndim > 1, params))
    if train["clip_norm"] > 0:
        return optax.chain(optax.clip_by_global_norm(train["clip_norm"]), adamw)
    return adamw


def initial_train_state(config: ml_collections.ConfigDict, vocab_size: int, mesh: Mesh,
                        ) -> tuple[Steps, nnx.State, optax.OptState]:
    """Jitted steps plus fresh parameters and optimizer state, replicated over ``mesh``."""
    optimizer = make_optimizer(config.train)
    steps, params = make_steps(build_model(config, vocab_size), optimizer, config.seed, mesh)
    params = jax.device_put(params, replicated(mesh))
    opt_state = jax.device_put(optimizer.init(params), replicated(mesh))
    return steps, params, opt_state
