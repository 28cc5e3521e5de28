"""Task registry, configs, vocabularies, bad input, and the sampling distributions."""

from __future__ import annotations

import hashlib
import itertools

import numpy as np
import pytest

from pe_research.core.errors import ConfigError
from pe_research.tasks import (
    BENCHMARK_TASKS,
    GENERATED_TASKS,
    TASKS,
    Vocabulary,
    default_task_config,
    get_task,
)
from pe_research.tasks.brackets import sample_expressions
from pe_research.tasks.dcf import final_stacks


def test_registry_holds_the_benchmark_suite_and_extras():
    assert set(BENCHMARK_TASKS) == {
        "even_pairs", "modular_arithmetic", "parity_check", "cycle_navigation",
        "stack_manipulation", "reverse_string", "modular_arithmetic_brackets", "solve_equation",
        "duplicate_string", "missing_duplicate_string", "odds_first", "binary_addition",
        "binary_multiplication", "compute_sqrt", "bucket_sort"}
    assert {"copy", "sort", "addition", "selective_copy", "scan", "text"} <= set(TASKS)
    assert len(GENERATED_TASKS) == 20
    for name in GENERATED_TASKS:
        assert "Example" in TASKS[name].__doc__ and "->" in TASKS[name].__doc__, name


def test_standard_parameters():
    assert default_task_config("modular_arithmetic") == {"name": "modular_arithmetic",
                                                         "modulus": 5}
    assert default_task_config("modular_arithmetic_brackets") == {
        "name": "modular_arithmetic_brackets", "modulus": 5, "multiplication": True}
    assert default_task_config("solve_equation")["modulus"] == 5
    assert default_task_config("cycle_navigation")["cycle_length"] == 5
    assert default_task_config("bucket_sort")["alphabet_size"] == 5
    assert default_task_config("reverse_string")["alphabet_size"] == 2
    sizes = {name: get_task(default_task_config(name)).vocabulary.size
             for name in GENERATED_TASKS}
    assert sizes["parity_check"] == 5 and sizes["modular_arithmetic"] == 11
    assert sizes["modular_arithmetic_brackets"] == 13 and sizes["solve_equation"] == 15
    assert sizes["sort"] == 1003 and sizes["addition"] == 14


def test_unknown_task_lists_the_valid_names():
    with pytest.raises(ConfigError, match=r"task.name='reverse'.*'reverse_string'"):
        get_task({"name": "reverse"})
    with pytest.raises(ConfigError, match="task.name"):
        default_task_config("nope")


def test_unknown_key_and_bad_values():
    with pytest.raises(ConfigError, match=r"task.modulo=.*keys are \['modulus'\]"):
        get_task({"name": "modular_arithmetic", "modulo": 7})
    with pytest.raises(ConfigError, match=r"task.modulus=1 .*>= 2"):
        get_task({"name": "solve_equation", "modulus": 1})
    with pytest.raises(ConfigError, match="task.multiplication"):
        get_task({"name": "modular_arithmetic_brackets", "multiplication": "yes"})
    assert get_task({"name": "modular_arithmetic", "modulus": 7}).vocabulary.size == 3 + 7 + 3


@pytest.mark.parametrize(("name", "bad", "valid"), [
    ("binary_addition", 2, ">= 3"), ("binary_multiplication", 1, ">= 3"),
    ("solve_equation", 2, ">= 3"), ("missing_duplicate_string", 1, ">= 2"),
    ("compute_sqrt", 0, ">= 1"), ("sort", 1001, r"in \[1, 1000\]")])
def test_lengths_a_task_cannot_produce(name, bad, valid):
    task = get_task(default_task_config(name))
    with pytest.raises(ConfigError, match=f"data.train_lengths=.*{valid}"):
        task.check_lengths((bad, 40), "data.train_lengths")
    with pytest.raises(ConfigError, match=valid):
        task.draw_train_keys(np.random.default_rng(0), 4, (bad, bad), "per_batch")
    task.check_lengths((task.min_length,), "ok")


