"""The jitted train and eval steps: pure functions of (params, optimizer state, batch, step).

The model is split once into a static graph and its parameters (``nnx.split``); every step merges
them back inside the trace. Randomness is explicit: the keys for dropout and for randomized
positions are folded from ``(seed, step)``, so a resumed run draws exactly what it would have.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
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
from pe_research.mesh import member_sharded, replicated
from pe_research.model import TokenModel, build_model
from pe_research.model.attention import set_query_block
from pe_research.positional.randomize import make_positions, split_key
from pe_research.special_tokens import EOS_ID
from pe_research.training.optimizer import gradient_norm, make_optimizer

Batch = Mapping[str, jax.Array]
EVAL_KEY_TAG = 0x0E7A1  # folded into the seed for evaluation-time random positions


def eval_position_key(seed: int) -> jax.Array:
    """The key range evaluation draws test positions from (matters only if randomized)."""
    return jax.random.split(jax.random.fold_in(jax.random.key(seed), EVAL_KEY_TAG))[0]


def batch_positions(pe: Mapping[str, Any], batch: Batch, key: jax.Array, training: bool,
                    architecture: str = "encoder_decoder") -> tuple[jax.Array, jax.Array]:
    """Source and target positions for a batch, ``[1, S]``/``[1, T]`` where rows share them;
    ``key`` is one key, or one per row ``[B]`` (``example_keys``).

    Encoder-decoder: each side from 0 (or drawn) on its own; shared by the rows unless drawn
    per example (``make_positions``). Single-stack models: one draw over the packed joint
    sequence (each row's source, then its target side: ``model/single_stack.py``), split at S:
    ``[1, S]``/``[1, T]`` when shared too. A row with n source tokens then has its target token
    j at joint position ``n + j``, i.e. in ``source_positions[n + j]`` or ``target_positions[n +
    j - S]``.
    """
    if architecture == "encoder_decoder":
        source_key, target_key = split_key(key)
        return (make_positions(pe, batch["source_mask"], source_key, training),
                make_positions(pe, batch["target_mask"], target_key, training))
    source_mask, target_mask = batch["source_mask"], batch["target_mask"]
    width, length = source_mask.shape[1], target_mask.shape[1]
    real = jnp.sum(target_mask, axis=-1) + jnp.sum(source_mask, axis=-1)
    joint_mask_BxW = jnp.arange(width + length)[None, :] < real[:, None]
    joint = make_positions(pe, joint_mask_BxW, split_key(key)[0], training)
    return joint[:, :width], joint[:, width:]


def forward(model: TokenModel, batch: Batch, key: jax.Array, training: bool) -> jax.Array:
    """Teacher-forced logits ``[B, T, V]``; dropout only in training."""
    position_key, dropout_key = jax.random.split(key)
    source_positions, target_positions = batch_positions(
        model.config.pe, batch, position_key, training, model.config.architecture)
    use_dropout = training and model.config.dropout_rate > 0
    return model(batch["source"], batch["target_input"], source_positions, target_positions,
                 batch["source_mask"], batch["target_mask"],
                 dropout_key=dropout_key if use_dropout else None)


@dataclasses.dataclass
class Steps:
    """Compiled step functions and how many times the train step has been traced.

    ``train(params, opt_state, batch, step)`` and ``evaluate(params, batch)``; for an ensemble
    (``make_ensemble_steps``) ``train`` takes member-stacked state and batches, and
    ``evaluate`` scores one member's parameters (``member_evaluate`` picks its keys).
    ``train_many(params, opt_state, batches, first_step)`` runs ``train`` over a list of K
    batches in one program (``chained``); its metrics carry a leading ``[K]`` axis.
    """

    train: Any
    evaluate: Any
    graphdef: Any
    rest: Any
    traces: dict[str, int]
    evaluate_with_key: Any = None
    train_many: Any = None

    @property
    def compilations(self) -> int:
        return self.traces["train"]

    def member_evaluate(self, seed: int) -> Steps:
        """These steps with ``evaluate`` drawing its keys from ``seed`` (one compile for all)."""
        base_key = jax.random.key(seed)
        return dataclasses.replace(
            self, evaluate=lambda params, batch: self.evaluate_with_key(params, batch, base_key))


def step_functions(graphdef: Any, rest: Any, train_cfg: Mapping[str, Any],
                   traces: dict[str, int], query_block: int = 0) -> tuple[Any, Any]:
    """The pure (unjitted) train and eval steps of one model; the eval step attends
    ``query_block`` queries at a time (``eval.query_block``; 0: all), the train step all.

    ``train_step(params, opt_state, batch, step, base_key, learning_rate=None)``: with a
    ``learning_rate`` (a traced scalar) the schedule peaks there instead of at
    ``train.learning_rate``; the optimizer state's structure does not depend on it.
    ``eval_step(params, batch, base_key)`` returns summable metric sums.
    """

    predict_eos = bool(train_cfg.get("predict_eos", True))

    def loss_fn(params, batch, key):
        logits = forward(nnx.merge(graphdef, params, rest), batch, key, training=True)
        loss = token_cross_entropy(logits, batch["target_output"],
                                   scored_mask(batch, predict_eos))
        return loss, logits

    def train_step(params, opt_state, batch, step, base_key, learning_rate=None):
        traces["train"] += 1  # runs once per trace, i.e. once per compiled batch shape
        settings = dict(train_cfg) if learning_rate is None else \
            {**dict(train_cfg), "learning_rate": learning_rate}
        key = jax.random.fold_in(base_key, step)
        (loss, logits), grads = jax.value_and_grad(loss_fn, has_aux=True)(params, batch, key)
        updates, opt_state = make_optimizer(settings).update(grads, opt_state, params)
        params = optax.apply_updates(params, updates)
        metrics = {**batch_values(_outputs(logits, batch, predict_eos), training_metrics()),
                   "loss": loss,
                   "grad_norm": gradient_norm(grads, settings)}
        return params, opt_state, metrics

    def eval_step(params, batch, base_key):
        traces["evaluate"] += 1
        key = jax.random.fold_in(base_key, EVAL_KEY_TAG)
        model = set_query_block(nnx.merge(graphdef, params, rest), query_block)
        logits = forward(model, batch, key, training=False)
        return eval_sums(logits, batch, predict_eos)

    return train_step, eval_step


@dataclasses.dataclass(frozen=True, eq=False)  # holds arrays: compared by identity
class Keyed:
    """A jitted function called with trailing arguments of its own (a run's random keys, its
    learning rates): arguments, not constants of the program, so that runs differing only in
    their seed build one program (one entry of the compilation cache, ``compile_cache``)."""

    jitted: Any
    trailing: tuple

    def __call__(self, *args: Any) -> Any:
        return self.jitted(*args, *self.trailing)

    def lower(self, *args: Any) -> Any:
        return self.jitted.lower(*args, *self.trailing)

    def __getattr__(self, name: str) -> Any:  # the rest (as_text, memory_analysis) as is
        if name.startswith("__") or name in ("jitted", "trailing"):  # copy, pickle: no loop
            raise AttributeError(name)
        return getattr(self.jitted, name)


def chained(train: Any, out_shardings: Any) -> Any:
    """``train`` applied to K batches in turn, as one jitted program.

    One execution per K steps: XLA allocates a program's temporaries once per execution, which
    on a CPU costs a fresh mapping (and page faults) of all of them for every call, and the host
    dispatches once instead of K times. The K steps are those of K ``train`` calls, bit for bit.
    """

    def train_many(params, opt_state, batches, first_step, *trailing):
        stacked = jax.tree.map(lambda *leaves: jnp.stack(leaves), *batches)

        def one_step(carry, batch):
            params, opt_state, step = carry
            params, opt_state, metrics = train(params, opt_state, batch, step, *trailing)
            return (params, opt_state, step + 1), metrics

        (params, opt_state, _), metrics = jax.lax.scan(
            one_step, (params, opt_state, jnp.asarray(first_step, jnp.int32)), stacked)
        return params, opt_state, metrics

    return jax.jit(train_many, donate_argnums=(0, 1), out_shardings=out_shardings)


def make_steps(model: TokenModel, train_cfg: Mapping[str, Any], seed: int, mesh: Mesh,
               query_block: int = 0) -> tuple[Steps, nnx.State]:
    """Jitted steps for ``model`` on ``mesh`` and its initial parameters (``step_functions``)."""
    graphdef, params, rest = nnx.split(model, nnx.Param, ...)
    traces = {"train": 0, "evaluate": 0}
    train_step, eval_step = step_functions(graphdef, rest, train_cfg, traces, query_block)
    base_key = jax.random.key(seed)
    same = replicated(mesh)
    evaluate_with_key = jax.jit(eval_step, out_shardings=same)
    train = jax.jit(train_step, donate_argnums=(0, 1), out_shardings=(same, same, same))
    steps = Steps(
        train=Keyed(train, (base_key,)), evaluate=Keyed(evaluate_with_key, (base_key,)),
        graphdef=graphdef, rest=rest, traces=traces, evaluate_with_key=evaluate_with_key,
        train_many=Keyed(chained(train_step, (same, same, same)), (base_key,)))
    return steps, params


def member_keys(seeds: Sequence[int]) -> jax.Array:
    """``[M]`` typed keys, member k's equal to ``jax.random.key(seeds[k])``."""
    return jax.random.wrap_key_data(
        jnp.stack([jax.random.key_data(jax.random.key(int(seed))) for seed in seeds]))


def make_ensemble_steps(graphdef: Any, rest: Any, train_cfg: Mapping[str, Any],
                        seeds: Sequence[int], learning_rates: Sequence[float] | None,
                        mesh: Mesh, query_block: int = 0) -> Steps:
    """Steps whose ``train`` updates M members at once: ``jax.vmap`` of the single step.

    Parameters, optimizer state and batches carry a leading member axis (sharded over the
    mesh's ``members`` axis); member k draws its keys from ``seeds[k]`` and, with
    ``learning_rates``, peaks at ``learning_rates[k]``. Metrics come back as ``[M]`` arrays.
    """
    traces = {"train": 0, "evaluate": 0}
    train_step, eval_step = step_functions(graphdef, rest, train_cfg, traces, query_block)
    keys = member_keys(seeds)
    rates = None if learning_rates is None else jnp.asarray(learning_rates, jnp.float32)
    stacked_step = jax.vmap(train_step, in_axes=(0, 0, 0, None, 0, None if rates is None else 0))
    stacked, same = member_sharded(mesh), replicated(mesh)
    evaluate_with_key = jax.jit(eval_step)
    train = jax.jit(stacked_step, donate_argnums=(0, 1), out_shardings=(stacked, stacked, same))
    return Steps(
        train=Keyed(train, (keys, rates)), evaluate=None, graphdef=graphdef, rest=rest,
        traces=traces, evaluate_with_key=evaluate_with_key,
        train_many=Keyed(chained(stacked_step, (stacked, stacked, same)), (keys, rates)))


def scored_mask(batch: Batch, predict_eos: bool = True) -> jax.Array:
    """``[B, T]`` the target tokens the loss and training metrics score: every real one, or
    (``train.predict_eos`` False, the -EOS model of Newman et al. 2020) all but the end token."""
    if predict_eos:
        return batch["target_mask"]
    return batch["target_mask"] & (batch["target_output"] != EOS_ID)


def _outputs(logits_BxTxV: jax.Array, batch: Batch, predict_eos: bool = True) -> Outputs:
    return Outputs(logits_BxTxV, batch["target_output"], scored_mask(batch, predict_eos))


def eval_sums(logits_BxTxV: jax.Array, batch: Batch,
              predict_eos: bool = True) -> dict[str, jax.Array]:
    """Sums over the batch that add up over batches: each training metric's numerator and count
    (over the tokens ``scored_mask`` keeps)."""
    sums = example_sums(_outputs(logits_BxTxV, batch, predict_eos), training_metrics())
    return {key: jnp.sum(value) for key, value in sums.items()}


def summarize(sums: Mapping[str, float]) -> dict[str, float]:
    """Every training metric (loss, token and sequence accuracy, ...) from accumulated sums."""
    return summarize_sums(sums, training_metrics())


def initial_train_state(config: ml_collections.ConfigDict, vocab_size: int, mesh: Mesh,
                        ) -> tuple[Steps, nnx.State, optax.OptState]:
    """Jitted steps plus fresh parameters and optimizer state, replicated over ``mesh``."""
    steps, params = make_steps(build_model(config, vocab_size), config.train, config.seed, mesh,
                               config.eval.query_block)
    params = jax.device_put(params, replicated(mesh))
    opt_state = jax.device_put(make_optimizer(config.train).init(params), replicated(mesh))
    return steps, params, opt_state
