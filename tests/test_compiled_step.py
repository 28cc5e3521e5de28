"""The one compiled train step: K steps per call equal K calls, the state it holds between calls
equals the pytree path, a run's seed stays an argument, and the optimizer's decay and norm."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from conftest import DEFAULT_CONFIG, ran_at_default_optimization, tiny_overrides

from pe_research import data
from pe_research.config import load_config
from pe_research.config.schema import BLOCK_DEFAULTS
from pe_research.runtime import data_mesh, replicated
from pe_research.tasks import get_task
from pe_research.training.optimizer import learning_rate_schedule, make_optimizer
from pe_research.training.step import CompiledStep, initial_train_state, step_functions


def fresh(seed: int = 0):
    """A tiny config's steps (holding a fresh state drawn from ``seed``), that state, and the
    first four batches."""
    config = load_config(DEFAULT_CONFIG, tiny_overrides(seed=seed))
    task = get_task(config.task.to_dict(), config.data.to_dict())
    mesh = data_mesh()
    steps, params, opt_state = initial_train_state(config, task.vocabulary.size, mesh)
    batches = [data.global_batch(data.train_batch(task, config.data, config.seed, i), mesh)
               for i in range(4)]
    return config, steps, params, opt_state, batches


def host(tree) -> list[np.ndarray]:
    return [np.asarray(leaf) for leaf in jax.tree.leaves(tree)]


@pytest.mark.slow
@pytest.mark.default_optimization
def test_calls_of_one_and_of_several_steps_give_the_plain_steps_bit_for_bit(request):
    """Three one-step calls and a two-step call on the held state against the unwrapped train
    step applied to pytrees, step by step: different programs, so compared at XLA's default
    settings, which users run (K steps against K calls: tests/test_steps_per_call.py)."""
    if ran_at_default_optimization(request):
        return
    config, steps, params, opt_state, batches = fresh()
    train_step, _ = step_functions(steps.graphdef, steps.rest, config.train, steps.optimizer)
    plain = jax.jit(train_step)
    expected_metrics = []
    for i, batch in enumerate(batches[:3] + batches[3:] * 2):
        params, opt_state, metrics = plain(params, opt_state, batch, i, jax.random.key(0))
        expected_metrics.append(host(metrics))
    expected = host((params, opt_state))

    _, steps, params, opt_state, batches = fresh()
    steps.train.hold(params, opt_state)
    got_metrics = []
    for i in range(3):
        got_metrics.append(host(steps.train([batches[i]], i)))
    two = steps.train(batches[3:] * 2, 3)
    got_metrics += [[np.asarray(value[k]) for value in jax.tree.leaves(two)] for k in range(2)]

    for got, want in zip(host(steps.train.state()), expected, strict=True):
        np.testing.assert_array_equal(got, want)
    for got, want in zip(sum(got_metrics, []), sum(expected_metrics, []), strict=True):
        np.testing.assert_array_equal(np.squeeze(got), want)
    assert steps.compilations == 2  # one program for K = 1, one for K = 2


def test_a_runs_seed_stays_an_argument_of_the_program():
    programs = []
    for seed in (0, 1):
        _, steps, params, opt_state, batches = fresh(seed)
        steps.train.hold(params, opt_state)
        programs.append(steps.train.lower(batches[:1]).as_text())
    assert programs[0] == programs[1]  # one compilation serves both seeds


def test_a_state_of_another_structure_is_refused():
    same = replicated(data_mesh())
    step = CompiledStep(lambda params, opt_state, batch, i: (params, opt_state, {}), (), same,
                        same)
    step.hold({"w": jnp.ones(2)}, (jnp.zeros(2),))
    with pytest.raises(ValueError, match="another structure"):
        step.hold({"w": jnp.ones(2)}, [jnp.zeros(2), jnp.zeros(2)])


PARAMS = {"attention": {"kernel": jnp.linspace(-1.0, 1.0, 12).reshape(4, 3),
                        "bias": jnp.asarray([0.5, -0.25, 1.0])},
          "scale": jnp.asarray([2.0, 3.0])}


def run_optimizer(steps: int = 4, traced: tuple[str, ...] = (), **changes: float):
    """Parameters after ``steps`` jitted updates with gradients sin(k p) * 3; the settings
    named in ``traced`` are arguments of the program, as an ensemble member's own are."""
    train = {**BLOCK_DEFAULTS["train"], "warmup_steps": 2, **changes}
    own = {key: jnp.float32(train[key]) for key in traced}

    @jax.jit
    def update(params, state, k, own):
        grads = jax.tree.map(lambda p: jnp.sin(k * p) * 3.0, params)
        updates, state = make_optimizer({**train, **own}).update(grads, state, params)
        return optax.apply_updates(params, updates), state

    params, state = PARAMS, make_optimizer(train).init(PARAMS)
    for k in range(1, steps + 1):
        params, state = update(params, state, float(k), own)
    return params


