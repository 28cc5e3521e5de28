"""Runs evaluated in one program (a sweep's report): each member's rows equal its own evaluation,
whatever its task's vocabulary, and the report groups runs that can share a program."""

from __future__ import annotations

from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import DEFAULT_CONFIG, tiny_overrides
from flax import nnx

from pe_research import data
from pe_research.config import from_mapping, load_config
from pe_research.evaluation.batch_statistics import example_statistics
from pe_research.evaluation.members_eval import (
    check_evaluated_together,
    evaluate_members,
    members_key,
)
from pe_research.evaluation.range_eval import evaluate_run
from pe_research.model import build_model
from pe_research.model.decoding import greedy_decode
from pe_research.model.inputs import batch_positions
from pe_research.model.padded_vocab import pad_to
from pe_research.runs.restore import LoadedRun
from pe_research.runs.run_dir import read_run_config, save_config
from pe_research.runtime import data_mesh, replicated
from pe_research.sweeps.report import evaluation_programs
from pe_research.tasks import get_task

# 5, 8 and 13 tokens; duplicate_string's targets are twice its inputs, so the narrowest
# vocabulary has the widest batches, and the others' are padded to them.
TASKS = ("duplicate_string", "bucket_sort", "copy")
BUCKETS = "--config.data.buckets=(8,16,32,64)"
RANGES = (0, 128, 64)


def config_of(task: str, seed: int = 0, *changes: str):
    return load_config(DEFAULT_CONFIG, [*tiny_overrides(seed=seed), BUCKETS,
                                        f"--config.task.name={task}", *changes])


def untrained_run(run_dir: Path, config) -> LoadedRun:
    """A fresh model of ``config`` as a loaded run (its frozen eval sets under ``run_dir``)."""
    mesh = data_mesh()
    task = get_task(config.task.to_dict(), config.data.to_dict())
    graphdef, params, rest = nnx.split(build_model(config, task.vocabulary.size), nnx.Param, ...)
    return LoadedRun(run_dir, config, task, 0, graphdef, jax.device_put(params, replicated(mesh)),
                     rest, mesh)


@pytest.mark.slow
def test_runs_of_three_vocabularies_and_settings_in_one_program_equal_their_own_evaluations(
        tmp_path):
    # The second has twice the examples per length: two batches to the others' one, which the
    # program pads with a batch of padding rows.
    # The first also has its own RoPE base and NTK scaling, the second log-n logits (the program
    # runs the widest, the third, with neither), and each its own randomized range: plain,
    # [0, 128), and the program model's [0, 64).
    own = ([f"--config.model.pe.max_wavelength={500.0}", "--config.model.pe.scaling.type=ntk",
            "--config.model.pe.scaling.factor=4.0"],
           ["--config.model.pe.logit_scaling=log_n_scaling"], [])
    runs = [untrained_run(tmp_path / task, config_of(
        task, seed, f"--config.data.eval_samples={32 if seed == 1 else 16}", *own[seed],
        f"--config.model.pe.randomize.max_position={RANGES[seed]}"))
        for seed, task in enumerate(TASKS)]
    assert sorted({run.task.vocabulary.size for run in runs}) == [5, 8, 13]
    together = evaluate_members(runs)
    compiled_alone = 0
    for run, result in zip(runs, together, strict=True):
        alone = evaluate_run(run)
        compiled_alone += alone.compilations
        assert [row.length for row in result.rows] == [row.length for row in alone.rows]
        for got, want in zip(result.rows, alone.rows, strict=True):
            assert got.samples == want.samples == (32 if run is runs[1] else 16)
            assert got.values.keys() == want.values.keys()
            for name, value in want.values.items():
                np.testing.assert_allclose(got.values[name], value, rtol=1e-5, atol=1e-7,
                                           err_msg=f"{run.task.name} {name} at {got.length}")
    # one program for the three: its shapes are the widest member's
    assert together[0].compilations < compiled_alone


