"""Aligned attention: the slots it reads are the model's own, its numbers are the decomposition's
weights at those slots, and the experiment script agrees with both."""

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
from tiny_models import tiny_config

from pe_research import data
from pe_research.analysis.decomposition import decompose
from pe_research.config import load_config
from pe_research.evaluation.range_eval import evaluate_run
from pe_research.model import SingleStackTransformer
from pe_research.runs.restore import load_run
from pe_research.tasks import get_task
from pe_research.tasks.registry import default_task_config
from pe_research.training.loop import train

SCRIPT = experiment_path("aligned_attention")

_experiment = load_experiment("aligned_attention")
ALIGNED_SOURCE, aligned_pairs = _experiment.ALIGNED_SOURCE, _experiment.aligned_pairs
aligned_weights, pointer = _experiment.aligned_weights, _experiment.pointer


def task_batch(task_name: str, lengths: tuple[int, ...], tmp_path) -> dict[str, np.ndarray]:
    """Real examples of several lengths in one batch (so rows differ in their padding)."""
    task = get_task(default_task_config(task_name))
    dataset = data.eval_dataset(task, list(lengths), 2, 0, tmp_path / task_name)
    widths = data.eval_widths(dataset, lengths, (16, 32))  # one shape: one source bucket
    rows = [next(iter(data.eval_batches(dataset, n, 2, (16, 32), widths=widths[n])))
            for n in lengths]
    return {key: np.concatenate([row[key] for row in rows]) for key in rows[0]}


@pytest.mark.parametrize("task_name", sorted(ALIGNED_SOURCE))
def test_the_aligned_slot_holds_the_token_that_the_query_slot_predicts(task_name, tmp_path):
    """In the model's joint sequence, the key slot holds target token j and the query slot's
    logits are the ones scored against target token j."""
    batch = task_batch(task_name, (3, 5), tmp_path)
    model = SingleStackTransformer(tiny_config("t5", architecture="decoder_only", vocab_size=32),
                                   rngs=nnx.Rngs(0))
    tokens, _, real = model.joint_inputs(
        *(jnp.asarray(batch[k]) for k in ("source", "target_input")),
        jnp.zeros(batch["source"].shape, jnp.int32),
        jnp.zeros(batch["target_input"].shape, jnp.int32),
        *(jnp.asarray(batch[k]) for k in ("source_mask", "target_mask")))
    examples, queries, keys, targets = aligned_pairs(batch, task_name)
    sources = batch["source_mask"].sum(-1)
    outputs = batch["target_mask"].sum(-1) - 1
    assert len(examples) == outputs.sum()  # every target token before EOS, once
    np.testing.assert_array_equal(np.asarray(tokens)[examples, keys],
                                  batch["target_output"][examples, targets])
    assert np.all(np.asarray(real)[examples, keys]) and np.all(keys < sources[examples])
    np.testing.assert_array_equal(queries - sources[examples], targets)  # slot j scores target j
    assert np.all(keys < queries)  # a causal query sees its aligned key


def test_aligned_weights_read_the_weights_at_the_aligned_slots():
    """A golden case: copy, lengths 2 and 1 in a width-3 source, weights marking each slot."""
    batch = {"source": np.zeros((2, 3)), "source_mask": np.array([[1, 1, 0], [1, 0, 0]]),
             "target_mask": np.array([[1, 1, 1, 0], [1, 1, 0, 0]])}
    weights = np.zeros((2, 2, 7, 7))
    weights[0, :, 2, 0] = [0.5, 0.1]  # example 0, j=0: the query at 2 + 0, source 0 at 0
    weights[0, :, 3, 1] = [0.7, 0.3]  # j=1: the query at 2 + 1, source 1 at 1
    weights[1, :, 1, 0] = [0.9, 0.2]  # example 1 (length 1), j=0: the query at 1 + 0
    result = aligned_weights([{"weights": weights}], batch, "copy")
    np.testing.assert_allclose(result, [[(0.5 + 0.7 + 0.9) / 3, (0.1 + 0.3 + 0.2) / 3]])
    reverse = aligned_weights([{"weights": weights}], batch, "reverse_string")
    np.testing.assert_allclose(reverse, [[0.9 / 3, 0.2 / 3]])  # length 2 reversed: slots 1, 0
    # Head 0's largest weights sit at slots 0, 1 and 0: distances back 2, 2 and 1.
    assert pointer([{"weights": weights}], batch, "copy", 0, 0) == {
        "on_aligned": 1.0, "modal_distance": 2, "modal_share": pytest.approx(2 / 3)}
    assert pointer([{"weights": weights}], batch, "reverse_string", 0, 0)["on_aligned"] == \
        pytest.approx(1 / 3)