def test_weight_decay_moves_matrices_and_leaves_vectors_alone():
    """Only the decay differs between these runs (unclipped, so that no shared norm links the
    leaves), and only the matrix moves apart."""
    plain = run_optimizer(weight_decay=0.0, clip_norm=0.0)
    decayed = run_optimizer(weight_decay=0.5, clip_norm=0.0)
    np.testing.assert_array_equal(decayed["attention"]["bias"], plain["attention"]["bias"])
    np.testing.assert_array_equal(decayed["scale"], plain["scale"])
    assert not np.allclose(decayed["attention"]["kernel"], plain["attention"]["kernel"])


@pytest.mark.parametrize("clip_norm", [0.0, 0.5])
def test_a_members_traced_clipping_norm_clips_as_the_configs_and_zero_clips_nothing(clip_norm):
    """The gradients' norm is 7-9.4, so 0.5 clips every update and 0 none."""
    traced = run_optimizer(traced=("clip_norm",), clip_norm=clip_norm)
    for got, want in zip(jax.tree.leaves(traced), jax.tree.leaves(
            run_optimizer(clip_norm=clip_norm)), strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)
    assert not np.allclose(run_optimizer(clip_norm=0.5)["attention"]["kernel"],
                           run_optimizer(clip_norm=0.0)["attention"]["kernel"])


@pytest.mark.parametrize("schedule", ["constant", "cosine"])
@pytest.mark.parametrize("warmup", [0, 1, 7])
def test_the_schedule_is_optaxs_warm_up_and_decay_to_rounding_traced_or_not(schedule, warmup):
    """Against optax's own schedules (which take step counts as Python numbers), at every update
    of a 40-step run; a traced warm-up and a traced schedule (an ensemble member's: 1 cosine, 0
    constant) give the same values."""
    train = {**BLOCK_DEFAULTS["train"], "learning_rate": 3e-3, "warmup_steps": warmup,
             "steps": 40, "schedule": schedule}
    after = (optax.cosine_decay_schedule(3e-3, decay_steps=40 - warmup) if schedule == "cosine"
             else optax.constant_schedule(3e-3))
    reference = after if not warmup else optax.join_schedules(
        [optax.linear_schedule(3e-3 / warmup, 3e-3, max(warmup - 1, 1)), after], [warmup])
    counts = jnp.arange(45)
    want = jax.vmap(reference)(counts)
    got = jax.vmap(learning_rate_schedule(train))(counts)
    np.testing.assert_allclose(got, want, rtol=0, atol=3e-3 * 1e-6)
    traced = jax.jit(lambda w: jax.vmap(learning_rate_schedule({**train, "warmup_steps": w}))(
        counts))(jnp.float32(warmup))
    np.testing.assert_allclose(traced, got, rtol=0, atol=3e-3 * 1e-6)
    kind = jax.jit(lambda cosine: jax.vmap(learning_rate_schedule({**train, "schedule": cosine}))(
        counts))(jnp.float32(schedule == "cosine"))
    np.testing.assert_allclose(kind, got, rtol=0, atol=3e-3 * 1e-6)
    assert float(got[0]) == pytest.approx(3e-3 / max(warmup, 1))


def test_a_members_traced_warm_up_updates_as_the_configs():
    traced = run_optimizer(traced=("warmup_steps",), warmup_steps=3)
    for got, want in zip(jax.tree.leaves(traced), jax.tree.leaves(
            run_optimizer(warmup_steps=3)), strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)
    assert not np.allclose(traced["scale"], run_optimizer(warmup_steps=0)["scale"])


def test_the_logged_gradient_norm_is_the_norm_of_all_gradients():
    config, steps, params, opt_state, batches = fresh()
    train_step, _ = step_functions(steps.graphdef, steps.rest, config.train, steps.optimizer)

    def loss(p):
        return train_step(p, opt_state, batches[0], 0, jax.random.key(0))[2]["loss"]

    metrics = jax.jit(train_step)(params, opt_state, batches[0], 0, jax.random.key(0))[2]
    grads = jax.jit(jax.grad(loss))(params)
    expected = np.sqrt(sum(float(jnp.sum(g * g)) for g in jax.tree.leaves(grads)))
    np.testing.assert_allclose(metrics["grad_norm"], expected, rtol=1e-5)
