"""The EOS decision (Newman et al. 2020): decoding at the oracle length, and -EOS training."""

from __future__ import annotations

import json
import shutil
import sys

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from conftest import DEFAULT_CONFIG, load_experiment
from flax import nnx
from tiny_models import VOCAB, arange_positions, random_inputs, spread_parameters, tiny_config

from pe_research.config import load_config
from pe_research.core.errors import UsageError
from pe_research.evaluation.range_eval import evaluate_run
from pe_research.model import Seq2SeqTransformer, SingleStackTransformer
from pe_research.model.decoding import PAD_ID, greedy_decode, naive_greedy_decode
from pe_research.model.inputs import forward
from pe_research.model.metrics import METRICS, Outputs, range_metrics
from pe_research.runs.restore import load_run
from pe_research.runs.run_dir import RunDir
from pe_research.tasks.vocabulary import BOS_ID, EOS_ID
from pe_research.training.optimizer import make_optimizer
from pe_research.training.step import step_functions

BATCH, SOURCE_LEN, TARGET_LEN = 6, 7, 10
# A token each spread model emits early in some rows: the end token of the decoding tests.
STOPS = {"encoder_decoder": 12, "decoder_only": 3}
ORACLE_STEPS = np.array([3, 5, 9, -1, 0, 7])  # -1: a row with no end token (a padding row)


def spread_model(architecture: str):
    """A tiny model with every parameter redrawn N(0, 1), so greedy outputs vary by position."""
    config = tiny_config("rope", architecture=architecture, tie_output=False,
                         scale_embedding=False)
    model_class = Seq2SeqTransformer if architecture == "encoder_decoder" else \
        SingleStackTransformer
    return spread_parameters(model_class(config, rngs=nnx.Rngs(0)))


@pytest.mark.parametrize("decode", [greedy_decode, naive_greedy_decode])
@pytest.mark.parametrize("architecture", ["encoder_decoder", "decoder_only"])
def test_the_oracle_length_puts_the_end_token_at_its_step_and_greedy_tokens_before(
        architecture, decode):
    graphdef, state = spread_model(architecture)
    stop = STOPS[architecture]
    source, _ = random_inputs(seed=1, batch=BATCH, source_len=SOURCE_LEN)
    source_mask = jnp.ones(source.shape, bool)
    source_positions = arange_positions(BATCH, SOURCE_LEN)
    target_positions = arange_positions(BATCH, TARGET_LEN)

    def run(state):
        model = nnx.merge(graphdef, state)
        args = (source, source_positions, source_mask, target_positions)
        free = decode(model, *args, eos_id=stop)
        oracle = decode(model, *args, eos_id=stop, eos_steps_B=jnp.asarray(ORACLE_STEPS))
        inputs = jnp.concatenate([jnp.full((BATCH, 1), BOS_ID), oracle[:, :-1]], axis=1)
        logits = model(source, inputs, source_positions, target_positions, source_mask,
                       jnp.ones(inputs.shape, bool))
        return free, oracle, jnp.argmax(logits.at[..., stop].set(-jnp.inf), axis=-1)

    run = jax.jit(run).lower(state).compile()
    free, oracle, best_but_stop = (np.asarray(a) for a in run(state))
    for row, step in enumerate(ORACLE_STEPS):
        end = TARGET_LEN if step < 0 else step
        assert stop not in oracle[row, :end]
        np.testing.assert_array_equal(oracle[row, :end], best_but_stop[row, :end])
        if step >= 0:
            assert oracle[row, step] == stop and (oracle[row, step + 1:] == PAD_ID).all()
    # Left alone, some rows stop before their oracle step: the oracle changed their output.
    early = [row for row, step in enumerate(ORACLE_STEPS)
             if stop in free[row, :step if step >= 0 else TARGET_LEN]]
    assert early, free


