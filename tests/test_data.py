"""Batches: layout, length sampling, buckets, determinism, process slices, frozen eval sets."""

from __future__ import annotations

import gc
import hashlib

import numpy as np
import pytest

from pe_research import data
from pe_research.core.errors import ConfigError
from pe_research.data import eval_sets
from pe_research.data.batches import PLAN_STREAM, stream_generator
from pe_research.tasks import GENERATED_TASKS, TASKS, Examples, default_task_config, get_task
from pe_research.tasks.dataset_task import Ragged

BUCKETS = (8, 16, 32, 64, 128)


def data_cfg(**changes):
    return {"batch_size": 16, "train_lengths": (1, 40), "length_sampling": "per_batch",
            "buckets": BUCKETS, **changes}


@pytest.fixture(scope="module")
def reverse():
    return get_task(default_task_config("reverse_string"))


def test_bucket_length():
    assert [data.bucket_length(n, BUCKETS) for n in (0, 1, 8, 9, 64, 65, 128)] == [
        0, 8, 8, 16, 64, 128, 128]  # no source (language modelling): no slots
    assert data.bucket_length(5, (32, 8)) == 8
    with pytest.raises(ConfigError, match=r"data.buckets=.*add one >= 129 \(e.g. 256\)"):
        data.bucket_length(129, BUCKETS)


def test_covering_buckets_add_a_power_of_two_only_when_none_is_wide_enough():
    assert data.covering_buckets((8, 16, 32), 21) == (8, 16, 32)
    assert data.covering_buckets((32, 8, 16), 33) == (8, 16, 32, 64)
    assert data.covering_buckets((9, 16, 24, 32), 65) == (9, 16, 24, 32, 128)


def test_make_batch_layout():
    examples = Examples(source=np.array([[5, 6, 7], [8, 0, 0]]), source_lengths=np.array([3, 1]),
                        target=np.array([[9, 9], [4, 0]]), target_lengths=np.array([2, 1]),
                        lengths=np.array([3, 1]))
    batch = data.make_batch(examples, 4, 4)
    assert list(batch) == list(data.BATCH_KEYS)
    np.testing.assert_array_equal(batch["source"], [[5, 6, 7, 0], [8, 0, 0, 0]])
    np.testing.assert_array_equal(batch["source_mask"], [[1, 1, 1, 0], [1, 0, 0, 0]])
    np.testing.assert_array_equal(batch["target_input"], [[1, 9, 9, 0], [1, 4, 0, 0]])
    np.testing.assert_array_equal(batch["target_output"], [[9, 9, 2, 0], [4, 2, 0, 0]])
    np.testing.assert_array_equal(batch["target_mask"], [[1, 1, 1, 0], [1, 1, 0, 0]])
    # 3 + 3 and 1 + 2 joint tokens (EOS included) of S + T = 8, or of the joint width given
    np.testing.assert_array_equal(batch["joint_mask"], [[1] * 6 + [0] * 2, [1] * 3 + [0] * 5])
    np.testing.assert_array_equal(data.make_batch(examples, 4, 4, 6)["joint_mask"],
                                  [[1] * 6, [1] * 3 + [0] * 3])
    with pytest.raises(ValueError, match="joint width 5 is narrower than a row's 6 tokens"):
        data.make_batch(examples, 4, 4, 5)
    assert batch["source"].dtype == np.int32 and batch["target_mask"].dtype == bool
    with pytest.raises(ValueError, match="EOS"):
        data.make_batch(examples, 4, 2)


