"""The answer slot's attention: the slots it reads are the encoder-only model's own, the numbers
are the weights and positions at those slots, and the training draws match order statistics."""

from __future__ import annotations

import json

import jax
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
from test_aligned_attention import task_batch
from tiny_models import tiny_config

from pe_research import data
from pe_research.analysis.decomposition import decompose
from pe_research.config import load_config
from pe_research.evaluation.range_eval import evaluate_run
from pe_research.model import SingleStackTransformer
from pe_research.model.inputs import batch_positions
from pe_research.runs.restore import load_run
from pe_research.training.loop import train

SCRIPT = experiment_path("answer_attention")
_experiment = load_experiment("answer_attention")
end_indices, follow_head, head_on = (_experiment.end_indices, _experiment.follow_head,
                                     _experiment.head_on)
joint_positions, slot_rows = _experiment.joint_positions, _experiment.slot_rows
trained_last_positions = _experiment.trained_last_positions


def test_the_end_indices_hold_the_first_and_last_source_tokens(tmp_path):
    """In the encoder-only joint sequence, the indices hold source tokens 0 and n-1, and the slot
    after the last is the first answer slot; positions follow the packed slots."""
    batch = task_batch("even_pairs", (3, 6), tmp_path)
    model = SingleStackTransformer(tiny_config("rope", architecture="encoder_only",
                                               vocab_size=32), rngs=nnx.Rngs(0))
    source_positions = jnp.broadcast_to(10 * jnp.arange(batch["source"].shape[1]),
                                        batch["source"].shape)
    target_positions = jnp.full(batch["target_input"].shape, 99)
    tokens, positions, _ = model.joint_inputs(
        *(jnp.asarray(batch[k]) for k in ("source", "target_input")), source_positions,
        target_positions, *(jnp.asarray(batch[k]) for k in ("source_mask", "target_mask")))
    first, last = end_indices(batch)
    count = batch["source_mask"].sum(-1)
    rows = np.arange(len(count))
    np.testing.assert_array_equal(np.asarray(tokens)[rows, first], batch["source"][:, 0])
    np.testing.assert_array_equal(np.asarray(tokens)[rows, last],
                                  batch["source"][rows, count - 1])
    np.testing.assert_array_equal(joint_positions(batch, source_positions, target_positions),
                                  np.asarray(positions))
    np.testing.assert_array_equal(np.asarray(positions)[rows, last], 10 * (count - 1))
    # The first answer slot follows the last token: the joint position after it (the packed
    # positions: the source's S, then the target side's T).
    width = batch["source"].shape[1]
    after = np.where(count < width, 10 * count, 99)
    np.testing.assert_array_equal(np.asarray(positions)[rows, last + 1], after)
    np.testing.assert_array_equal(np.asarray(tokens)[rows, last + 1], 1)  # the slot token


def test_the_head_on_the_last_token_and_what_it_attends_to():
    """A golden case: two examples of width-3 sources (lengths 2 and 3), two layers of two heads,
    weights chosen by hand."""
    batch = {"source": np.zeros((2, 3)), "source_mask": np.array([[1, 1, 0], [1, 1, 1]]),
             "target_input": np.zeros((2, 2))}
    weights = np.zeros((2, 2, 5, 5))  # one layer: [B, H, W, W]; the slots: indices 2 and 3
    weights[0, :, 2, :] = [[0.25, 0.75, 0, 0, 0], [0.5, 0.5, 0, 0, 0]]
    weights[1, :, 3, :] = [[0.5, 0.25, 0.25, 0, 0], [0, 0, 1.0, 0, 0]]
    rows = slot_rows([{"weights": weights}, {"weights": 0.5 * weights[:, ::-1]}], batch)
    assert rows.shape == (2, 2, 2, 5)
    first, last = end_indices(batch)
    np.testing.assert_array_equal(first, [0, 0])
    np.testing.assert_array_equal(last, [1, 2])
    assert head_on(rows, last) == (0, 1)  # mean on last: head 0 0.5, head 1 0.75
    assert head_on(rows, first) == (0, 0)  # on first: head 0 (0.25 + 0.5) / 2, head 1 0.25
    positions = np.array([[4, 8, 9, 10, 0], [1, 3, 6, 7, 8]])
    numbers = follow_head(rows, (0, 1), first, last, positions)
    assert numbers["last"] == pytest.approx(0.75)
    assert numbers["last3"] == pytest.approx(1.0)
    assert numbers["first"] == pytest.approx((0.5 + 0.0) / 2)
    assert numbers["first3"] == pytest.approx(1.0)  # slots 0-1 of example 0, 0-2 of example 1
    assert numbers["first_position"] == pytest.approx((4 + 1) / 2)
    assert numbers["attended_position"] == pytest.approx((0.5 * 4 + 0.5 * 8 + 6) / 2)
    assert numbers["last_position"] == pytest.approx(7.0)
    assert numbers["slot_position"] == pytest.approx(8.0)


