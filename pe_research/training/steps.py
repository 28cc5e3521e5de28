"""The jitted train and eval steps: pure functions of (params, optimizer state, batch, step).

The model is split once into a static graph and its parameters (``nnx.split``); every step merges
them back inside the trace. Randomness is explicit: the keys for dropout and for randomized
positions are folded from ``(seed, step)``, so a resumed run draws exactly what it would have.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import jax
import jax.numpy as jnp
import ml_collections
import optax
from flax import nnx
from jax.sharding import Mesh

from pe_research.evaluation.metrics import (
    Outputs,
    batch_values,
    example_sums,
    token_cross_entropy,
    training_metrics,
)
from pe_research.evaluation.metrics import summarize as summarize_sums
from pe_research.mesh import replicated
from pe_research.model import Seq2SeqTransformer, build_model
from pe_research.positional.randomize import make_positions
from pe_research.training.optimizer import make_optimizer

Batch = Mapping[str, jax.Array]
EVAL_KEY_TAG = 0x0E7A1  # folded into the seed for evaluation-time random positions


def batch_positions(pe: Mapping[str, Any], batch: Batch, key: jax.Array,
                    training: bool) -> tuple[jax.Array, jax.Array]:
    """Source ``[B, S]`` and target ``[B, T]`` positions for a batch."""
    source_key, target_key = jax.random.split(key)
    return (make_positions(pe, batch["source_mask"], source_key, training),
            make_positions(pe, batch["target_mask"], target_key, training))


def forward(model: Seq2SeqTransformer, batch: Batch, key: jax.Array, training: bool) -> jax.Array:
    """Teacher-forced logits ``[B, T, V]``; dropout only in training."""
    position_key, dropout_key = jax.random.split(key)
    source_positions, target_positions = batch_positions(
        model.config.pe, batch, position_key, training)
    use_dropout = training and model.config.dropout_rate > 0
    return model(batch["source"], batch["target_input"], source_positions, target_positions,
                 batch["source_mask"], batch["target_mask"],
                 dropout_key=dropout_key if use_dropout else None)


@dataclasses.dataclass
class Steps:
    """Compiled step functions and how many times the train step has been traced."""

    train: Any
    evaluate: Any
    graphdef: Any
    rest: Any
    traces: dict[str, int]

    @property
    def compilations(self) -> int:
        return self.traces["train"]


def make_steps(model: Seq2SeqTransformer, optimizer: optax.GradientTransformation, seed: int,
               mesh: Mesh) -> tuple[Steps, nnx.State]:
    """Jitted steps for ``model`` on ``mesh`` and its initial parameters."""
    graphdef, params, rest = nnx.split(model, nnx.Param, ...)
    traces = {"train": 0, "evaluate": 0}
    base_key = jax.random.key(seed)

    def loss_fn(params, batch, key):
        logits = forward(nnx.merge(graphdef, params, rest), batch, key, training=True)
        loss = token_cross_entropy(logits, batch["target_output"], batch["target_mask"])
        return loss, logits

    def train_step(params, opt_state, batch, step):
        traces["train"] += 1  # runs once per trace, i.e. once per compiled batch shape
        key = jax.random.fold_in(base_key, step)
        (loss, logits), grads = jax.value_and_grad(loss_fn, has_aux=True)(params, batch, key)
        updates, opt_state = optimizer.update(grads, opt_state, params)
        params = optax.apply_updates(params, updates)
        metrics = {**batch_values(_outputs(logits, batch), training_metrics()), "loss": loss,
                   "grad_norm": optax.global_norm(grads)}
        return params, opt_state, metrics

    def eval_step(params, batch):
        traces["evaluate"] += 1
        key = jax.random.fold_in(base_key, EVAL_KEY_TAG)
        logits = forward(nnx.merge(graphdef, params, rest), batch, key, training=False)
        return eval_sums(logits, batch)

    same = replicated(mesh)
    steps = Steps(
        train=jax.jit(train_step, donate_argnames=("params", "opt_state"),
                      out_shardings=(same, same, same)),
        evaluate=jax.jit(eval_step, out_shardings=same),
        graphdef=graphdef, rest=rest, traces=traces)
    return steps, params


def _outputs(logits_BxTxV: jax.Array, batch: Batch) -> Outputs:
    return Outputs(logits_BxTxV, batch["target_output"], batch["target_mask"])


def eval_sums(logits_BxTxV: jax.Array, batch: Batch) -> dict[str, jax.Array]:
    """Sums over the batch that add up over batches: each training metric's numerator and count."""
    sums = example_sums(_outputs(logits_BxTxV, batch), training_metrics())
    return {key: jnp.sum(value) for key, value in sums.items()}


def summarize(sums: Mapping[str, float]) -> dict[str, float]:
    """Every training metric (loss, token and sequence accuracy, ...) from accumulated sums."""
    return summarize_sums(sums, training_metrics())


def initial_train_state(config: ml_collections.ConfigDict, vocab_size: int, mesh: Mesh,
                        ) -> tuple[Steps, nnx.State, optax.OptState]:
    """Jitted steps plus fresh parameters and optimizer state, replicated over ``mesh``."""
    optimizer = make_optimizer(config.train)
    steps, params = make_steps(build_model(config, vocab_size), optimizer, config.seed, mesh)
    params = jax.device_put(params, replicated(mesh))
    opt_state = jax.device_put(optimizer.init(params), replicated(mesh))
    return steps, params, opt_state
