"""experiments/studies/t5_buckets/t5_boundary_heads.py: one head's distances re-bucketed, the
rest as trained."""

from __future__ import annotations

import json

import jax.numpy as jnp
import numpy as np
import pytest
from conftest import (
    DEFAULT_CONFIG,
    experiment_path,
    load_experiment,
    run_script_here,
    tiny_overrides,
)
from flax import nnx

from pe_research.config import load_config
from pe_research.positional.base import DECODER_SELF
from pe_research.positional.t5 import T5Bias
from pe_research.training.loop import train

SCRIPT = experiment_path("t5_boundary_heads")


def test_only_the_flagged_heads_read_the_table_under_the_new_max_distance():
    trained = T5Bias({"num_buckets": 16, "max_distance": 32, "init_std": 1.0}, d_model=12,
                     num_heads=3, rngs=nnx.Rngs(0))
    moved = load_experiment("t5_boundary_heads").RebucketedT5Bias(trained, 1024)
    positions = jnp.arange(40)[None]
    as_trained = trained.bias_at(32, positions, positions, DECODER_SELF)
    np.testing.assert_array_equal(  # no head flagged: the trained bias
        moved.logit_bias(None, None, positions, positions, DECODER_SELF), as_trained)
    moved.moved_H[...] = jnp.array([True, False, True])
    bias = moved.logit_bias(None, None, positions, positions, DECODER_SELF)
    far = trained.bias_at(1024, positions, positions, DECODER_SELF)
    np.testing.assert_array_equal(bias[:, 1], as_trained[:, 1])
    np.testing.assert_array_equal(bias[:, (0, 2)], far[:, (0, 2)])
    assert not np.array_equal(as_trained[:, 0], far[:, 0])  # distances 8-39 do change bucket
    assert moved.decoder_table is trained.decoder_table  # the trained table, not a copy
    # Moving to the trained max_distance changes nothing.
    same = load_experiment("t5_boundary_heads").RebucketedT5Bias(trained, 32)
    same.moved_H[...] = jnp.ones(3, bool)
    np.testing.assert_array_equal(
        same.logit_bias(None, None, positions, positions, DECODER_SELF), as_trained)


@pytest.fixture(scope="module")
def t5_run(tmp_path_factory):
    """A tiny decoder-only T5 run of copy (a few steps: the numbers, not the learning, matter)."""
    run_dir = tmp_path_factory.mktemp("boundary") / "t5" / "seed_0"
    train(load_config(DEFAULT_CONFIG, tiny_overrides(**{
        "model.pe.type": "t5", "model.pe.num_buckets": 16, "model.architecture": "decoder_only",
        "model.num_decoder_layers": 2, "task.name": "copy", "train.steps": 10,
        "train.eval_every": 0, "wandb.mode": "disabled"})), run_dir)
    return run_dir


def run_script(group, tmp_path, *arguments):
    numbers = tmp_path / "heads.json"
    done = run_script_here(
        SCRIPT, str(group), "--lengths", "4,12", "--out", str(tmp_path / "heads.png"), "--json",
        str(numbers), *arguments)
    assert done.returncode == 0, done.stderr
    return done, json.loads(numbers.read_text())["groups"][str(group)]["runs"]["seed_0"]


@pytest.mark.slow
def test_moving_every_head_is_evaluating_with_the_new_max_distance_in_one_compile(
        t5_run, tmp_path):
    """The script itself stops when the two differ; here the whole-model eval it compares with
    is also read back from the run's eval/ file."""
    done, numbers = run_script(t5_run.parent, tmp_path, "--max-distance", "9", "--show", "0")
    assert sorted(numbers["moved"]) == ["0:0", "0:1", "0:all", "1:0", "1:1", "1:all"]
    written = json.loads((t5_run / "eval" / "max_distance_9.json").read_text())
    assert numbers["all"] == pytest.approx([100 * row["exact_match"]
                                            for row in written["rows"]])
    # Seven moves, one program per batch shape: as many as the whole-model eval compiled.
    assert numbers["compilations"] == written["compilations"] == len(
        {tuple(shape) for shape in written["compiled_shapes"]})
    assert "seed_0: as trained" in done.stdout


def test_a_run_of_another_scheme_is_refused_in_one_line(trained_run_dir, tmp_path):
    done = run_script_here(SCRIPT, str(trained_run_dir))
    assert done.returncode == 2 and done.stderr.count("\n") == 1
    assert "give a decoder-only or encoder-only T5 run" in done.stderr
