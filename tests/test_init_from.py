"""Fine-tuning (``train.init_from``): a run starts from another run's weights, checked first."""

from __future__ import annotations

import json
import shutil

import jax
import numpy as np
import pytest
from conftest import DEFAULT_CONFIG, assert_same_trained_parameters, tiny_overrides

from pe_research.config import load_config
from pe_research.core.errors import ConfigError
from pe_research.runs.checkpoint import Checkpointer
from pe_research.runs.init_from import check_init_source, source_dir
from pe_research.runs.restore import load_run, run_task
from pe_research.runs.run_dir import RunDir
from pe_research.runs.tracking import read_metrics
from pe_research.runtime import data_mesh, replicated
from pe_research.training.ensemble import train_ensemble
from pe_research.training.loop import start_from_source, train
from pe_research.training.step import initial_train_state

STEPS = 4


def fine_tune_config(init_from: str = "", seed: int = 0, **changes: object):
    """The tiny config with a constant rate (no warm-up), ``STEPS`` steps, fine-tuned from
    ``init_from``'s latest checkpoint."""
    overrides = tiny_overrides(**{
        "train.steps": STEPS, "train.log_every": 1, "train.eval_every": 0,
        "train.checkpoint_every": 2, "train.warmup_steps": 0, "train.init_from": init_from,
        "train.init_checkpoint": "latest", "wandb.mode": "disabled", **changes})
    config = load_config(DEFAULT_CONFIG, overrides)
    config.seed = seed
    return config


def params_of(run_dir, step: str = "latest") -> list[np.ndarray]:
    return [np.asarray(leaf) for leaf in jax.tree.leaves(load_run(run_dir, step).params)]


def first_loss(run_dir) -> float:
    return next(r["train/loss"] for r in read_metrics(run_dir) if "train/loss" in r)


@pytest.fixture(scope="module")
def sources(trained_run_dir, tmp_path_factory):
    """``seed_0``: the tiny trained run (steps 20 and 40); ``seed_1``: the same run without its
    step 40, so the two seeds' sources hold different weights."""
    root = tmp_path_factory.mktemp("sources")
    shutil.copytree(trained_run_dir, root / "seed_0")
    shutil.copytree(trained_run_dir, root / "seed_1")
    shutil.rmtree(root / "seed_1" / "checkpoints" / "40")
    return root


def test_start_from_source_takes_the_checkpoints_weights_and_a_fresh_optimizer(sources):
    config = fine_tune_config(str(sources / "seed_{seed}"), seed=1,
                              **{"model.pe.scaling.type": "pi", "model.pe.scaling.factor": 2.0})
    assert source_dir(config) == sources / "seed_1"
    task = run_task(config, sources / "seed_1")
    mesh = data_mesh()
    steps, params, _ = initial_train_state(config, task.vocabulary.size, mesh)
    params, opt_state, record = start_from_source(config, task, None, params, replicated(mesh),
                                                  steps.optimizer)
    assert record == {"run": str(sources / "seed_1"), "step": 20, "model_changes": {
        "model.pe.scaling.factor": [1.0, 2.0], "model.pe.scaling.type": ["none", "pi"]}}
    for got, want in zip(jax.tree.leaves(params), params_of(sources / "seed_1"), strict=True):
        np.testing.assert_array_equal(np.asarray(got), want)
    adam = opt_state[-1][0]  # clip, then adamw's scale_by_adam state
    assert int(adam.count) == 0 and not any(np.any(np.asarray(m)) for m in jax.tree.leaves(adam.mu))


@pytest.mark.slow
def test_fine_tuned_members_equal_single_runs_from_their_own_sources(sources, tmp_path, capsys):
    """Two members fine-tuned from their seeds' sources and, in the same program, one that starts
    fresh."""
    pattern = str(sources / "seed_{seed}")
    members = [tmp_path / "ensemble" / f"seed_{seed}" for seed in (0, 1)]
    fresh = tmp_path / "ensemble" / "fresh_1"
    train_ensemble([*(fine_tune_config(pattern, seed) for seed in (0, 1)),
                    fine_tune_config("", seed=1)], [*members, fresh])
    single = tmp_path / "single_1"
    capsys.readouterr()
    train(fine_tune_config(pattern, seed=1), single)
    assert (f"single_1: starting from the weights of {sources / 'seed_1'} (step 20); model "
            "settings changed from it: none") in capsys.readouterr().out
    assert_same_trained_parameters(params_of(members[1]), params_of(single))
    history = [RunDir(member).config_history() for member in members]
    assert [h[0]["initialised_from"]["step"] for h in history] == [40, 20]
    assert history[1][0]["initialised_from"]["run"] == str(sources / "seed_1")
    assert history[1][0]["initialised_from"]["model_changes"] == {}
    # From trained weights the first loss is far below a fresh model's on the same batches.
    scratch = tmp_path / "scratch_1"
    train(fine_tune_config("", seed=1), scratch)
    assert_same_trained_parameters(params_of(fresh), params_of(scratch))
    assert RunDir(fresh).config_history() == []  # started from no run
    assert first_loss(single) < 0.7 * first_loss(scratch)
    assert not np.allclose(params_of(single)[0], params_of(scratch)[0])


@pytest.mark.slow
def test_a_resumed_fine_tuning_run_goes_on_from_its_own_checkpoint(sources, tmp_path):
    source = tmp_path / "source"
    shutil.copytree(sources / "seed_0", source)
    whole, split = tmp_path / "whole", tmp_path / "split"
    train(fine_tune_config(str(source)), whole)
    train(fine_tune_config(str(source), **{"train.steps": 2}), split)
    shutil.rmtree(source)  # resuming must not need the source, nor go back to it
    train(fine_tune_config(str(source)), split)
    assert Checkpointer(split / "checkpoints", read_only=True).steps()[-1] == STEPS
    for a, b in zip(params_of(whole), params_of(split), strict=True):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize(("changes", "expected"), [
    ({"model.d_model": 32}, "has shape"),
    ({"task.alphabet_size": 3}, "vocabulary"),
    ({"train.init_checkpoint": "30"}, "one of the saved steps [20, 40]"),
])
def test_a_source_that_cannot_start_this_run_is_refused_before_anything_is_written(
        sources, tmp_path, changes, expected):
    run_dir = tmp_path / "run"
    with pytest.raises(ConfigError, match="train.init_") as error:
        train(fine_tune_config(str(sources / "seed_0"), **changes), run_dir)
    assert expected in str(error.value) and "\n" not in str(error.value)
    assert not (run_dir / "config.json").exists()


def test_a_missing_or_untrained_source_is_refused(tmp_path):
    config = fine_tune_config(str(tmp_path / "missing"))
    task = run_task(config, tmp_path / "run")
    with pytest.raises(ConfigError, match="no config.json there"):
        check_init_source(config, task)
    (tmp_path / "missing").mkdir()
    (tmp_path / "missing" / "config.json").write_text(json.dumps({}))
    with pytest.raises(ConfigError, match="holds no checkpoint yet"):
        check_init_source(config, task)


def test_init_checkpoint_must_name_a_checkpoint():
    with pytest.raises(ConfigError, match="train.init_checkpoint"):
        fine_tune_config(**{"train.init_checkpoint": "newest"})