def test_stacked_batches_are_each_members_batch_then_zeros():
    """``stack_batches`` of three tasks' batches of different widths, one with position IDs,
    against np.pad and np.stack: member k's own arrays, zeros to the widest widths, and zeros
    where its task has no such key; ``pad_to`` is one member's part of it."""
    names = ("reverse_string", "duplicate_string", "addition")
    batches = [data.train_batch(get_task(default_task_config(name)),
                                data_cfg(train_lengths=(3, 12)), seed=k, step=k)
               for k, name in enumerate(names)]
    stacked = data.stack_batches(batches)
    widths = {"source": max(b["source"].shape[1] for b in batches),
              "target": max(b["target_input"].shape[1] for b in batches),
              "joint": max(b["joint_mask"].shape[1] for b in batches)}
    assert len({b["target_input"].shape[1] for b in batches}) > 1  # padding happens
    assert len({b["joint_mask"].shape[1] for b in batches}) > 1
    assert set(stacked) == set().union(*batches) and "source_abacus" in stacked
    for key, value in stacked.items():
        width = widths.get(key.split("_")[0])
        like = "source" if key.startswith("source") else "target_input"
        expected = [np.pad(b[key], ((0, 0), (0, width - b[key].shape[1]))) if key in b else
                    np.zeros((len(b[like]), width), value.dtype)
                    for b in batches] if width else [b[key] for b in batches]
        np.testing.assert_array_equal(value, np.stack(expected))
        assert value.dtype == batches[0].get(key, value).dtype
    padded = data.pad_to(batches[0], widths["source"] + 8, widths["target"], widths["joint"])
    np.testing.assert_array_equal(padded["lengths"], batches[0]["lengths"])
    for key in ("source", "source_mask", "target_input", "target_mask", "joint_mask"):
        width = widths["source"] + 8 if key.startswith("source") else widths[key.split("_")[0]]
        own = batches[0][key]
        np.testing.assert_array_equal(padded[key], np.pad(own, ((0, 0), (0, width - own.shape[1]))))


def test_a_programs_batch_is_its_members_batches_stacked():
    """``program_batch`` (every member's examples written into one ``[M, B, ...]`` batch)
    against ``stack_batches`` of each member's ``train_batch``: three tasks, one with position
    IDs, members of different seeds, length streams and sampling."""
    names = ("reverse_string", "addition", "duplicate_string", "reverse_string")
    tasks = [get_task(default_task_config(name)) for name in names]
    blocks = [(data_cfg(train_lengths=(3, 12), length_sampling=sampling, length_stream=stream),
               seed) for seed, sampling, stream in ((0, "per_batch", "seed"), (1, "mixed", "seed"),
                                                    (2, "per_batch", "shared"),
                                                    (3, "mixed", "seed"))]
    for step in range(4):
        got = data.program_batch(tasks, blocks, step)
        want = data.stack_batches([data.train_batch(task, cfg, seed, step)
                                   for task, (cfg, seed) in zip(tasks, blocks, strict=True)])
        assert sorted(got) == sorted(want)
        for key, value in want.items():
            assert got[key].dtype == value.dtype, key
            np.testing.assert_array_equal(got[key], value, err_msg=key)


def test_training_batches_stay_those_runs_trained_on():
    """A sha256 over every generated task's training batches (per-batch and mixed lengths, a
    shared stream, a process's slice, both kinds of addition's position IDs), taken before
    batches were written member-stacked: a resumed run must see the batches it would have. The
    target side is hashed over its real columns, as its padding changed (from a bucket to the
    source bucket's longest target rounded up): the code before gives this digest too."""
    digest = hashlib.sha256()
    tasks = [(name, default_task_config(name)) for name in GENERATED_TASKS]
    tasks.append(("addition", {**default_task_config("addition"), "index_hints": True}))
    for name, task_config in tasks:
        task = get_task(task_config)
        for sampling, stream, seed, (index, count) in (
                ("per_batch", "seed", 0, (0, 1)), ("mixed", "seed", 3, (1, 2)),
                ("per_batch", "shared", 5, (0, 1))):
            cfg = data_cfg(batch_size=8, train_lengths=(TASKS[name].min_length, 24),
                           length_sampling=sampling, length_stream=stream,
                           buckets=(8, 16, 32, 64, 128, 256))
            for step in range(3):
                batch = data.train_batch(task, cfg, seed, step, index, count)
                # the real target columns: its padding width follows the source bucket
                real = int(batch["target_mask"].sum(-1).max())
                for key in sorted(set(batch) - {"joint_mask"}):  # derived from the masks
                    value = batch[key][:, :real] if key.startswith("target") else batch[key]
                    digest.update(f"{key}{value.dtype}{value.shape}".encode())
                    digest.update(np.ascontiguousarray(value).tobytes())
    assert digest.hexdigest() == (
        "ee5a3f09a42a79a0bc0d4f8acb26021eafd6c065e84b40588a74f5ad0d2ccc1a")



