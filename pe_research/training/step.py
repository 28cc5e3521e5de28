"""The one compiled train step (``CompiledStep``) and the eval step, for a run or an ensemble.

A train step is a pure function of (parameters, optimizer state, batch, step, key): the model is
split once into a static graph and its parameters (``nnx.split``) and merged back inside the
trace. Randomness is explicit: the keys for dropout and randomized positions are folded from
``(seed, step)``, so a resumed run draws exactly what it would have.

``CompiledStep`` owns everything around that function:

* the jit: one program per batch shape, K steps per call (``train.steps_per_call``) as a
  ``lax.scan`` over K stacked batches (one step without the loop), bit for bit the K steps of
  K calls;
* the keys (and an ensemble's learning rates, warm-ups, schedules, weight decays, clipping norms,
  dropout rates, wavelength bases, scalings and randomized ranges) passed as arguments, not baked in
  as constants, so runs that differ only in their seed build one program (one compilation-cache
  entry);
* the state between calls, held as the flat list of its leaves: a call does no Python work per
  NNX variable, and the state's buffers are donated to the next call.

An ensemble is the same step under ``jax.vmap`` over a leading member axis.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import ml_collections
import optax
from flax import nnx
from jax.sharding import Mesh, NamedSharding

from pe_research.model import TokenModel, build_model
from pe_research.model.attention import set_query_block
from pe_research.model.inputs import EVAL_KEY_TAG, forward, scored_mask
from pe_research.model.metrics import (
    Outputs,
    batch_values,
    example_sums,
    token_cross_entropy,
    training_metrics,
)
from pe_research.model.metrics import summarize as summarize_sums
from pe_research.model.padded_vocab import mask_logits
from pe_research.runtime import member_sharded, replicated
from pe_research.training.optimizer import make_optimizer

Batch = Mapping[str, jax.Array]
Metrics = dict[str, jax.Array]


def step_functions(graphdef: Any, rest: Any, train_cfg: Mapping[str, Any],
                   optimizer: optax.GradientTransformation, query_block: int = 0,
                   ranges: Sequence[int] = (),
                   ) -> tuple[Callable[..., Any], Callable[..., Any]]:
    """The pure (unjitted) train and eval steps of one model; the eval step attends
    ``query_block`` queries at a time (``eval.query_block``; 0: all), the train step all.

    ``train_step(params, opt_state, batch, step, base_key, optimizer_settings=None, vocab_size=None,
    position_range=None, model_settings=None, member_predicts_eos=None)``: ``optimizer_settings``
    (traced scalars: an ensemble member's own ``learning_rate``, ``warmup_steps``, ``schedule``,
    ``weight_decay``, ``clip_norm``: ``optimizer.OPTIMIZER_SETTINGS``) replace the ``train``
    block's; the optimizer state's structure does not depend on them. With a ``vocab_size`` (a
    member's own, below the model's) the loss and metrics are over those tokens only
    (``model/padded_vocab.py``); with ``position_range`` (traced: a member's randomized range, one
    of the program's ``ranges``; 0 for plain) a member trains on the positions of its range
    (``inputs.member_positions``); ``model_settings`` (traced scalars keyed by
    ``member_settings.MODEL_SETTINGS``: dropout rate, wavelength base, scalings) replace the
    model's;
    ``member_predicts_eos`` (a traced bool) replaces ``train.predict_eos`` in the loss and metrics.
    ``eval_step(params, batch, base_key, model_settings=None)`` returns summable metric sums.
    """
    predict_eos = bool(train_cfg.get("predict_eos", True))

    def loss_fn(params, batch, key, vocab_size, position_range, model_settings, scored):
        logits = forward(nnx.merge(graphdef, params, rest), batch, key, training=True,
                         ranges=ranges, own_range=position_range, settings=model_settings)
        logits = mask_logits(logits, vocab_size)
        return token_cross_entropy(logits, batch["target_output"], scored), logits

    def train_step(params, opt_state, batch, step, base_key, optimizer_settings=None,
                   vocab_size=None, position_range=None, model_settings=None,
                   member_predicts_eos=None):
        member_optimizer = optimizer if optimizer_settings is None else \
            make_optimizer({**dict(train_cfg), **optimizer_settings})
        key = jax.random.fold_in(base_key, step)
        scored = scored_mask(batch, predict_eos if member_predicts_eos is None
                             else member_predicts_eos)
        (loss, logits), grads = jax.value_and_grad(loss_fn, has_aux=True)(
            params, batch, key, vocab_size, position_range, model_settings, scored)
        updates, opt_state = member_optimizer.update(grads, opt_state, params)
        params = optax.apply_updates(params, updates)
        outputs = Outputs(logits, batch["target_output"], scored)
        metrics = {**batch_values(outputs, training_metrics()), "loss": loss,
                   "grad_norm": optax.global_norm(grads)}
        return params, opt_state, metrics

    def eval_step(params, batch, base_key, model_settings=None):
        key = jax.random.fold_in(base_key, EVAL_KEY_TAG)
        model = set_query_block(nnx.merge(graphdef, params, rest), query_block)
        return eval_sums(forward(model, batch, key, training=False, settings=model_settings),
                         batch, predict_eos)

    return train_step, eval_step


class CompiledStep:
    """``step(batches, first_step)`` runs ``train_step`` on each of ``batches`` in turn (steps
    ``first_step``, ``first_step + 1``, ...) as one jitted program, on the state it holds
    (``hold`` / ``state``); returns the metrics with a leading ``[K]`` axis.

    ``train_step(params, opt_state, batch, step, *trailing)``; ``trailing`` (keys, members'
    own settings) are passed to every call as arguments. ``state_sharding`` places the state,
    ``metrics_sharding`` the metrics.
    """

    def __init__(self, train_step: Callable[..., Any], trailing: Sequence[Any],
                 state_sharding: NamedSharding, metrics_sharding: NamedSharding):
        self.trailing = tuple(trailing)
        self.compilations = 0  # traces, i.e. programs built: one per batch shape and K
        self.leaves: list[jax.Array] = []
        self.treedef: Any = None

        def run(leaves, batches, first_step, *trailing):
            self.compilations += 1  # runs once per trace
            params, opt_state = jax.tree.unflatten(self.treedef, leaves)
            if len(batches) == 1:  # no loop around one step: XLA-CPU runs a scan's body slower
                params, opt_state, metrics = train_step(params, opt_state, batches[0],
                                                        first_step, *trailing)
                return (jax.tree.leaves((params, opt_state)),
                        jax.tree.map(lambda value: value[None], metrics))
            stacked = jax.tree.map(lambda *arrays: jnp.stack(arrays), *batches)

            def one_step(carry, batch):
                params, opt_state, step = carry
                params, opt_state, metrics = train_step(params, opt_state, batch, step,
                                                        *trailing)
                return (params, opt_state, step + 1), metrics

            (params, opt_state, _), metrics = jax.lax.scan(
                one_step, (params, opt_state, jnp.asarray(first_step, jnp.int32)), stacked)
            return jax.tree.leaves((params, opt_state)), metrics

        run.__name__ = run.__qualname__ = "train_step"  # the name its cache entries carry
        self.program = jax.jit(run, donate_argnums=(0,),
                               out_shardings=(state_sharding, metrics_sharding))

    def hold(self, params: Any, opt_state: Any) -> None:
        """Take ``(params, opt_state)`` as the state the next call starts from."""
        self.leaves, treedef = jax.tree.flatten((params, opt_state))
        if self.treedef is not None and treedef != self.treedef:
            raise ValueError("a state of another structure than this step was built for")
        self.treedef = treedef

    def state(self) -> tuple[Any, Any]:
        """The current ``(params, opt_state)``, as pytrees."""
        return jax.tree.unflatten(self.treedef, self.leaves)

    def __call__(self, batches: Sequence[Batch], first_step: int) -> Metrics:
        self.leaves, metrics = self.program(self.leaves, list(batches), first_step,
                                            *self.trailing)
        return metrics

    def lower(self, batches: Sequence[Batch], first_step: int = 0) -> Any:
        """The lowered program of a call on ``batches`` (for cost analysis and HLO)."""
        return self.program.lower(self.leaves, list(batches), first_step, *self.trailing)


@dataclasses.dataclass
class Steps:
    """A run's compiled train step, its eval step and what built them.

    ``evaluate_with_key(params, batch, base_key, model_settings=None)`` scores one model's
    parameters (an ensemble member's too, with its own model settings); ``evaluator(seed)``
    binds a seed's key to it.
    """

    train: CompiledStep
    evaluate_with_key: Any
    graphdef: Any
    rest: Any
    optimizer: optax.GradientTransformation

    @property
    def compilations(self) -> int:
        return self.train.compilations

    def evaluator(self, seed: int) -> Callable[[Any, Batch], dict[str, jax.Array]]:
        """``evaluate(params, batch)`` drawing its keys from ``seed`` (one program for all)."""
        base_key = jax.random.key(seed)
        return lambda params, batch: self.evaluate_with_key(params, batch, base_key)


def as_arrays(settings: Mapping[str, Sequence[float]] | None) -> dict[str, jax.Array] | None:
    """``{name: [M] float32}`` of members' own settings (None when there are none)."""
    return {name: jnp.asarray(values, jnp.float32)
            for name, values in (settings or {}).items()} or None


def member_keys(seeds: Sequence[int]) -> jax.Array:
    """``[M]`` typed keys, member k's equal to ``jax.random.key(seeds[k])``."""
    return jax.random.wrap_key_data(
        jnp.stack([jax.random.key_data(jax.random.key(int(seed))) for seed in seeds]))


def make_steps(graphdef: Any, rest: Any, train_cfg: Mapping[str, Any], mesh: Mesh,
               seeds: Sequence[int],
               optimizer_settings: Mapping[str, Sequence[float]] | None = None,
               query_block: int = 0, ensemble: bool = False,
               vocab_sizes: Sequence[int] | None = None,
               position_ranges: Sequence[int] | None = None,
               model_settings: Mapping[str, Sequence[float]] | None = None,
               predict_eos: Sequence[bool] | None = None) -> Steps:
    """The steps of one run (``seeds`` of one, state replicated on ``mesh``) or, with ``ensemble``,
    of M members at once: ``jax.vmap`` of the single step over a leading member axis of state and
    batches (sharded over the mesh's ``members`` axis); member k draws its keys from ``seeds[k]``,
    with ``optimizer_settings`` (``{'learning_rate': [M], ...}``, keys of
    ``optimizer.OPTIMIZER_SETTINGS``) updates with its own ``optimizer_settings[key][k]``, with
    ``vocab_sizes`` scores its own ``vocab_sizes[k]`` tokens of the model's, with
    ``position_ranges`` trains on positions randomized in ``[0, position_ranges[k])`` (plain ones
    where it is 0), and with ``model_settings`` (``{'dropout_rate': [M], ...}``, keys of
    ``member_settings.MODEL_SETTINGS``) runs its model at its own ``model_settings[key][k]``, and
    with ``predict_eos`` scores the end token in its loss where ``predict_eos[k]``."""
    optimizer = make_optimizer(train_cfg)
    train_step, eval_step = step_functions(graphdef, rest, train_cfg, optimizer, query_block,
                                           sorted(set(position_ranges or ())))
    same = replicated(mesh)
    if ensemble:
        vocabs = None if vocab_sizes is None else jnp.asarray(vocab_sizes, jnp.int32)
        ranges = None if position_ranges is None else jnp.asarray(position_ranges, jnp.int32)
        eos = None if predict_eos is None else jnp.asarray(predict_eos, bool)
        own = (as_arrays(optimizer_settings), vocabs, ranges, as_arrays(model_settings), eos)
        stacked_step = jax.vmap(train_step, in_axes=(
            0, 0, 0, None, 0, *[None if value is None else 0 for value in own]))
        train = CompiledStep(stacked_step, (member_keys(seeds), *own), member_sharded(mesh),
                             same)
    else:
        train = CompiledStep(train_step, (jax.random.key(int(seeds[0])),), same, same)
    # An ensemble's members are evaluated one at a time, on a mesh of their own.
    evaluate_with_key = jax.jit(eval_step, out_shardings=None if ensemble else same)
    return Steps(train=train, evaluate_with_key=evaluate_with_key,
                 graphdef=graphdef, rest=rest, optimizer=optimizer)


def eval_function(graphdef: Any, rest: Any, train_cfg: Mapping[str, Any],
                  query_block: int = 0) -> Callable[..., dict[str, jax.Array]]:
    """The jitted ``evaluate_with_key(params, batch, base_key)`` of one model: an ensemble
    member's whose vocabulary is narrower than the program's."""
    _, eval_step = step_functions(graphdef, rest, train_cfg, optax.identity(), query_block)
    return jax.jit(eval_step)


def eval_sums(logits_BxTxV: jax.Array, batch: Batch,
              predict_eos: bool = True) -> dict[str, jax.Array]:
    """Sums over the batch that add up over batches: each training metric's numerator and count
    (over the tokens ``scored_mask`` keeps)."""
    outputs = Outputs(logits_BxTxV, batch["target_output"], scored_mask(batch, predict_eos))
    sums = example_sums(outputs, training_metrics())
    return {key: jnp.sum(value) for key, value in sums.items()}


def summarize(sums: Mapping[str, float]) -> dict[str, float]:
    """Every training metric (loss, token and sequence accuracy, ...) from accumulated sums."""
    return summarize_sums(sums, training_metrics())


def initial_train_state(config: ml_collections.ConfigDict, vocab_size: int, mesh: Mesh,
                        ) -> tuple[Steps, nnx.State, optax.OptState]:
    """A run's steps plus fresh parameters and optimizer state, replicated over ``mesh``."""
    model: TokenModel = build_model(config, vocab_size)
    graphdef, params, rest = nnx.split(model, nnx.Param, ...)
    steps = make_steps(graphdef, rest, config.train, mesh, [config.seed],
                       query_block=config.eval.query_block)
    params = jax.device_put(params, replicated(mesh))
    opt_state = jax.device_put(steps.optimizer.init(params), replicated(mesh))
    return steps, params, opt_state
