"""Task-supplied position IDs: Abacus and position coupling on hand-worked additions, the
addition formats they need, the batch hook, frozen eval sets, the model's use of the IDs and
cached decoding under them."""

from __future__ import annotations

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import load_experiment
from flax import nnx

from pe_research.config import apply_overrides, base_config, validate_config
from pe_research.core.errors import ConfigError
from pe_research.data import eval_batches, eval_dataset, make_batch, train_batch
from pe_research.model import ModelConfig
from pe_research.model.decoding import greedy_decode, naive_greedy_decode
from pe_research.model.inputs import abacus_inputs, batch_positions
from pe_research.model.single_stack import SingleStackTransformer
from pe_research.model.transformer import Seq2SeqTransformer
from pe_research.runs.run_dir import load_run_config
from pe_research.tasks import get_task
from pe_research.tasks.decimal_addition import HINT_SYMBOLS
from pe_research.tasks.digit_positions import digit_runs
from pe_research.training.loop import config_changes

BUCKETS = (16, 32, 64)


def written_example(task, examples, row: int) -> tuple[str, str]:
    source = examples.source[row][:examples.source_lengths[row]]
    target = examples.target[row][:examples.target_lengths[row]]
    return tuple(task.format_example(source, target).split(" -> "))


def test_digit_runs_count_within_each_number_from_one():
    is_digit = np.array([[1, 1, 0, 1, 1, 1, 0, 0, 1]], bool)  # "12+345=.6"
    np.testing.assert_array_equal(digit_runs(is_digit), [[1, 2, 0, 1, 2, 3, 0, 0, 1]])


def little_endian(value: int, n: int) -> list[int]:
    return [int(c) for c in str(value).zfill(n)[::-1]]


# Coupled IDs as HanseulJo/position-coupling ``AdditionDatasetWithCoupledPositions`` gives them
# at start 1: significance i at 1 + W - i (W: the wider operand), '+' and '=' at W + 2.
@pytest.mark.parametrize(("config", "numbers", "example", "abacus", "coupled"), [
    # 653 + 49 = 702, reversed, each at its own width: the carry makes no extra digit.
    ({"reversed": True, "zero_pad": False}, (653, 49), ("356+94", "207"),
     ([1, 2, 3, 0, 1, 2], [0, 1, 2, 3]), ([4, 3, 2, 5, 4, 3], [5, 4, 3, 2])),
    # 95 + 7 = 102, reversed: the carry out of the top digit lengthens the sum (its 1 at ID 1).
    ({"reversed": True, "zero_pad": False}, (95, 7), ("59+7", "201"),
     ([1, 2, 0, 1], [0, 1, 2, 3]), ([3, 2, 4, 3], [4, 3, 2, 1])),
    # Zero-padded operands, nothing reversed.
    ({"reversed": False, "zero_pad": True}, (95, 7), ("95+07", "102"),
     ([1, 2, 0, 1, 2], [0, 1, 2, 3]), ([2, 3, 4, 2, 3], [4, 1, 2, 3])),
    # The authors' format: zero-padded operands as written, the sum reversed with its IDs.
    ({"reversed": True, "reversed_operands": False, "zero_pad": True}, (95, 7),
     ("95+07", "201"), ([1, 2, 0, 1, 2], [0, 1, 2, 3]), ([2, 3, 4, 2, 3], [4, 3, 2, 1])),
    # Index hints, from hint 101 (the last symbol) round to 0: every digit is a run of its own.
    ({"reversed": True, "zero_pad": False, "index_hints": True}, (95, 7),
     ("ω5A9+ω7", "ω2A0B1"), ([0, 1, 0, 1, 0, 0, 1], [0, 0, 1, 0, 1, 0, 1]), None),
])
def test_abacus_and_coupled_ids_of_hand_worked_additions(config, numbers, example, abacus,
                                                         coupled):
    task = get_task({"name": "addition", "operand_lengths": "per_pair", **config})
    n = max(len(str(x)) for x in numbers)
    a, b = (np.array([little_endian(x, n)]) for x in numbers)
    widths = [np.array([len(str(x))]) for x in numbers]
    examples = task.written_examples(a, b, *widths, n, hint_start_B=np.array([101]))
    assert written_example(task, examples, 0) == example
    assert set(examples.positions) == ({"abacus"} if coupled is None else {"abacus", "coupled"})
    source_width, target_width = examples.source_lengths[0], examples.target_lengths[0] + 1
    for kind, expected in (("abacus", abacus), ("coupled", coupled)):
        if expected is None:
            continue
        source_ids, target_ids = examples.positions[kind]
        np.testing.assert_array_equal(source_ids[0][:source_width], expected[0])
        np.testing.assert_array_equal(target_ids[0][:target_width], expected[1])
        assert not source_ids[0][source_width:].any()
        assert not target_ids[0][target_width:].any()