def test_vocabulary_ids_json_and_unknown(tmp_path):
    vocab = Vocabulary(["0", "1", "+"])
    assert vocab.tokens[:3] == ("<pad>", "<bos>", "<eos>") and vocab.size == 6
    assert (vocab.pad_id, vocab.bos_id, vocab.eos_id) == (0, 1, 2)
    np.testing.assert_array_equal(vocab.encode(["1", "+", "0"]), [4, 5, 3])
    assert vocab.decode([1, 4, 5, 3, 2, 4, 0]) == ["1", "+", "0"]
    assert vocab.decode([4, 2, 3], stop_at_eos=False) == ["1", "<eos>", "0"]
    path = vocab.save(tmp_path)
    assert path.name == "vocabulary.json" and Vocabulary.load(tmp_path) == vocab
    words = Vocabulary(["jump", "walk"], unknown=True)
    assert words.unk_id == 3 and words.encode(["walk", "fly"]).tolist() == [5, 3]
    assert Vocabulary.load(words.save(tmp_path / "w.json")) == words
    with pytest.raises(KeyError):
        vocab.encode(["2"])
    with pytest.raises(ConfigError, match="vocabulary"):
        Vocabulary.load(tmp_path / "missing")


def test_a_saved_vocabulary_must_match_the_task(tmp_path):
    task = get_task(default_task_config("bucket_sort"))
    assert get_task(default_task_config("bucket_sort"), vocabulary=task.vocabulary) is not None
    with pytest.raises(ConfigError, match="vocabulary"):
        get_task(default_task_config("reverse_string"), vocabulary=task.vocabulary)


def test_make_examples_keeps_the_order_of_keys():
    task = get_task(default_task_config("duplicate_string"))
    keys = np.array([3, 1, 3, 2, 1])
    examples = task.make_examples(keys, np.random.default_rng(0))
    np.testing.assert_array_equal(examples.lengths, keys)
    np.testing.assert_array_equal(examples.source_lengths, keys)
    np.testing.assert_array_equal(examples.target_lengths, 2 * keys)
    again = task.make_examples(keys, np.random.default_rng(0))
    np.testing.assert_array_equal(examples.source, again.source)


def test_final_stacks_worked_examples():
    # 0 1 1 0 PUSH1 POP POP -> 1 1 0 ; 1 1 0 POP POP POP -> empty ; POP on empty is ignored.
    tokens = np.array([[0, 1, 1, 0, 4, 2, 2], [1, 1, 0, 2, 2, 2, 2], [1, 2, 2, 3, 4, 2, 3]])
    stack, sizes = final_stacks(tokens)
    assert sizes.tolist() == [3, 0, 2]
    assert stack[0, :3].tolist() == [1, 1, 0] and stack[2, :2].tolist() == [0, 0]


def test_expressions_and_their_stream_stay_those_runs_trained_on():
    """Worked examples (digits 0-4, then + - * ( ) as 5-9), and a digest of the expressions and
    of the stream after them over many shapes, taken from the generator before its writes were
    deferred to after the draws: a run's data must not change under it."""
    tokens, values = sample_expressions(np.random.default_rng(0), 3, 11, 5, True)
    assert tokens.tolist() == [[8, 8, 6, 3, 7, 3, 9, 5, 6, 0, 9],  # ((-3*3)+(-0)) = -9 = 1
                               [8, 8, 4, 6, 3, 9, 5, 8, 0, 9, 9],  # ((4-3)+(0)) = 1
                               [8, 8, 6, 0, 9, 5, 8, 6, 4, 9, 9]]  # ((-0)+(-4)) = -4 = 1
    assert values.tolist() == [1, 1, 1]
    tokens, values = sample_expressions(np.random.default_rng(2), 2, 7, 5, False)
    assert tokens.tolist() == [[8, 8, 2, 9, 5, 2, 9],  # ((2)+2) = 4
                               [8, 4, 5, 8, 0, 9, 9]]  # (4+(0)) = 4
    assert values.tolist() == [4, 4]
    digest = hashlib.sha256()
    for seed, length, (modulus, multiplication) in itertools.product(
            range(4), (1, 2, 3, 4, 5, 6, 9, 17, 40, 101), ((5, True), (5, False), (7, True))):
        rng = np.random.default_rng([seed, length, modulus])
        for count in (1, 3, 64):
            tokens, values = sample_expressions(rng, count, length, modulus, multiplication)
            for array in (tokens, values, rng.integers(0, 1 << 30, size=2)):
                digest.update(array.astype(np.int64).tobytes())
    assert digest.hexdigest() == (
        "7ba6fc8885b21a097073794028ae56bddef775fa5e321bbb61064f2c6c16b6d0")


