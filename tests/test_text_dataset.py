"""Any seq2seq dataset through ``datasets``: file formats, tokenisers, lengths, caching, errors."""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # local files only

import json  # noqa: E402

import numpy as np  # noqa: E402
import pyarrow as pa  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402
import pytest  # noqa: E402

from pe_research import data  # noqa: E402
from pe_research.core.errors import ConfigError  # noqa: E402
from pe_research.tasks import get_task  # noqa: E402

TRAIN = [("a b c", "c b a"), ("b a", "a b"), ("c c a b", "b a c c"), ("a", "a")]
TEST = [("a b d", "d b a"), ("c a b c a", "a c b a c")]


def write_jsonl(path, rows, source="question", target="answer"):
    path.write_text("".join(json.dumps({source: s, target: t, "id": i}) + "\n"
                            for i, (s, t) in enumerate(rows)))
    return path


def task_cfg(tmp_path, **changes):
    return {"name": "text", "source_column": "question", "target_column": "answer",
            "cache_dir": str(tmp_path / "hf"), **changes}


def test_word_level_jsonl_pair(tmp_path):
    train = write_jsonl(tmp_path / "train.jsonl", TRAIN)
    test = write_jsonl(tmp_path / "test.jsonl", TEST)
    task = get_task(task_cfg(tmp_path, path=str(train), eval_path=str(test)))
    vocab = task.vocabulary
    assert vocab.tokens == ("<pad>", "<bos>", "<eos>", "<unk>", "a", "b", "c")
    np.testing.assert_array_equal(task.train.lengths, [3, 2, 4, 1])
    examples = task.eval_examples([3], 0, 0)
    assert examples.source.tolist() == [[4, 5, 3]]  # 'd' was never seen in training
    assert task.format_example(examples.source[0], examples.target[0]) == "a b <unk> -> <unk> b a"
    batch = data.train_batch(task, {"batch_size": 8, "train_lengths": (2, 4),
                                    "length_sampling": "mixed", "buckets": (4, 8)}, 0, 0)
    assert batch["source"].shape == (8, 4) and batch["target_output"].shape == (8, 8)
    assert set(batch["lengths"].tolist()) <= {2, 3, 4}
    for row in range(8):  # every example is a reversal, word by word
        source = vocab.decode(batch["source"][row])
        assert vocab.decode(batch["target_output"][row]) == source[::-1]


def test_char_level_csv_folder_and_source_length(tmp_path):
    folder = tmp_path / "csv"
    folder.mkdir()
    for split, rows in (("train", TRAIN), ("test", TEST)):
        lines = ["question,answer"] + [f"{s},{t}" for s, t in rows]
        (folder / f"{split}.csv").write_text("\n".join(lines) + "\n")
    task = get_task(task_cfg(tmp_path, path=str(folder), tokenizer="char", length_of="source"))
    assert task.vocabulary.symbols == (" ", "a", "b", "c")
    np.testing.assert_array_equal(task.train.lengths, [5, 3, 7, 1])  # characters of the source
    assert task.available_lengths() == [5, 9]
    assert task.widest([5]) == (5, 5)


def test_parquet_files_and_custom_splits(tmp_path):
    for split, rows in (("train", TRAIN), ("validation", TEST)):
        table = pa.table({"src": [s for s, _ in rows], "tgt": [t for _, t in rows]})
        pq.write_table(table, tmp_path / f"{split}.parquet")
    task = get_task({"name": "text", "path": str(tmp_path / "train.parquet"),
                     "eval_path": str(tmp_path / "validation.parquet"), "eval_split": "dev",
                     "source_column": "src", "target_column": "tgt",
                     "cache_dir": str(tmp_path / "hf")})
    assert len(task.train.lengths) == 4 and task.available_lengths() == [3, 5]


def test_tokenised_once_then_read_from_the_cache(tmp_path):
    cfg = task_cfg(tmp_path, path=str(write_jsonl(tmp_path / "train.jsonl", TRAIN)),
                   eval_path=str(write_jsonl(tmp_path / "test.jsonl", TEST)))
    first = get_task(cfg)
    cache_files = sorted(str(p) for p in (tmp_path / "hf").rglob("cache-*.arrow"))
    assert len(cache_files) == 4  # tokens and ids, for each split
    second = get_task(cfg)
    assert sorted(str(p) for p in (tmp_path / "hf").rglob("cache-*.arrow")) == cache_files
    np.testing.assert_array_equal(first.train.source.values, second.train.source.values)
    assert first.fingerprint() == second.fingerprint()


def test_missing_columns_name_the_columns_that_exist(tmp_path):
    train = write_jsonl(tmp_path / "train.jsonl", TRAIN, source="prompt", target="completion")
    test = write_jsonl(tmp_path / "test.jsonl", TEST)
    with pytest.raises(ConfigError,
                       match=r"task.source_column='question'.*\['prompt', 'completion', 'id'\]"):
        get_task(task_cfg(tmp_path, path=str(train), eval_path=str(test)))


def test_bad_paths_and_options(tmp_path):
    train = write_jsonl(tmp_path / "train.jsonl", TRAIN)
    with pytest.raises(ConfigError, match="task.eval_path"):
        get_task(task_cfg(tmp_path, path=str(train)))
    with pytest.raises(ConfigError, match="task.path"):
        get_task(task_cfg(tmp_path, path=str(tmp_path / "nowhere" / "data")))
    with pytest.raises(ConfigError, match="task.path=''"):
        get_task(task_cfg(tmp_path))
    with pytest.raises(ConfigError, match=r"task.tokenizer='bpe'.*\['char', 'word'\]"):
        get_task(task_cfg(tmp_path, path=str(train), tokenizer="bpe"))
    with pytest.raises(ConfigError, match="task.length_of"):
        get_task(task_cfg(tmp_path, path=str(train), length_of="both"))
    (tmp_path / "notes.txt").write_text("x")
    with pytest.raises(ConfigError, match="ending in one of"):
        get_task(task_cfg(tmp_path, path=str(tmp_path / "notes.txt"), eval_path=str(train)))
