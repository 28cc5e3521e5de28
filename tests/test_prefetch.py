"""Prefetching changes when a batch is made, never what it holds."""

from __future__ import annotations

import threading
import time

import jax
import numpy as np
import pytest
from conftest import DEFAULT_CONFIG, tiny_overrides
from flax import nnx

from pe_research.config import load_config
from pe_research.errors import ConfigError
from pe_research.runs.restore import load_run
from pe_research.runs.tracking import read_metrics
from pe_research.training.loop import train
from pe_research.training.prefetch import Prefetcher


def test_prefetcher_returns_each_steps_batch_and_makes_the_next_ones_on_another_thread():
    made = []

    def batch(step):
        made.append((step, threading.current_thread().name))
        return step * 10

    with Prefetcher(batch, depth=2, end=6) as prefetcher:
        assert [prefetcher(s) for s in range(5)] == [0, 10, 20, 30, 40]
        time.sleep(0.05)
        ahead = {step: name for step, name in made if step > 0}
        assert set(ahead) == {1, 2, 3, 4, 5}  # depth 2 ahead, never at or past end=6
        assert all(name.startswith("prefetch") for name in ahead.values())
        assert prefetcher(2) == 20  # out of order: made again, on the spot
    made.clear()
    with Prefetcher(batch, depth=0, end=6) as direct:
        assert direct(3) == 30 and made == [(3, threading.current_thread().name)]


def test_an_error_in_a_prefetched_batch_reaches_the_step_that_needs_it():
    def batch(step):
        if step == 2:
            raise ValueError("bad batch 2")
        return step

    with Prefetcher(batch, depth=1, end=10) as prefetcher:
        assert prefetcher(0) == 0 and prefetcher(1) == 1
        with pytest.raises(ValueError, match="bad batch 2"):
            prefetcher(2)


@pytest.mark.parametrize("value", [-1, 1.5, True])
def test_bad_prefetch_depth_is_a_config_error(value):
    with pytest.raises(ConfigError, match="data.prefetch"):
        load_config(DEFAULT_CONFIG, [f"--config.data.prefetch={value}"])


def test_prefetched_training_is_bit_identical_to_unprefetched(tmp_path):
    losses, params = {}, {}
    for depth in (0, 3):
        config = load_config(DEFAULT_CONFIG, tiny_overrides(**{
            "data.prefetch": depth, "train.steps": 30, "train.log_every": 5,
            "train.eval_every": 0, "wandb.mode": "disabled",
            "data.length_sampling": "mixed"}))
        run_dir = tmp_path / f"prefetch_{depth}"
        train(config, run_dir)
        losses[depth] = [r["train/loss"] for r in read_metrics(run_dir) if "train/loss" in r]
        model = load_run(run_dir, "latest").model
        params[depth] = [np.asarray(x) for x in jax.tree.leaves(nnx.state(model, nnx.Param))]
    assert len(losses[0]) == 6
    np.testing.assert_array_equal(losses[3], losses[0])
    for with_prefetch, without in zip(params[3], params[0], strict=True):
        np.testing.assert_array_equal(with_prefetch, without)