@pytest.fixture(scope="module")
def copy_run(tmp_path_factory):
    """A tiny decoder-only T5 run of copy (a few steps: the numbers, not the learning, matter)."""
    run_dir = tmp_path_factory.mktemp("aligned") / "copy" / "seed_0"
    train(load_config(DEFAULT_CONFIG, tiny_overrides(**{
        "model.pe.type": "t5", "model.pe.num_buckets": 16, "model.architecture": "decoder_only",
        "task.name": "copy", "train.steps": 10, "train.eval_every": 0,
        "wandb.mode": "disabled"})), run_dir)
    return run_dir


@pytest.mark.slow
def test_the_script_reports_the_decompositions_aligned_head_and_the_runs_exact_match(
        copy_run, tmp_path):
    out, numbers = tmp_path / "aligned.png", tmp_path / "aligned.json"
    done = run_script_here(
        SCRIPT, str(copy_run.parent), "--key", "model.pe.max_distance", "--values", "32,128",
        "--lengths", "2,8,10", "--examples", "4", "--out", str(out), "--json", str(numbers))
    assert done.returncode == 0, done.stderr
    assert out.stat().st_size > 0
    record = json.loads(numbers.read_text())["groups"][str(copy_run.parent)]
    head = tuple(record["aligned_heads"]["seed_0"])
    run = load_run(copy_run, None, ["model.pe.max_distance=128"])
    expected = []
    for length in (2, 8, 10):
        batch = data.eval_batches(data.eval_dataset(
            run.task, [length], 4, run.config.seed, copy_run / "eval_data"), length, 4,
            (16, 32))
        batch = {k: np.asarray(v) for k, v in next(iter(batch)).items()}
        expected.append(aligned_weights(decompose(run.model, batch), batch, "copy"))
    result = record["runs"]["seed_0"]["128"]
    np.testing.assert_allclose(result["aligned"], np.stack(expected), rtol=1e-5, atol=1e-6)
    at_8 = np.asarray(result["aligned"])[1]
    assert head == np.unravel_index(np.argmax(at_8), at_8.shape)  # trained max_distance is 128
    for length, numbers, weights in zip((2, 8, 10), result["pointer"], np.stack(expected),
                                        strict=True):
        assert 0.0 <= numbers["on_aligned"] <= 1.0 and 1 <= numbers["modal_distance"] <= 2 * length
        if numbers["on_aligned"] == 1.0:  # the largest weight sits n tokens back, every time
            assert numbers["modal_distance"] == length and numbers["modal_share"] == 1.0
        assert weights[head] == pytest.approx(np.asarray(result["aligned_head"])[
            (2, 8, 10).index(length)])
    alone = evaluate_run(run, (2, 8, 10))
    np.testing.assert_allclose(result["exact_match"],
                               [100 * row.exact_match for row in alone.rows])
    assert "| 32 | seed_0 |" in done.stdout and "| 128 | seed_0 |" in done.stdout


def test_an_encoder_decoder_run_is_refused_in_one_line(trained_run_dir):
    done = run_script_here(SCRIPT, str(trained_run_dir))
    assert done.returncode == 2
    assert done.stderr == ("error: model.architecture='encoder_decoder': aligned attention "
                           "reads the self-attention of a decoder-only model; give a "
                           "decoder_only run\n")


def test_lengths_that_stop_within_training_are_refused_in_one_line(copy_run):
    done = run_script_here(SCRIPT, str(copy_run), "--lengths", "2,8")
    assert done.returncode == 2
    assert done.stderr == (f"error: --lengths stops at 8: give at least one length beyond 8, "
                           f"the longest training length of {copy_run}\n")