@pytest.mark.parametrize("words", [(0, 0), (3, PLAN_STREAM, 12), (2**32 - 1, 7),
                                   (2**32, 7), (5, 2**40, 1)])
def test_a_stream_generator_draws_numpys_stream_of_the_same_words(words):
    """Words of 32 bits go in as a uint32 array; wider ones as numpy takes them: one stream."""
    got = stream_generator(*words).integers(0, 2**62, size=8)
    want = np.random.default_rng(list(words)).integers(0, 2**62, size=8)
    np.testing.assert_array_equal(got, want)

def test_train_batch_is_fixed_by_seed_step_and_process(reverse):
    first = data.train_batch(reverse, data_cfg(), seed=1, step=5)
    again = data.train_batch(reverse, data_cfg(), seed=1, step=5)
    for key in data.BATCH_KEYS:
        np.testing.assert_array_equal(first[key], again[key])
    other_step = data.train_batch(reverse, data_cfg(), seed=1, step=6)
    other_seed = data.train_batch(reverse, data_cfg(), seed=2, step=5)
    assert not np.array_equal(first["source"], other_step["source"]) or \
        first["lengths"][0] != other_step["lengths"][0]
    assert not np.array_equal(first["source"], other_seed["source"]) or \
        first["lengths"][0] != other_seed["lengths"][0]


def test_per_batch_sampling_is_one_uniform_length_per_batch(reverse):
    seen = []
    for step in range(400):
        batch = data.train_batch(reverse, data_cfg(batch_size=2, train_lengths=(3, 6)), 0, step)
        assert batch["lengths"][0] == batch["lengths"][1]
        seen.append(batch["lengths"][0])
    counts = np.bincount(seen, minlength=7)[3:]
    assert counts.sum() == 400 and counts.min() > 70  # each of 4 lengths ~100 times


def test_a_shared_length_stream_gives_every_seed_the_same_lengths_not_the_same_examples(
        reverse):
    """``data.length_stream=shared``: at each step every seed draws the same length (so members
    of a program share the batch's shape) and its own tokens; the lengths still cover the range
    about evenly. By default (the run's seed) the seeds' lengths differ."""
    shared, own = data_cfg(length_stream="shared"), data_cfg()
    lengths = {seed: [] for seed in range(4)}
    for step in range(200):
        batches = [data.train_batch(reverse, shared, seed, step) for seed in range(4)]
        assert len({tuple(b[key].shape for key in data.BATCH_KEYS) for b in batches}) == 1
        assert not np.array_equal(batches[0]["source"], batches[1]["source"])
        for seed, batch in enumerate(batches):
            lengths[seed].append(int(batch["lengths"][0]))
    assert lengths[0] == lengths[1] == lengths[2] == lengths[3]
    assert np.bincount(lengths[0], minlength=41)[1:].min() >= 1  # all of 1-40 in 200 draws
    assert len(set(lengths[0])) > 30
    own_lengths = [[int(data.train_batch(reverse, own, seed, step)["lengths"][0])
                    for step in range(20)] for seed in (0, 1)]
    assert own_lengths[0] != own_lengths[1]
    with pytest.raises(ConfigError, match=r"data.length_stream='run'.*seed.*shared"):
        data.check_data_config(reverse, data_cfg(length_stream="run"))


def test_train_widths_are_the_shape_train_batch_pads_to(reverse):
    """Without making an example, each step's widths for both length streams and samplings."""
    for cfg in (data_cfg(), data_cfg(length_stream="shared"),
                data_cfg(length_sampling="mixed", batch_size=64)):
        widths = {data.train_widths(reverse, cfg, 3, step) for step in range(40)}
        for step in range(40):
            batch = data.train_batch(reverse, cfg, 3, step)
            assert data.train_widths(reverse, cfg, 3, step) == (batch["source"].shape[1],
                                                                batch["target_input"].shape[1],
                                                                batch["joint_mask"].shape[1])
        possible = data.train_shapes(reverse, cfg)
        if cfg["length_sampling"] == "mixed":  # every batch holds the longest length's bucket
            assert widths == {max(possible)}
        else:
            assert widths <= possible and len(widths) >= 3


