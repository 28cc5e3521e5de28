"""``train.optimizer_layout``: AdamW on one flat vector updates as leaf by leaf does, in fewer
operations, and checkpoints store its state leaf by leaf, so runs resume under either layout."""

from __future__ import annotations

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import DEFAULT_CONFIG, tiny_overrides

from pe_research.config import load_config
from pe_research.config.schema import BLOCK_DEFAULTS
from pe_research.errors import ConfigError
from pe_research.runs.restore import load_run
from pe_research.training.loop import train
from pe_research.training.optimizer import gradient_norm, make_optimizer
from pe_research.training.stored_optimizer_state import stored_state, trained_state

PARAMS = {"attention": {"kernel": jnp.linspace(-1.0, 1.0, 12).reshape(4, 3),
                        "bias": jnp.asarray([0.5, -0.25, 1.0])},
          "scale": jnp.asarray([2.0, 3.0]),
          "embedding": jnp.cos(jnp.arange(20.0)).reshape(2, 5, 2)}


def settings(layout: str, **changes: float) -> dict:
    return {**BLOCK_DEFAULTS["train"], "warmup_steps": 2, "optimizer_layout": layout, **changes}


def run_optimizer(layout: str, steps: int = 4, **changes: float):
    """(params, optimizer state) after ``steps`` jitted updates with gradients sin(k p) * 3."""
    optimizer = make_optimizer(settings(layout, **changes))

    @jax.jit
    def update(params, state, k):
        grads = jax.tree.map(lambda p: jnp.sin(k * p) * 3.0, params)
        updates, state = optimizer.update(grads, state, params)
        return jax.tree.map(jnp.add, params, updates), state

    params, state = PARAMS, optimizer.init(PARAMS)
    for k in range(1, steps + 1):
        params, state = update(params, state, float(k))
    return params, state


@pytest.mark.parametrize("changes", [
    {"weight_decay": 0.0, "clip_norm": 1.0},  # the gradient norm (about 11) is clipped
    {"weight_decay": 0.1, "clip_norm": 1.0},  # decay on matrices, none on the two vectors
    {"weight_decay": 0.1, "clip_norm": 100.0},  # not clipped
    {"weight_decay": 0.1, "clip_norm": 0.0},
], ids=["clipped", "decay", "unclipped", "no_clip"])
def test_the_flat_vector_takes_the_per_leaf_steps_and_states(changes):
    leaves_params, leaves_state = run_optimizer("leaves", **changes)
    flat_params, flat_state = run_optimizer("flat", **changes)
    for a, b in zip(jax.tree.leaves(flat_params), jax.tree.leaves(leaves_params), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)
    stored = stored_state(flat_state, PARAMS, settings("flat", **changes))
    assert jax.tree.structure(stored) == jax.tree.structure(leaves_state)
    for a, b in zip(jax.tree.leaves(stored), jax.tree.leaves(leaves_state), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-9)


def test_decay_skips_vectors_in_the_flat_layout_too():
    """Only the decay differs between these runs (unclipped, so that no shared norm links the
    leaves), and only the matrices move apart."""
    plain, _ = run_optimizer("flat", weight_decay=0.0, clip_norm=0.0)
    decayed, _ = run_optimizer("flat", weight_decay=0.5, clip_norm=0.0)
    np.testing.assert_array_equal(decayed["attention"]["bias"], plain["attention"]["bias"])
    np.testing.assert_array_equal(decayed["scale"], plain["scale"])
    assert not np.allclose(decayed["attention"]["kernel"], plain["attention"]["kernel"])
    assert not np.allclose(decayed["embedding"], plain["embedding"])


def test_the_stored_state_converts_back_exactly():
    _, state = run_optimizer("flat")
    train_settings = settings("flat")
    back = trained_state(stored_state(state, PARAMS, train_settings), PARAMS, train_settings)
    assert jax.tree.structure(back) == jax.tree.structure(state)
    for a, b in zip(jax.tree.leaves(back), jax.tree.leaves(state), strict=True):
        np.testing.assert_array_equal(a, b)
    moments = [leaf for leaf in jax.tree.leaves(state) if leaf.ndim == 1]
    assert [m.shape for m in moments] == [(37,), (37,)]  # 12 + 3 + 2 + 20 parameters


def test_the_gradient_norm_metric_is_the_norm_of_all_gradients():
    grads = jax.tree.map(lambda p: p * 2.0, PARAMS)
    expected = np.sqrt(sum(float(jnp.sum(g * g)) for g in jax.tree.leaves(grads)))
    for layout in ("leaves", "flat"):
        np.testing.assert_allclose(gradient_norm(grads, settings(layout)), expected, rtol=1e-6)


def operation_count(layout: str) -> int:
    """Instructions of the tiny model's compiled train step (entry computation)."""
    from step_timing import compile_train_step

    config = load_config(DEFAULT_CONFIG, tiny_overrides(**{"train.optimizer_layout": layout}))
    text = compile_train_step(config, batch_count=1).compiled.jitted.as_text()
    entry = text[text.index("\nENTRY"):]
    return len(re.findall(r"\n\s+\S+ = ", entry[:entry.index("\n}\n")]))


def test_the_flat_layout_compiles_to_fewer_operations(monkeypatch):
    """What it is for: per-leaf AdamW costs operations per parameter leaf (the tiny model has
    57), the flat vector a fixed few."""
    monkeypatch.syspath_prepend(str(DEFAULT_CONFIG.parents[1] / "benchmarks"))
    leaves, flat = operation_count("leaves"), operation_count("flat")
    assert flat < leaves - 57, (leaves, flat)


def test_a_run_resumes_under_the_other_layout(tmp_path):
    """Trained 12 steps leaf by leaf, then 12 flat: the stored moments carry over, so it ends
    where 24 flat steps end (up to rounding; reset or misplaced moments would not)."""
    run = {"train.steps": 24, "train.log_every": 12, "train.eval_every": 0,
           "train.checkpoint_every": 12, "wandb.mode": "disabled"}

    def config(layout: str, steps: int):
        return load_config(DEFAULT_CONFIG, tiny_overrides(**{
            **run, "train.steps": steps, "train.optimizer_layout": layout}))

    train(config("leaves", 12), tmp_path / "switched")
    train(config("flat", 24), tmp_path / "switched")
    train(config("flat", 24), tmp_path / "flat")
    switched, flat = (jax.tree.leaves(load_run(tmp_path / name, "latest").params)
                      for name in ("switched", "flat"))
    for a, b in zip(switched, flat, strict=True):
        np.testing.assert_allclose(a, b, rtol=2e-4, atol=2e-5)


def test_an_unknown_layout_is_one_config_error():
    with pytest.raises(ConfigError, match="train.optimizer_layout"):
        load_config(DEFAULT_CONFIG, tiny_overrides(**{"train.optimizer_layout": "fused"}))
