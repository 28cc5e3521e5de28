"""K train steps in one call give the K steps of K calls, bit for bit, with one compile.

The bit-for-bit comparisons run in a child pytest at XLA's default optimization level, where
they hold (the suite compiles at level 0, where grouped and single steps differ in the last bit).
"""

from __future__ import annotations

import jax
import numpy as np
import pytest
from conftest import DEFAULT_CONFIG, ran_at_default_optimization, tiny_overrides
from flax import nnx

from pe_research import data
from pe_research.config import load_config
from pe_research.config.validate import steps_per_call
from pe_research.core.errors import ConfigError
from pe_research.runs.restore import load_run
from pe_research.runs.tracking import read_metrics
from pe_research.tasks import get_task
from pe_research.training.ensemble import train_ensemble
from pe_research.training.loop import train
from pe_research.training.step_loop import DivergedError, shapes

RUN = {"train.steps": 24, "train.log_every": 4, "train.eval_every": 12,
       "train.checkpoint_every": 12, "wandb.mode": "disabled"}


def config_with(**changes: object):
    return load_config(DEFAULT_CONFIG, tiny_overrides(**{**RUN, **changes}))


def params_of(run_dir) -> list[np.ndarray]:
    model = load_run(run_dir, "latest").model
    return [np.asarray(leaf) for leaf in jax.tree.leaves(nnx.state(model, nnx.Param))]


def train_records(run_dir) -> list[dict[str, float]]:
    """Every logged record without its timing."""
    return [{k: v for k, v in r.items() if k not in ("train/steps_per_second", "time")}
            for r in read_metrics(run_dir)]


def task_of(config):
    return get_task(config.task.to_dict(), config.data.to_dict())


@pytest.mark.parametrize(("intervals", "expected"), [
    ({}, 4),  # gcd(24, 4, 12, 12)
    ({"train.steps": 40, "train.log_every": 10, "train.eval_every": 20,
      "train.checkpoint_every": 20}, 10),
    ({"train.steps": 100, "train.log_every": 50, "train.eval_every": 0,
      "train.checkpoint_every": 100}, 10),  # 50's largest divisor up to 10
    ({"train.steps": 21, "train.log_every": 7, "train.eval_every": 0,
      "train.checkpoint_every": 21}, 7),
    ({"train.steps": 13, "train.log_every": 13, "train.eval_every": 0,
      "train.checkpoint_every": 13}, 1),  # a prime above the limit: one step per call
])
def test_zero_picks_the_largest_divisor_of_every_interval_up_to_ten(intervals, expected):
    config = config_with(**intervals)
    assert steps_per_call(config, task_of(config)) == expected


def test_training_shapes_follow_the_buckets_and_several_shapes_mean_one_step_per_call():
    # reverse_string: n source tokens, n + 1 target tokens (BOS/EOS); buckets (8, 16, 32).
    one = config_with()
    task = get_task(one.task.to_dict(), one.data.to_dict())
    # (source, target, joint): n + n + 1 joint tokens, to a multiple of 8, at most S + T
    assert data.train_shapes(task, one.data.to_dict()) == {(8, 16, 24)}
    two = config_with(**{"data.train_lengths": (1, 12)})
    assert data.train_shapes(task, two.data.to_dict()) == {(8, 16, 24), (16, 16, 32)}
    assert steps_per_call(two, task_of(two)) == 1


@pytest.mark.parametrize(("changes", "fragment"), [
    ({"train.steps_per_call": 5}, "must divide train.steps (24)"),
    ({"train.steps_per_call": 8}, "must divide train.log_every (4)"),
    ({"train.steps_per_call": 4, "data.train_lengths": (1, 12)}, "one bucket holds"),
    ({"train.steps_per_call": -1}, "must be >= 0"),
])
def test_a_steps_per_call_that_cannot_group_the_run_is_a_config_error(changes, fragment):
    with pytest.raises(ConfigError, match="train.steps_per_call") as error:
        config_with(**changes)
    assert fragment in str(error.value)


@pytest.mark.slow
@pytest.mark.default_optimization
def test_grouped_steps_equal_one_step_per_call_bit_for_bit_with_one_compile(tmp_path, request):
    if ran_at_default_optimization(request):
        return
    runs = {}
    for k in (1, 4, 0):
        run_dir = tmp_path / f"k{k}"
        result = train(config_with(**{"train.steps_per_call": k,
                                      "data.length_sampling": "mixed"}), run_dir)
        assert result.compilations == 1
        runs[k] = run_dir
    assert len([r for r in train_records(runs[1]) if "train/loss" in r]) == 6
    for k in (4, 0):
        assert train_records(runs[k]) == train_records(runs[1])
        for grouped, single in zip(params_of(runs[k]), params_of(runs[1]), strict=True):
            np.testing.assert_array_equal(grouped, single)