def test_oracle_exact_match_is_every_target_token_of_the_oracle_decode():
    targets = jnp.array([[5, 6, EOS_ID, 0], [5, 6, 7, EOS_ID], [0, 0, 0, 0]])
    mask = targets != 0
    oracle = jnp.array([[5, 6, EOS_ID, 0], [5, 9, 7, EOS_ID], [0, 0, 0, 0]])
    outputs = Outputs(jnp.zeros((3, 4, VOCAB)), targets, mask, decoded=targets,
                      oracle_decoded=oracle)
    np.testing.assert_array_equal(METRICS["oracle_exact_match"].per_example(outputs), [1, 0, 0])
    assert "oracle_exact_match" not in [m.name for m in range_metrics(oracle_length=False)]
    assert "oracle_exact_match" in [m.name for m in range_metrics(oracle_length=True)]


def test_stop_metrics_say_where_a_free_decode_stopped():
    """Golden rows: early by one, never, right, late by one, and a padding row."""
    targets = jnp.array([[5, 6, 7, EOS_ID, 0], [8, EOS_ID, 0, 0, 0], [5, 6, EOS_ID, 0, 0],
                         [5, EOS_ID, 0, 0, 0], [0, 0, 0, 0, 0]])
    decoded = jnp.array([[5, 6, EOS_ID, 0, 0], [8, 3, 3, 3, 3], [5, 6, EOS_ID, 0, 0],
                         [5, 5, EOS_ID, 0, 0], [0, 0, 0, 0, 0]])
    outputs = Outputs(jnp.zeros((5, 5, VOCAB)), targets, targets != 0, decoded=decoded)
    np.testing.assert_array_equal(outputs.stop_offset(decoded), [-1, 4, 0, 1, 0])
    values = {name: np.asarray(METRICS[name].per_example(outputs)).tolist()
              for name in ("stopped_early", "stopped_late", "missing_tokens", "exact_match")}
    assert values == {"stopped_early": [1, 0, 0, 0, 0], "stopped_late": [0, 1, 0, 1, 0],
                      "missing_tokens": [1, 0, 0, 0, 0], "exact_match": [0, 0, 1, 0, 0]}


def training_batch() -> dict[str, jax.Array]:
    """Two examples, 4 and 2 target tokens then EOS, padded to 6."""
    rng = np.random.default_rng(0)
    lengths = np.array([4, 2])
    target = rng.integers(3, VOCAB, (2, 6))
    target_mask = np.arange(6) < lengths[:, None] + 1
    target_output = np.where(np.arange(6) == lengths[:, None], EOS_ID, target) * target_mask
    target_input = np.concatenate([np.full((2, 1), BOS_ID), target_output[:, :-1]], 1)
    return {key: jnp.asarray(value) for key, value in {
        "source": rng.integers(3, VOCAB, (2, 5)), "source_mask": np.ones((2, 5), bool),
        "target_input": target_input * target_mask, "target_output": target_output,
        "target_mask": target_mask}.items()}


def test_without_predict_eos_the_loss_skips_the_end_token():
    model = SingleStackTransformer(tiny_config("rope", architecture="decoder_only"),
                                   rngs=nnx.Rngs(0))
    graphdef, params, rest = nnx.split(model, nnx.Param, ...)
    batch = training_batch()
    logits = forward(model, batch, jax.random.key(0), training=False)
    losses = np.asarray(optax.softmax_cross_entropy_with_integer_labels(
        logits, batch["target_output"]))
    real, stop = np.asarray(batch["target_mask"]), np.asarray(batch["target_output"]) == EOS_ID
    train = load_config(DEFAULT_CONFIG).train.to_dict()
    for predict_eos, scored in ((True, real), (False, real & ~stop)):
        optimizer = make_optimizer(train)
        train_step, _ = step_functions(graphdef, rest, {**train, "predict_eos": predict_eos},
                                       optimizer)
        _, _, metrics = jax.jit(train_step)(params, optimizer.init(params), batch, 0,
                                            jax.random.key(0))
        np.testing.assert_allclose(metrics["loss"], losses[scored].mean(), rtol=1e-5)
    assert losses[stop].mean() > 0.1  # the end tokens' loss is not negligible: the two differ