def test_bracket_split_is_uniform_like_the_benchmark():
    # n = 6: "(A op B)" with len(A) uniform in {1, 2}: "(d op -d)" or "(-d op d)", half each.
    tokens, _ = sample_expressions(np.random.default_rng(0), 4000, 6, 5, True)
    left_is_negated = tokens[:, 1] == 5 + 1
    assert abs(left_is_negated.mean() - 0.5) < 0.03
    ops = tokens[np.arange(4000), np.where(left_is_negated, 3, 2)] - 5
    assert np.allclose(np.bincount(ops, minlength=3) / 4000, 1 / 3, atol=0.03)


def test_operand_and_stack_sizes_are_uniform():
    rng = np.random.default_rng(1)
    add = get_task(default_task_config("binary_addition"))
    source, _, _ = add.generate(rng, 7, 5000)
    split = np.argmax(source == 2, axis=1)  # len(a) in [1, n-2] = [1, 5]
    assert np.allclose(np.bincount(split, minlength=6)[1:] / 5000, 0.2, atol=0.025)
    stack = get_task(default_task_config("stack_manipulation"))
    source, _, _ = stack.generate(rng, 6, 5000)
    initial = np.argmax(source >= 2, axis=1)  # stack bits before the first action: [1, 5]
    assert np.allclose(np.bincount(initial, minlength=6)[1:] / 5000, 0.2, atol=0.025)
    parity = get_task(default_task_config("even_pairs"))
    _, target, _ = parity.generate(rng, 9, 4000)
    assert abs(target.mean() - 0.5) < 0.03


def test_sort_draws_distinct_symbols_and_whole_permutations():
    task = get_task({"name": "sort", "alphabet_size": 12})
    source, target, _ = task.generate(np.random.default_rng(0), 12, 50)
    assert all(sorted(row) == list(range(12)) for row in source.tolist())
    np.testing.assert_array_equal(target, np.tile(np.arange(12), (50, 1)))
    assert len({tuple(row) for row in source.tolist()}) == 50


def test_selective_copy_scatters_its_blanks_uniformly():
    task = get_task({"name": "selective_copy", "alphabet_size": 10, "blanks_per_token": 1})
    blank = task.alphabet_size
    source, target, _ = task.generate(np.random.default_rng(0), 4, 14_000)
    assert source.shape == (14_000, 8) and target.shape == (14_000, 4)
    symbols = source != blank
    assert (symbols.sum(axis=1) == 4).all()
    np.testing.assert_array_equal(source[symbols].reshape(-1, 4), target)  # in order
    assert np.allclose(symbols.mean(axis=0), 0.5, atol=0.015)  # every slot alike
    # every one of the C(8, 4) = 70 placements about equally often (200 expected each)
    counts = np.unique(np.packbits(symbols, axis=1), return_counts=True)[1]
    assert len(counts) == 70 and counts.min() > 140 and counts.max() < 260
    wide = get_task({"name": "selective_copy", "alphabet_size": 3, "blanks_per_token": 3})
    source, target, _ = wide.generate(np.random.default_rng(1), 5, 100)
    assert source.shape == (100, 20) and ((source == 3).sum(axis=1) == 15).all()
    dense = get_task({"name": "selective_copy", "blanks_per_token": 0.5})  # floor(b n) blanks
    assert [dense.source_length(n) for n in (1, 2, 5, 8)] == [1, 3, 7, 12]
    source, _, _ = dense.generate(np.random.default_rng(2), 5, 50)
    assert ((source == 10).sum(axis=1) == 2).all()
    with pytest.raises(ConfigError, match="task.blanks_per_token=-1 .*a number >= 0"):
        get_task({"name": "selective_copy", "blanks_per_token": -1})
    bare = get_task({"name": "selective_copy", "alphabet_size": 3, "blanks_per_token": 0})
    source, target, _ = bare.generate(np.random.default_rng(1), 5, 10)
    np.testing.assert_array_equal(source, target)  # no blanks: plain copy