def test_mixed_sampling_draws_each_length_of_the_range_uniformly(reverse):
    lengths = np.concatenate([data.train_batch(reverse, data_cfg(
        batch_size=64, length_sampling="mixed", train_lengths=(3, 6)), 0, step)["lengths"]
        for step in range(8)])
    assert set(lengths.tolist()) == {3, 4, 5, 6}  # both ends of the range included
    assert np.bincount(lengths)[3:].min() > 90  # each of 4 lengths ~128 times in 512


def test_mixed_sampling_pads_to_one_bucket(reverse):
    batch = data.train_batch(reverse, data_cfg(batch_size=64, length_sampling="mixed",
                                               train_lengths=(1, 20)), 0, 3)
    lengths = batch["lengths"]
    assert len(set(lengths.tolist())) > 10 and lengths.min() >= 1 and lengths.max() <= 20
    assert batch["source"].shape == (64, data.bucket_length(int(lengths.max()), BUCKETS))
    np.testing.assert_array_equal(batch["source_mask"].sum(1), lengths)
    np.testing.assert_array_equal(batch["target_mask"].sum(1), lengths + 1)
    assert (batch["source"][~batch["source_mask"]] == 0).all()


@pytest.mark.parametrize("sampling", ["per_batch", "mixed"])
def test_shapes_are_bounded_by_the_buckets(sampling):
    task = get_task(default_task_config("duplicate_string"))
    shapes = {tuple(v.shape for v in data.train_batch(
        task, data_cfg(batch_size=4, length_sampling=sampling), 0, step).values())
        for step in range(150)}
    sources = {s[0][1] for s in shapes}
    assert sources <= set(BUCKETS)
    # The source bucket fixes the target width: one compiled shape per source bucket.
    assert len(shapes) == len(sources) <= len(BUCKETS)
    for shape in shapes:  # the widest target of any length whose source fits the bucket (EOS
        # included), to a multiple of 8
        n = max(n for n in range(1, 41) if data.bucket_length(n, BUCKETS) <= shape[0][1])
        assert shape[2][1] == -(-(2 * n + 1) // 8) * 8


def test_process_slices_share_lengths_and_shapes(reverse):
    for sampling in ("per_batch", "mixed"):
        cfg = data_cfg(batch_size=8, length_sampling=sampling)
        whole = data.train_batch(reverse, cfg, 0, 7)
        parts = [data.train_batch(reverse, cfg, 0, 7, process_index=i, process_count=2)
                 for i in range(2)]
        assert parts[0]["source"].shape == parts[1]["source"].shape
        assert parts[0]["source"].shape[0] == 4
        np.testing.assert_array_equal(
            np.concatenate([p["lengths"] for p in parts]), whole["lengths"])
        assert not np.array_equal(parts[0]["source"], parts[1]["source"])
    with pytest.raises(ConfigError, match="data.batch_size=8 .*process count 3"):
        data.train_batch(reverse, data_cfg(batch_size=8), 0, 0, process_index=0, process_count=3)


def test_check_data_config_catches_lengths_and_buckets():
    task = get_task(default_task_config("duplicate_string"))
    data.check_data_config(task, data_cfg(), eval_lengths=(50, 63))
    # 128 targets + EOS need no bucket: the source's (64) fixes the shape; a source of 129 does
    data.check_data_config(task, data_cfg(), eval_lengths=(64,))
    with pytest.raises(ConfigError, match=r"data.buckets=.*no bucket holds 129 tokens"):
        data.check_data_config(task, data_cfg(), eval_lengths=(129,))
    with pytest.raises(ConfigError, match=r"data.train_lengths=\(1, 40\).*>= 3"):
        data.check_data_config(get_task(default_task_config("binary_addition")), data_cfg())
    with pytest.raises(ConfigError, match="data.length_sampling"):
        data.check_data_config(task, data_cfg(length_sampling="sometimes"))
    with pytest.raises(ConfigError, match="data.buckets"):
        data.check_data_config(task, data_cfg(buckets=(32, 16)))
    with pytest.raises(ConfigError, match="data.train_lengths"):
        data.check_data_config(task, data_cfg(train_lengths=(9, 4)))


def test_eval_set_is_frozen_and_reused(reverse, tmp_path, monkeypatch):
    first = data.eval_dataset(reverse, (5, 12), 10, seed=0, cache_dir=tmp_path)
    files = sorted(p.name for p in tmp_path.glob("eval_*.parquet"))
    assert len(files) == 1 and files[0].startswith("eval_reverse_string_")
    assert len(first) == 20 and data.eval_lengths_of(first) == [5, 12]

    def must_not_generate(*args, **kwargs):
        raise AssertionError("the frozen set should have been read from disk")

    monkeypatch.setattr(reverse, "eval_examples", must_not_generate)
    second = data.eval_dataset(reverse, (5, 12), 10, seed=0, cache_dir=tmp_path)
    for column in ("length", "source", "target"):
        assert first[column] == second[column]
    monkeypatch.undo()
    data.eval_dataset(reverse, (5, 12), 10, seed=1, cache_dir=tmp_path)
    data.eval_dataset(get_task({"name": "reverse_string", "alphabet_size": 3}), (5, 12), 10, 0,
                      tmp_path)
    assert len(list(tmp_path.glob("eval_*.parquet"))) == 3


def test_each_open_eval_set_is_read_once_and_let_go_with_it(reverse, tmp_path, monkeypatch):
    """A program evaluating 6 members reads their 6 sets in turn at every length: each set's
    columns are read from Arrow once, however many sets are open, and go with their set."""
    sets = [data.eval_dataset(reverse, (5, 12), 10, seed, tmp_path) for seed in range(6)]
    reads = []
    real_read = Ragged.from_arrow.__func__
    monkeypatch.setattr(Ragged, "from_arrow",
                        classmethod(lambda cls, column: reads.append(1) or real_read(cls, column)))
    widths = [data.eval_widths(dataset, (5, 12), BUCKETS) for dataset in sets]
    for length in (5, 12, 5):
        for dataset, width in zip(sets, widths, strict=True):
            assert len(list(data.eval_batches(dataset, length, 4, BUCKETS,
                                              widths=width[length]))) == 3
    assert len(reads) == 2 * len(sets)  # source and target, once per set
    held = len(eval_sets._COLUMNS)
    del sets, dataset
    gc.collect()
    assert len(eval_sets._COLUMNS) == held - 6


def test_eval_examples_of_a_length_do_not_depend_on_the_grid(reverse):
    alone = reverse.eval_examples([9], 6, seed=4)
    in_grid = reverse.eval_examples([3, 9, 20], 6, seed=4)
    np.testing.assert_array_equal(alone.source, in_grid.source[6:12, :9])
    train = data.train_batch(reverse, data_cfg(batch_size=6, train_lengths=(9, 9)), 4, 0)
    assert not np.array_equal(train["source"][:, :9], alone.source)


def test_eval_batches_pad_to_buckets_and_rows(reverse, tmp_path):
    dataset = data.eval_dataset(reverse, (5, 12), 10, seed=0, cache_dir=tmp_path)
    batches = list(data.eval_batches(dataset, 12, 4, BUCKETS))
    assert len(batches) == 3
    assert all(b["source"].shape == (4, 16) and b["target_input"].shape == (4, 16)
               for b in batches)
    lengths = np.concatenate([b["lengths"] for b in batches])
    np.testing.assert_array_equal(lengths, [12] * 10 + [0, 0])
    last = batches[-1]
    assert not last["source_mask"][2:].any() and not last["target_mask"][2:].any()
    real = np.concatenate([b["source"][:, :12] for b in batches])[:10]
    np.testing.assert_array_equal(real, np.array(dataset.filter(
        lambda row: row["length"] == 12)["source"]))
    targets = np.concatenate([b["target_output"] for b in batches])[:10]
    np.testing.assert_array_equal(targets[:, :12], real[:, ::-1])
    assert (targets[:, 12] == 2).all()
    halves = [list(data.eval_batches(dataset, 12, 4, BUCKETS, i, 2)) for i in range(2)]
    np.testing.assert_array_equal(np.concatenate([halves[0][0]["source"], halves[1][0]["source"]]),
                                  batches[0]["source"])
    with pytest.raises(ConfigError, match=r"lengths \[5, 12\]"):
        next(data.eval_batches(dataset, 7, 4, BUCKETS))