@pytest.mark.slow
@pytest.mark.default_optimization
def test_a_run_resumed_with_another_steps_per_call_equals_an_uninterrupted_one(tmp_path,
                                                                            request):
    if ran_at_default_optimization(request):
        return
    whole, parts = tmp_path / "whole", tmp_path / "parts"
    train(config_with(**{"train.steps_per_call": 1}), whole)
    train(config_with(**{"train.steps_per_call": 2, "train.steps": 12}), parts)
    result = train(config_with(**{"train.steps_per_call": 4}), parts)
    assert result.compilations == 1  # this process compiled only the 4-step program
    assert train_records(parts) == train_records(whole)
    for resumed, uninterrupted in zip(params_of(parts), params_of(whole), strict=True):
        np.testing.assert_array_equal(resumed, uninterrupted)


@pytest.mark.slow
def test_divergence_inside_a_call_stops_at_the_same_step_before_any_checkpoint_of_it(
        tmp_path):
    """lr 1e5: the loss overflows a few steps in; 6 steps per call report the step 1 per call
    reports, and no checkpoint at or after it exists."""
    diverged = {}
    for k in (1, 6):
        run_dir = tmp_path / f"k{k}"
        config = config_with(**{"train.steps_per_call": k, "train.learning_rate": 1e5,
                                "train.warmup_steps": 0, "train.clip_norm": 0.0,
                                "train.checkpoint_every": 6, "train.log_every": 6,
                                "train.eval_every": 0})
        with pytest.raises(DivergedError) as error:
            train(config, run_dir)
        diverged[k] = int(str(error.value).split("diverged at step ")[1].split(":")[0])
        saved = sorted(int(p.name) for p in (run_dir / "checkpoints").iterdir()
                       if p.name.isdigit())
        assert all(step < diverged[k] for step in saved)
    assert diverged[6] == diverged[1]
    assert 1 < diverged[1] < 24


@pytest.mark.slow
@pytest.mark.default_optimization
def test_ensemble_members_grouped_equal_members_one_step_per_call(tmp_path, request):
    if ran_at_default_optimization(request):
        return
    runs = {}
    for k in (1, 4):
        configs = []
        for seed in (0, 1):
            config = config_with(**{"train.steps_per_call": k})
            config.seed = seed
            configs.append(config)
        members = [tmp_path / f"k{k}_seed{seed}" for seed in (0, 1)]
        result = train_ensemble(configs, members)
        assert result.compilations == 1
        runs[k] = members
    for grouped, single in zip(runs[4], runs[1], strict=True):
        assert train_records(grouped) == train_records(single)
        for a, b in zip(params_of(grouped), params_of(single), strict=True):
            np.testing.assert_array_equal(a, b)


@pytest.mark.slow
def test_a_call_whose_batches_differ_in_shape_falls_back_to_one_step_per_call(tmp_path,
                                                                               monkeypatch):
    """Lengths 1-12 over buckets 8/16 take two shapes; were K chosen anyway (train_shapes
    wrong), the loop runs such calls step by step and the run stays the same."""
    changes = {"data.train_lengths": (1, 12), "data.length_sampling": "per_batch"}
    single = tmp_path / "single"
    train(config_with(**changes, **{"train.steps_per_call": 1}), single)
    monkeypatch.setattr(data, "train_shapes", lambda task, data_cfg: {(8, 16, 24)})
    grouped = tmp_path / "grouped"
    config = config_with(**changes)
    result = train(config, grouped)
    task = get_task(config.task.to_dict(), config.data.to_dict())
    calls = [[shapes(data.train_batch(task, config.data, config.seed, s)) for s in range(c, c + 4)]
             for c in range(0, 24, 4)]
    one_per_call = {shape for call in calls if len(set(call)) > 1 for shape in call}
    four_per_call = {call[0] for call in calls if len(set(call)) == 1}
    assert one_per_call  # the fallback ran
    assert result.compilations == len(one_per_call) + len(four_per_call)
    assert train_records(grouped) == train_records(single)
    for a, b in zip(params_of(grouped), params_of(single), strict=True):
        np.testing.assert_array_equal(a, b)