def test_trained_last_positions_follow_the_order_statistic():
    """The n-th smallest of m distinct draws from [0, N) has mean n (N + 1) / (m + 1) - 1."""
    found = trained_last_positions(128, [10], 2, 20000, seed=1)
    assert found.shape == (20000,)
    assert found.mean() == pytest.approx(10 * 129 / 13 - 1, abs=0.5)
    assert found.min() >= 9 and found.max() <= 125  # two slots follow, all distinct


@pytest.fixture(scope="module")
def even_pairs_run(tmp_path_factory):
    """A tiny encoder-only RoPE run of even_pairs with randomized positions (a few steps)."""
    run_dir = tmp_path_factory.mktemp("answer") / "even_pairs" / "seed_0"
    train(load_config(DEFAULT_CONFIG, tiny_overrides(**{
        "model.pe.type": "rope", "model.architecture": "encoder_only",
        "model.pe.randomize.max_position": 32, "model.pe.randomize.per": "batch",
        "task.name": "even_pairs", "train.predict_eos": False, "train.steps": 10,
        "train.eval_every": 0, "wandb.mode": "disabled"})), run_dir)
    return run_dir


@pytest.mark.slow
def test_the_script_follows_the_decompositions_head_with_the_evaluation_draws(even_pairs_run,
                                                                                tmp_path):
    """One draw per length: the script's numbers are the decomposition's at that draw, its head
    the one on the last token at the longest training length, its accuracy the evaluator's."""
    numbers = tmp_path / "answer.json"
    done = run_script_here(
        SCRIPT, str(even_pairs_run.parent), "--lengths", "8,12", "--examples", "4", "--draws", "1",
        "--out", str(tmp_path / "answer.png"), "--json", str(numbers))
    assert done.returncode == 0, done.stderr
    record = json.loads(numbers.read_text())["groups"][str(even_pairs_run.parent)]
    result = record["runs"]["seed_0"]
    run = load_run(even_pairs_run, None, ["data.buckets=(8, 16, 32)"])
    pe, key = run.config.model.pe.to_dict(), jax.random.fold_in(jax.random.key(0), 0)
    for index, length in enumerate((8, 12)):
        batch = {k: np.asarray(v) for k, v in next(iter(data.eval_batches(data.eval_dataset(
            run.task, [length], 4, 0, even_pairs_run / "eval_data"), length, 4,
            (8, 16, 32)))).items()}
        source, target = batch_positions(pe, batch, key, False, "encoder_only")
        rows = slot_rows(decompose(run.model, batch, source_positions_BxS=source,
                                   target_positions_BxT=target), batch)
        first, last = end_indices(batch)
        if length == 8:
            assert tuple(result["head"]) == head_on(rows, last)
        expected = follow_head(rows, tuple(result["head"]), first, last,
                               joint_positions(batch, source, target))
        for field, value in expected.items():
            assert result[field][index] == pytest.approx(value, rel=1e-5, abs=1e-6)
    assert np.all(np.asarray(result["last_position"]) < 32)
    alone = evaluate_run(run, (8, 12))
    np.testing.assert_allclose(result["accuracy"],
                               [100 * row.output_token_accuracy for row in alone.rows])
    assert "99th percentile" in done.stdout and "| seed_0 | (" in done.stdout


def test_an_encoder_decoder_run_is_refused_in_one_line(trained_run_dir):
    done = run_script_here(SCRIPT, str(trained_run_dir))
    assert done.returncode == 2
    assert done.stderr == (f"error: {trained_run_dir}: model.architecture='encoder_decoder'; the "
                           "answer slot's attention is measured in encoder_only runs\n")
