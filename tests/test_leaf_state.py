"""The train step on the leaves of its state computes what it computes on the state itself."""

from __future__ import annotations

import jax
import numpy as np
import pytest
from conftest import DEFAULT_CONFIG, ran_at_default_optimization, tiny_overrides

from pe_research import data
from pe_research.config import load_config
from pe_research.mesh import data_mesh
from pe_research.tasks import get_task
from pe_research.training.leaf_state import OverLeaves, to_leaves
from pe_research.training.steps import Keyed, initial_train_state


def fresh(seed: int = 0):
    """A tiny config's steps, state and first four batches (the state drawn from ``seed``)."""
    config = load_config(DEFAULT_CONFIG, tiny_overrides(seed=seed))
    task = get_task(config.task.to_dict(), config.data.to_dict())
    mesh = data_mesh()
    steps, params, opt_state = initial_train_state(config, task.vocabulary.size, mesh)
    batches = [data.global_batch(data.train_batch(task, config.data, config.seed, i), mesh)
               for i in range(4)]
    return steps, params, opt_state, batches


def host(tree) -> list[np.ndarray]:
    return [np.asarray(leaf) for leaf in jax.tree.leaves(tree)]


def test_steps_on_leaves_give_the_steps_on_the_state_bit_for_bit(request):
    if ran_at_default_optimization(request):
        return
    steps, params, opt_state, batches = fresh()
    direct = []
    for i in range(3):
        params, opt_state, metrics = steps.train(params, opt_state, batches[i], i)
        direct.append(host(metrics))
    params, opt_state, metrics = steps.train_many(params, opt_state, batches[3:] * 2, 3)
    direct.append(host(metrics))
    expected = host((params, opt_state))

    steps, params, opt_state, batches = fresh()
    state, treedef = to_leaves(params, opt_state)
    one, many = OverLeaves(steps.train, treedef), OverLeaves(steps.train_many, treedef)
    on_leaves = []
    for i in range(3):
        state, metrics = one(state, batches[i], i)
        on_leaves.append(host(metrics))
    state, metrics = many(state, batches[3:] * 2, 3)
    on_leaves.append(host(metrics))

    assert jax.tree.structure(jax.tree.unflatten(treedef, state)) == treedef
    for got, want in zip(host(state) + sum(on_leaves, []), expected + sum(direct, []),
                         strict=True):
        np.testing.assert_array_equal(got, want)


def test_a_runs_seed_stays_an_argument_of_the_program_on_leaves():
    programs = []
    for seed in (0, 1):
        steps, params, opt_state, batches = fresh(seed)
        state, treedef = to_leaves(params, opt_state)
        step = OverLeaves(steps.train, treedef)
        programs.append(step.jitted.lower(state, batches[0], 0, *step.step.trailing).as_text())
    assert programs[0] == programs[1]  # one compilation serves both seeds


def test_a_step_that_changes_the_states_structure_is_refused_when_traced():
    changes = Keyed(jax.jit(lambda params, opt_state, batch: (params, [opt_state], {})), ())
    state, treedef = to_leaves({"w": np.ones(2, np.float32)}, (np.zeros(2, np.float32),))
    with pytest.raises(ValueError, match="another structure than it was given"):
        OverLeaves(changes, treedef)(state, None)