@pytest.mark.parametrize("config", [
    {}, {"reversed": True}, {"reversed": True, "operand_lengths": "per_pair", "zero_pad": False},
    {"operand_lengths": "per_pair"}, {"reversed": True, "index_hints": True,
                                      "operand_lengths": "per_pair", "zero_pad": False},
    {"reversed": True, "reversed_operands": False, "operand_lengths": "per_pair"}])
def test_every_format_writes_a_correct_sum(config):
    task = get_task({"name": "addition", **config})
    examples = task.examples_of_length(np.random.default_rng(1), 7, 300)
    keep = lambda s: s  # noqa: E731
    reverse = (lambda s: s[::-1]) if config.get("reversed") else keep  # noqa: E731
    reverse_operand = reverse if config.get("reversed_operands", True) else keep
    for row in range(300):
        source, target = written_example(task, examples, row)
        if config.get("index_hints"):
            hints = [c for c in source if c in HINT_SYMBOLS]
            first = HINT_SYMBOLS.index(source[0])
            # a hint before every digit, consecutive (cyclic) from the units of each number
            for part in (*source.split("+"), target):
                assert [HINT_SYMBOLS.index(h) for h in part[0::2]] == [
                    (first + i) % len(HINT_SYMBOLS) for i in range(len(part) // 2)]
            assert len(hints) == sum(c.isdigit() for c in source)
            source, target = source.replace("".join(hints), ""), target
            source = "".join(c for c in source if c.isdigit() or c == "+")
            target = "".join(c for c in target if c.isdigit())
        a, b = (int(reverse_operand(part)) for part in source.split("+"))
        total = reverse(target)
        assert int(total) == a + b
        if config.get("zero_pad", True):
            assert len(target) == 8 and all(len(p) == 7 for p in source.split("+"))
        else:
            assert total == str(a + b)  # no leading zero


def test_per_pair_lengths_in_training_and_equal_lengths_in_evaluation():
    task = get_task({"name": "addition", "reversed": True, "operand_lengths": "per_pair",
                     "zero_pad": False})
    examples = task.examples_of_length(np.random.default_rng(2), 6, 4000)
    widths = np.array([[len(p) for p in written_example(task, examples, r)[0].split("+")]
                       for r in range(4000)])
    assert (widths.max(axis=1) == 6).all()
    shorter = widths.min(axis=1)
    assert set(shorter) == set(range(1, 7))  # uniform in 1..6, either operand the longer
    assert abs((widths[:, 0] == 6).mean() - (widths[:, 1] == 6).mean()) < 0.1
    assert np.allclose(np.bincount(shorter, minlength=7)[1:] / 4000, 1 / 6, atol=0.025)
    evaluation = task.eval_examples([6], 50, seed=0)
    assert (evaluation.source_lengths == 13).all()


def test_the_batch_carries_the_ids_and_a_frozen_eval_set_returns_them(tmp_path):
    task = get_task({"name": "addition", "reversed": True, "operand_lengths": "per_pair",
                     "zero_pad": False})
    batch = train_batch(task, {"batch_size": 16, "train_lengths": (1, 9),
                               "length_sampling": "mixed", "buckets": BUCKETS}, 0, 3)
    is_digit = (batch["source"] >= 3) & (batch["source"] < 13)
    np.testing.assert_array_equal(batch["source_abacus"], digit_runs(is_digit))
    slot_digit = (batch["target_input"] >= 3) & (batch["target_input"] < 13)
    np.testing.assert_array_equal(batch["target_abacus"],
                                  digit_runs(slot_digit & batch["target_mask"]))
    dataset = eval_dataset(task, [5, 9], 8, 0, tmp_path)
    frozen = next(eval_batches(dataset, 9, 8, BUCKETS))
    examples = task.eval_examples([9], 8, 0)
    fresh = make_batch(examples, frozen["source"].shape[1], frozen["target_input"].shape[1],
                       frozen["joint_mask"].shape[1])
    assert set(frozen) == set(fresh) >= {"source_coupled", "target_abacus"}
    for key in fresh:
        np.testing.assert_array_equal(frozen[key], fresh[key], err_msg=key)


def coupling_pe(**extra) -> dict:
    return {**base_config().model.pe.to_dict(), "type": "position_coupling", "max_position": 40,
            "init_std": 0.02, **extra}


def test_random_offsets_stay_in_range_and_vanish_at_test():
    task = get_task({"name": "addition", "reversed": True})
    batch = {k: jnp.asarray(v) for k, v in train_batch(
        task, {"batch_size": 8, "train_lengths": (3, 9), "length_sampling": "mixed",
               "buckets": BUCKETS}, 0, 0).items()}
    pe = coupling_pe()
    shifts, ks = set(), set()
    for seed in range(60):
        key = jax.random.key(seed)
        source, target = batch_positions(pe, batch, key, training=True,
                                         architecture="encoder_decoder")
        shift = np.asarray(source - batch["source_coupled"])[:, 0]  # the '+' never at col 0
        real = np.asarray(batch["source_coupled"]) > 0
        np.testing.assert_array_equal(np.asarray(source - batch["source_coupled"])[real],
                                      np.repeat(shift, real.sum(axis=1)))
        assert not np.asarray(source)[~real].any() and not np.asarray(target)[
            np.asarray(batch["target_coupled"]) == 0].any()
        largest = np.maximum(np.asarray(source).max(1), np.asarray(target).max(1))
        assert (largest <= 40).all() and (shift >= 0).all()
        shifts.update(shift.tolist())
        abacus = {**pe, "abacus": True, "abacus_max_k": 5}
        source_ids, target_ids = abacus_inputs(abacus, batch, key, training=True)
        k = np.unique(np.asarray(source_ids - batch["source_abacus"])[
            np.asarray(batch["source_abacus"]) > 0])
        assert k.size == 1 and 0 <= k[0] <= 5  # one k per batch
        ks.add(int(k[0]))
    assert ks == set(range(6)) and min(shifts) == 0 and max(shifts) >= 25
    source, _ = batch_positions(pe, batch, jax.random.key(0), training=False,
                                architecture="encoder_decoder")
    np.testing.assert_array_equal(source, batch["source_coupled"])
    ids = abacus_inputs({**pe, "abacus": True}, batch, jax.random.key(0), training=False)
    np.testing.assert_array_equal(ids[0], batch["source_abacus"])


@pytest.mark.parametrize("architecture", ["encoder_decoder", "decoder_only", "encoder_only"])
def test_the_model_adds_the_abacus_rows_and_cached_decoding_equals_teacher_forcing(
        architecture):
    task = get_task({"name": "addition", "reversed": True, "operand_lengths": "per_pair",
                     "zero_pad": False})
    batch = {k: jnp.asarray(v) for k, v in train_batch(
        task, {"batch_size": 4, "train_lengths": (2, 6), "length_sampling": "mixed",
               "buckets": BUCKETS}, 0, 1).items()}
    pe = {**base_config().model.pe.to_dict(), "type": "rope", "abacus": True,
          "abacus_table_size": 64}
    layers = {"num_encoder_layers": 2, "num_decoder_layers": 2}
    config = ModelConfig(vocab_size=task.vocabulary.size, d_model=16, num_heads=2, d_ff=32,
                         architecture=architecture, pe=pe, **layers)
    model = (SingleStackTransformer if config.single_stack else Seq2SeqTransformer)(
        config, rngs=nnx.Rngs(0))
    table = model.abacus.embed.embedding
    table[...] = jax.random.normal(jax.random.key(3), table.shape)
    ids = abacus_inputs(pe, batch, jax.random.key(0), training=False)
    source_pos, target_pos = batch_positions(pe, batch, jax.random.key(0), False, architecture)
    args = (batch["source"], batch["target_input"], source_pos, target_pos,
            batch["source_mask"], batch["target_mask"])
    with_ids = model(*args, abacus_ids=ids)
    shifted = model(*args, abacus_ids=(jnp.where(ids[0] > 0, ids[0] + 1, 0), ids[1]))
    assert float(jnp.max(jnp.abs(with_ids - shifted))) > 1e-3  # the IDs reach the output
    x = model.embed_inputs(batch["source"][:, :3], source_pos[:, :3], None, ids[0][:, :3])
    plain = model.embed_inputs(batch["source"][:, :3], source_pos[:, :3], None,
                               jnp.zeros_like(ids[0][:, :3]))
    np.testing.assert_allclose(x - plain, table[...][ids[0][:, :3]] - table[...][0], atol=1e-5)
    cached = greedy_decode(model, batch["source"], source_pos, batch["source_mask"], target_pos,
                           target_mask_BxT=batch["target_mask"], abacus_ids=ids)
    naive = naive_greedy_decode(model, batch["source"], source_pos, batch["source_mask"],
                                target_pos, abacus_ids=ids)
    if architecture == "encoder_only":
        naive = jnp.where(batch["target_mask"], naive, 0)
    np.testing.assert_array_equal(cached, naive)
    with pytest.raises(ValueError, match="abacus IDs"):
        model(*args)


STUDY = ["task.name=addition", "task.reversed=True", "task.operand_lengths=per_pair",
         "task.zero_pad=False", "data.train_lengths=(1,5)", "data.buckets=(16,32,64,128)",
         "eval.lengths=(30,)", "model.architecture=decoder_only"]


@pytest.mark.parametrize(("overrides", "message"), [
    (["task.name=copy", *STUDY[4:], "model.pe.type=none", "model.pe.abacus=True"],
     r"model.pe.abacus=True .*reads 'abacus' position IDs, which task 'copy' does not supply"),
    (["task.index_hints=True", "model.pe.type=position_coupling"],
     r"model.pe.type='position_coupling' .*which task 'addition' does not supply \(it "
     r"supplies \['abacus'\]\)"),
    (["model.pe.type=position_coupling", "model.pe.max_position=31"],
     r"model.pe.max_position=31 .*task length 30 has coupled IDs up to 32; set "
     r"model.pe.max_position >= 32"),
    (["model.pe.abacus=True", "model.pe.abacus_table_size=120"],
     r"model.pe.abacus_table_size=120 .*need 131 rows"),
    (["model.pe.abacus=True", "model.pe.abacus_table_size=50", "model.pe.abacus_max_k=60"],
     r"model.pe.abacus_table_size=50 .*an integer > abacus_max_k \+ 1 = 61"),
])
def test_scheme_and_task_mismatches_are_one_line_errors(overrides, message):
    config = apply_overrides(base_config(), overrides if "task.name=copy" in overrides
                             else STUDY + overrides)
    with pytest.raises(ConfigError, match=message) as error:
        validate_config(config)
    assert "\n" not in str(error.value)
    if "copy" not in overrides[0]:  # the same study config validates without the mismatch
        validate_config(apply_overrides(base_config(), STUDY))


def test_the_study_table_names_each_run_by_the_most_specific_arm_it_holds():
    seed_table = load_experiment("addition/seed_table")
    arms = seed_table.study_arms()
    config = base_config().to_dict()
    config["model"]["pe"]["type"] = "position_coupling"
    assert seed_table.arm_of(config, arms) == "coupling"
    config["task"].update(reversed_operands=False, zero_pad=True)
    assert seed_table.arm_of(config, arms) == "coupling_own_format"
    config["model"]["pe"]["type"] = "none"
    assert seed_table.arm_of(config, arms) == "nope"
    config["task"]["index_hints"] = True
    assert seed_table.arm_of(config, arms) == "index_hints"
    config["model"]["pe"]["type"] = "alibi"
    assert seed_table.arm_of(config, arms) is None


def test_a_coupling_run_trained_on_the_mirrored_ids_is_refused_in_one_line(tmp_path):
    """Runs trained before the coupled IDs followed the authors' code (their addition config
    has no ``reversed_operands``) are refused at evaluation and at resume, naming the run."""
    config = apply_overrides(base_config(), [*STUDY, "model.pe.type=position_coupling"])
    values = config.to_dict()
    del values["task"]["reversed_operands"]
    (tmp_path / "config.json").write_text(json.dumps(values))
    for read in (lambda: load_run_config(tmp_path), lambda: config_changes(config, tmp_path)):
        with pytest.raises(ConfigError, match=f"{tmp_path} was trained on coupled IDs mirrored"
                           ) as error:
            read()
        assert "\n" not in str(error.value)
    values["task"]["reversed_operands"] = True  # written by this version: read as usual
    (tmp_path / "config.json").write_text(json.dumps(values))
    assert load_run_config(tmp_path).model.pe.type == "position_coupling"
    assert config_changes(config, tmp_path) == {}
