"""A diverging run stops with a clear message and leaves its last good checkpoint intact."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import tiny_overrides, train_here
from flax import nnx

from pe_research.runs.restore import load_run
from pe_research.runs.run_dir import RunDir
from pe_research.runs.tracking import read_metrics
from pe_research.training.step_loop import all_finite


def test_a_non_finite_value_in_any_float_leaf_is_seen_and_integer_leaves_are_not_read():
    """``all_finite`` (and its vmap over stacked members, as the ensemble calls it) is False
    for a NaN or infinity in any one floating-point leaf; a step counter never counts."""
    tree = {"a": jnp.ones((2, 3)), "b": [jnp.zeros(4, jnp.bfloat16), jnp.ones(())],
            "count": jnp.asarray(7, jnp.int32)}
    assert bool(all_finite(tree))
    leaves, treedef = jax.tree.flatten(tree)
    for index, leaf in enumerate(leaves):
        if not jnp.issubdtype(leaf.dtype, jnp.inexact):
            continue
        for bad in (jnp.nan, jnp.inf, -jnp.inf):
            broken = list(leaves)
            broken[index] = leaf.reshape(-1).at[-1].set(bad).reshape(leaf.shape)
            assert not bool(all_finite(jax.tree.unflatten(treedef, broken))), (index, bad)
            # Three stacked members, only the middle one broken.
            stacked = [jnp.stack([a, b, a]) for a, b in zip(leaves, broken, strict=True)]
            per_member = jax.vmap(all_finite)(jax.tree.unflatten(treedef, stacked))
            np.testing.assert_array_equal(per_member, [True, False, True])


@pytest.mark.slow
def test_huge_learning_rate_stops_before_checkpointing_nan(tmp_path):
    run_dir = tmp_path / "run"
    # Adam moves every weight by ~lr per step; at 1e5 the activations overflow after a few steps.
    overrides = tiny_overrides(**{
        "train.learning_rate": 1e5, "train.warmup_steps": 0, "train.clip_norm": 0.0,
        "train.steps": 20, "train.checkpoint_every": 2, "train.eval_every": 0,
        "wandb.mode": "disabled"})
    result = train_here(run_dir, overrides, check=False)

    assert result.returncode == 1, result.stderr[-2000:]
    message = next(line for line in result.stderr.splitlines() if "diverged" in line)
    diverged_at = int(message.split("diverged at step ")[1].split(":")[0])
    assert 2 < diverged_at < 20
    assert "stopped before checkpointing it" in message
    assert "train.learning_rate" in message

    steps = sorted(int(p.name) for p in (run_dir / "checkpoints").iterdir() if p.name.isdigit())
    assert steps and max(steps) < diverged_at
    assert max(steps) == (diverged_at - 1) // 2 * 2  # the last scheduled save before it
    restored = load_run(run_dir, "latest")
    assert restored.step == max(steps)
    leaves = jax.tree.leaves(nnx.state(restored.model, nnx.Param))
    assert all(np.isfinite(np.asarray(leaf)).all() for leaf in leaves)

    last = read_metrics(run_dir)[-1]
    assert last["step"] == diverged_at and last["diverged"] == 1

    assert "--config.train.learning_rate" in message and "goes on from it" in message


@pytest.mark.slow
def test_a_diverged_run_goes_on_from_its_last_good_step_with_a_smaller_learning_rate(tmp_path):
    """Train 10 good steps, diverge on resume (lr = 3.4e38: the largest float32 takes), then
    go on with the advice given."""
    run_dir = tmp_path / "run"
    good = tiny_overrides(**{"train.steps": 10, "train.checkpoint_every": 5,
                             "train.eval_every": 0, "wandb.mode": "disabled"})
    train_here(run_dir, good)
    longer = [*good, "--config.train.steps=20"]
    result = train_here(run_dir, [*longer, "--config.train.learning_rate=3.4e38"], check=False)
    assert result.returncode == 1
    assert "the last good checkpoint is step 10" in result.stderr
    assert "goes on from it" in result.stderr

    output = train_here(run_dir, [*longer, "--config.train.learning_rate=1e-3"]).stdout
    lines = output.splitlines()
    assert f"resuming {run_dir} from step 10 (of 20)" in lines
    assert "train.learning_rate changed from 3.4e+38 to 0.001 at step 10 (recorded in " \
        "config.json)" in lines
    history = RunDir(run_dir).config_history()
    assert [(h["step"], h["changed"]) for h in history] == [
        (10, {"train.learning_rate": [3e-3, 3.4e38], "train.steps": [10, 20]}),
        (10, {"train.learning_rate": [3.4e38, 1e-3]})]
    assert RunDir(run_dir).read_config()["train"]["learning_rate"] == 1e-3
    restored = load_run(run_dir, "latest")
    assert restored.step == 20
    leaves = jax.tree.leaves(nnx.state(restored.model, nnx.Param))
    assert all(np.isfinite(np.asarray(leaf)).all() for leaf in leaves)


@pytest.mark.slow
def test_an_update_that_overflows_never_saves_non_finite_state(tmp_path):
    """lr = 3.4e38 with weight decay 1: step 1's loss and gradients are finite, its update
    overflows float32 (lr x (1 + p) for a parameter p of the gradient's sign)."""
    run_dir = tmp_path / "run"
    overrides = tiny_overrides(**{
        "train.learning_rate": 3.4e38, "train.weight_decay": 1.0, "train.warmup_steps": 0,
        "train.clip_norm": 0.0, "train.steps": 4, "train.checkpoint_every": 1,
        "train.eval_every": 0, "wandb.mode": "disabled"})
    result = train_here(run_dir, overrides, check=False)

    assert result.returncode == 1, result.stderr[-2000:]
    message = next(line for line in result.stderr.splitlines() if "diverged" in line)
    assert "diverged at step 1: the parameters or optimizer state are not finite" in message
    assert "no checkpoint was written" in message
    assert not [p for p in (run_dir / "checkpoints").iterdir() if p.name.isdigit()]
    assert read_metrics(run_dir)[-1] == {**read_metrics(run_dir)[-1], "step": 1, "diverged": 1}
    assert "starts again" in message
    train_here(run_dir, [*overrides, "--config.train.learning_rate=1e-3"])
    assert load_run(run_dir, "latest").step == 4