@pytest.mark.parametrize("architecture", ["encoder_decoder", "decoder_only", "encoder_only"])
def test_a_model_padded_with_winning_tokens_scores_as_its_own_over_its_vocabulary(
        architecture):
    """Padded rows that would win every argmax and most of the softmax (+-50x the real rows)
    change nothing once masked: the teacher-forced and decoded sums, and each decoder's greedy
    tokens."""
    config = config_of("reverse_string", 0, f"--config.model.architecture={architecture}")
    task = get_task(config.task.to_dict(), config.data.to_dict())
    size = task.vocabulary.size
    narrow = build_model(config, size)
    wide = build_model(config, size + 8)
    graphdef, narrow_params, rest = nnx.split(narrow, nnx.Param, ...)
    wide_graphdef, wide_params, wide_rest = nnx.split(wide, nnx.Param, ...)
    padded = pad_to(narrow_params, wide_params)
    real = padded["embed"]["embedding"][...][:4]
    rows = jnp.concatenate([50 * real, -50 * real])  # one of each pair beats every real logit
    padded["embed"]["embedding"][...] = padded["embed"]["embedding"][...].at[size:].set(rows)
    batch = {key: jnp.asarray(value)
             for key, value in data.train_batch(task, config.data, 0, 0).items()}
    key = jax.random.key(3)

    def statistics(graphdef, params, rest, vocab_size=None):
        return jax.jit(lambda params: example_statistics(
            nnx.merge(graphdef, params, rest), batch, key, oracle_length=True,
            vocab_size=vocab_size))(params)

    def decoded(graphdef, params, rest, vocab_size=None):
        def decode(params):
            model = nnx.merge(graphdef, params, rest)
            source, target = batch_positions(model.config.pe, batch, key, training=False,
                                             architecture=architecture)
            return greedy_decode(model, batch["source"], source, batch["source_mask"], target,
                                 target_mask_BxT=batch["target_mask"], vocab_size=vocab_size)
        return np.asarray(jax.jit(decode)(params))

    want = statistics(graphdef, narrow_params, rest)
    got = statistics(wide_graphdef, padded, wide_rest, jnp.int32(size))
    assert got.keys() == want.keys()
    for name in want:
        np.testing.assert_allclose(got[name], want[name], rtol=1e-5, atol=1e-6, err_msg=name)
    tokens = decoded(graphdef, narrow_params, rest)
    np.testing.assert_array_equal(decoded(wide_graphdef, padded, wide_rest, size), tokens)
    # the test can fail: unmasked, the padded rows take the greedy choices
    slots = np.asarray(batch["target_mask"])  # the answer's slots, its end token's included
    assert np.mean(decoded(wide_graphdef, padded, wide_rest)[slots] >= size) > 0.5
    assert np.all(tokens < size)


def write_point(root: Path, name: str, seeds: int, *changes: str) -> list[Path]:
    """``seeds`` run directories holding nothing but the config of a grid point."""
    run_dirs = []
    for seed in range(seeds):
        run_dir = root / name / f"seed_{seed}"
        save_config(load_config(DEFAULT_CONFIG, [*tiny_overrides(seed=seed), BUCKETS, *changes]),
                    run_dir)
        run_dirs.append(run_dir)
    return run_dirs


def test_the_report_evaluates_points_that_share_a_model_together_up_to_the_cap(tmp_path):
    reverse = write_point(tmp_path, "reverse", 3, "--config.task.name=reverse_string")
    wider = write_point(tmp_path, "wider", 3, "--config.model.d_model=32")
    copy = write_point(tmp_path, "copy", 3, "--config.task.name=copy",
                       "--config.train.learning_rate=0.01")
    sort = write_point(tmp_path, "sort", 3, "--config.task.name=bucket_sort")
    randomized = write_point(tmp_path, "randomized", 2, "--config.task.name=copy",
                             "--config.model.pe.randomize.max_position=64")
    points = [(members_key(from_mapping(read_run_config(run_dirs[0]))) if run_dirs else "",
               run_dirs) for run_dirs in (reverse, wider, copy, [], sort, randomized)]
    assert evaluation_programs(points, cap=8) == [reverse + copy, wider, sort + randomized]
    assert evaluation_programs(points, cap=2) == [reverse, wider, copy, sort, randomized]
    # the key the grouping reads: what evaluate_members checks
    assert members_key(config_of("copy", 1)) == members_key(config_of("reverse_string", 4))
    assert members_key(config_of("copy")) != members_key(
        config_of("copy", 0, "--config.eval.lengths=(4,8)"))
    # -EOS runs are also decoded at the oracle length; +EOS ones join them where they are too
    minus_eos = "--config.train.predict_eos=False"
    assert members_key(config_of("copy")) != members_key(config_of("copy", 1, minus_eos))
    oracle = "--config.eval.oracle_length=True"
    assert members_key(config_of("copy", 0, oracle)) == members_key(
        config_of("copy", 1, minus_eos, oracle))


def test_runs_that_cannot_share_a_program_are_refused_before_anything_runs(tmp_path):
    runs = [untrained_run(tmp_path / "a", config_of("copy")),
            untrained_run(tmp_path / "b", config_of("copy", 1, "--config.model.d_model=32"))]
    with pytest.raises(ValueError, match="differ in model.d_model; evaluate them apart"):
        evaluate_members(runs)
    # other training lengths and no eval lengths: other default lengths, unless some are given
    unset = ("--config.eval.lengths=()",)
    short, long = (untrained_run(tmp_path / name, config_of("copy", seed, *unset, lengths))
                   for seed, (name, lengths) in enumerate(
                       [("c", "--config.data.train_lengths=(1,6)"),
                        ("d", "--config.data.train_lengths=(1,8)")]))
    with pytest.raises(ValueError, match="differ in decoding .free or at the oracle length. or "
                                         "eval lengths"):
        check_evaluated_together([short, long])
    check_evaluated_together([short, long], (4, 8))
    assert not any((tmp_path / name).exists() for name in "abcd")