@pytest.mark.slow
def test_range_eval_adds_oracle_exact_match_when_asked_or_trained_without_eos(trained_run_dir,
                                                                              tmp_path):
    plain = evaluate_run(load_run(trained_run_dir), (4, 12))
    oracle = evaluate_run(load_run(trained_run_dir, None, ["eval.oracle_length=True"]), (4, 12))
    minus = tmp_path / "seed_0"  # the same weights, filed as a -EOS run: nothing else to ask
    shutil.copytree(trained_run_dir, minus)
    config = json.loads(RunDir(minus).config.read_text())
    config["train"]["predict_eos"] = False
    RunDir(minus).config.write_text(json.dumps(config))
    assert evaluate_run(load_run(minus), (4, 12)).rows == oracle.rows
    for free_row, oracle_row in zip(plain.rows, oracle.rows, strict=True):
        assert "oracle_exact_match" not in free_row.values
        # A sequence decoded right stops at the right place, so the oracle decodes it the same.
        assert oracle_row.oracle_exact_match >= oracle_row.exact_match
        assert {k: v for k, v in oracle_row.values.items()
                if not k.startswith("oracle_")} == free_row.values
        # Only a decode that stops at the true end can be right.
        stopped_right = 1 - oracle_row.stopped_early - oracle_row.stopped_late
        assert oracle_row.exact_match <= stopped_right + 1e-6


@pytest.mark.slow
def test_the_eos_script_scores_each_arm_as_pe_research_eval_does(trained_run_dir, tmp_path,
                                                                 monkeypatch):
    """Its grid-point evaluation equals evaluate_run's, is cached, and both arms are needed."""
    points = {arm: tmp_path / arm for arm in ("plus", "minus")}
    for point in points.values():
        shutil.copytree(trained_run_dir, point / "seed_0")
    config_path = RunDir(points["minus"] / "seed_0").config
    config = json.loads(config_path.read_text())
    config["train"]["predict_eos"] = False  # the same weights, filed as the -EOS arm
    config_path.write_text(json.dumps(config))
    experiment = load_experiment("eos_decision")
    lengths = (4, 12)
    values, ranges = experiment.collect(list(points.values()), lengths)
    alone = evaluate_run(load_run(trained_run_dir, None, ["eval.oracle_length=True"]), lengths)
    for arm in (True, False):
        for metric in experiment.NEEDED:
            assert values["reverse_string", "rope"][arm][metric] == [
                [row.values[metric] for row in alone.rows]]
    assert ranges == {"reverse_string": (1, 8)}

    cache = RunDir(points["plus"] / "seed_0").eval_results(experiment.NAME)
    written = cache.stat().st_mtime_ns
    out = tmp_path / "eos.png"
    monkeypatch.setattr(sys, "argv", ["eos_decision.py", *map(str, points.values()),
                                      "--lengths", "4,12", "--out", str(out),
                                      "--stops-out", str(tmp_path / "stops.png"),
                                      "--numbers", str(tmp_path / "eos.json")])
    experiment.main()
    assert cache.stat().st_mtime_ns == written  # read back, not evaluated again
    numbers = json.loads((tmp_path / "eos.json").read_text())
    means = numbers["reverse_string/rope"]
    assert means["-EOS oracle_exact_match out"] == pytest.approx(
        100 * alone.rows[1].oracle_exact_match)
    beyond = alone.rows[1]
    stop, share = numbers["+EOS early stop length"]["reverse_string/rope"]["12"]
    assert share == pytest.approx(100 * beyond.stopped_early)
    assert beyond.stopped_early > 0  # the tiny model stops early on some length-12 strings
    assert stop == pytest.approx(12 - beyond.missing_tokens / beyond.stopped_early)
    assert stop < 12
    assert out.stat().st_size > 10_000 and (tmp_path / "stops.png").stat().st_size > 10_000

    with pytest.raises(UsageError, match="reverse_string, rope: no -EOS runs given"):
        experiment.collect([points["plus"]], lengths)
