"""SCAN from the official files through ``datasets``: splits, lengths, vocabulary, fetching."""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # everything here is local files

import argparse  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402
import pytest  # noqa: E402

from pe_research import data  # noqa: E402
from pe_research.cli import data as data_cli  # noqa: E402
from pe_research.core.errors import ConfigError  # noqa: E402
from pe_research.tasks import Vocabulary, get_task  # noqa: E402
from pe_research.tasks.scan import SCAN_FILES  # noqa: E402

# The official files: PE_RESEARCH_SCAN_DIR, else the shared data folder beside the checkout.
SCAN_DIR = Path(os.environ.get("PE_RESEARCH_SCAN_DIR")
                or Path(__file__).resolve().parents[2] / "shared" / "data" / "scan")
TEST_LENGTHS = [24, 25, 26, 27, 28, 30, 32, 33, 36, 40, 48]  # output lengths of the test split


@pytest.fixture(autouse=True)
def scan_files_present(request):
    """Tests that read the official files fail (never skip) when the files are missing."""
    if request.node.get_closest_marker("needs_scan") and not (
            SCAN_DIR / "tasks_train_length.txt").exists():
        pytest.fail(f"official SCAN files not in {SCAN_DIR}: set PE_RESEARCH_SCAN_DIR or run "
                    "`pe-research data scan --to DIR`")


needs_scan = pytest.mark.needs_scan


def scan_lines(name: str) -> set[tuple[str, str]]:
    pairs = set()
    for line in (SCAN_DIR / name).read_text().splitlines():
        command, actions = line[4:].split(" OUT: ")
        pairs.add((command.strip(), actions.strip()))
    return pairs


@pytest.fixture(scope="module")
def length_split(tmp_path_factory):
    cache = tmp_path_factory.mktemp("hf")
    return get_task({"name": "scan", "split": "length", "cache_dir": str(cache)},
                    {"scan_dir": str(SCAN_DIR)})


@needs_scan
def test_length_split_sizes_lengths_and_vocabulary(length_split):
    task = length_split
    assert len(task.train.lengths) == 16990 and len(task.evaluation.lengths) == 3920
    assert task.available_lengths("train") == list(range(1, 23))
    assert task.available_lengths() == TEST_LENGTHS
    assert task.vocabulary.size == 3 + 13 + 6 and task.vocabulary.unk_id is None
    assert {"I_JUMP", "I_TURN_LEFT", "jump", "twice", "after"} <= set(task.vocabulary.symbols)
    assert task.widest(range(1, 49)) == (9, 48)


@needs_scan
def test_train_batches_are_rows_of_the_file(length_split):
    task, lines = length_split, scan_lines("tasks_train_length.txt")
    cfg = {"batch_size": 32, "train_lengths": (1, 40), "length_sampling": "mixed",
           "buckets": (16, 32, 64)}
    batch = data.train_batch(task, cfg, seed=0, step=0)
    # the split's longest target (22 tokens + EOS) to a multiple of 8: its source bucket's shape
    assert batch["source"].shape == (32, 16) and batch["target_input"].shape[1] == 24
    for row in range(32):
        source = task.vocabulary.decode(batch["source"][row])
        target = task.vocabulary.decode(batch["target_output"][row])
        assert (" ".join(source), " ".join(target)) in lines
        assert batch["lengths"][row] == len(target) == batch["target_mask"][row].sum() - 1
    one = data.train_batch(task, {**cfg, "length_sampling": "per_batch",
                                  "train_lengths": (5, 8)}, 0, 1)
    assert len(set(one["lengths"].tolist())) == 1 and 5 <= one["lengths"][0] <= 8
    with pytest.raises(ConfigError, match=r"lengths present: \[1, 2, .*22\]"):
        data.train_batch(task, {**cfg, "train_lengths": (30, 40)}, 0, 0)


@needs_scan
def test_eval_set_per_output_length(length_split, tmp_path):
    dataset = data.eval_dataset(length_split, None, 20, seed=0, cache_dir=tmp_path)
    assert data.eval_lengths_of(dataset) == TEST_LENGTHS and len(dataset) == 11 * 20
    lines = scan_lines("tasks_test_length.txt")
    batch = next(data.eval_batches(dataset, 30, 8, (16, 32, 64)))
    assert batch["target_output"].shape == (8, 32) and (batch["lengths"] == 30).all()
    for row in range(8):
        pair = tuple(" ".join(length_split.vocabulary.decode(batch[k][row]))
                     for k in ("source", "target_output"))
        assert pair in lines
    whole = data.eval_dataset(length_split, (24, 47, 48), 0, 0, tmp_path)  # 0: every example
    assert data.eval_lengths_of(whole) == [24, 48] and len(whole) == 336 + 128


@needs_scan
def test_vocabulary_travels_with_the_run(length_split, tmp_path):
    length_split.vocabulary.save(tmp_path)
    loaded = Vocabulary.load(tmp_path)
    task = get_task({"name": "scan", "split": "simple", "cache_dir": str(tmp_path / "hf")},
                    {"scan_dir": str(SCAN_DIR)}, vocabulary=loaded)
    assert task.vocabulary == length_split.vocabulary
    assert task.available_lengths("train")[-1] == 48 and len(task.train.lengths) == 16728


def test_missing_files_name_the_folder_and_the_command(tmp_path):
    with pytest.raises(ConfigError) as info:
        get_task({"name": "scan"}, {"scan_dir": str(tmp_path)})
    message = str(info.value)
    assert str(tmp_path) in message and f"pe-research data scan --to {tmp_path}" in message
    assert "tasks_train_length.txt" in message
    with pytest.raises(ConfigError, match="task.split"):
        get_task({"name": "scan", "split": "jump"}, {"scan_dir": str(tmp_path)})


def test_a_small_scan_folder_unseen_words_and_a_malformed_line(tmp_path):
    def write(train: str, test: str) -> None:
        (tmp_path / "tasks_train_length.txt").write_text(train)
        (tmp_path / "tasks_test_length.txt").write_text(test)

    write("IN: jump OUT: I_JUMP\nIN: walk twice OUT: I_WALK I_WALK\n",
          "IN: jump twice OUT: I_JUMP I_JUMP\n")
    task = get_task({"name": "scan", "cache_dir": str(tmp_path / "hf")},
                    {"scan_dir": str(tmp_path)})
    assert task.vocabulary.symbols == ("I_JUMP", "I_WALK", "jump", "twice", "walk")
    np.testing.assert_array_equal(task.train.lengths, [1, 2])
    examples = task.eval_examples([2], 1, 0)
    assert task.format_example(examples.source[0], examples.target[0]) == \
        "jump twice -> I_JUMP I_JUMP"
    write("IN: jump OUT: I_JUMP\n", "IN: jump thrice OUT: I_JUMP I_JUMP I_JUMP\n")
    with pytest.raises(ConfigError, match=r"not in the training split: \['thrice'\]"):
        get_task({"name": "scan", "cache_dir": str(tmp_path / "hf")}, {"scan_dir": str(tmp_path)})
    write("jump -> I_JUMP\n", "IN: jump OUT: I_JUMP\n")
    with pytest.raises(ConfigError, match="not a SCAN line"):
        get_task({"name": "scan", "cache_dir": str(tmp_path / "hf")}, {"scan_dir": str(tmp_path)})


def fetch_args(directory: Path, url: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    data_cli.add_arguments(parser)
    return parser.parse_args(["scan", "--to", str(directory), "--url", url])


def test_data_scan_command_fetches_or_says_where(tmp_path, capsys):
    mirror = tmp_path / "mirror"
    for split, names in SCAN_FILES.items():
        (mirror / f"{split}_split").mkdir(parents=True)
        for name in names:
            (mirror / f"{split}_split" / name).write_text(f"IN: walk OUT: I_WALK\n# {name}\n")
    assert data_cli.run(fetch_args(tmp_path / "scan", mirror.as_uri())) == 0
    assert sorted(p.name for p in (tmp_path / "scan").iterdir()) == sorted(
        n for names in SCAN_FILES.values() for n in names)
    assert (tmp_path / "scan" / "tasks_test_simple.txt").read_text().endswith(
        "tasks_test_simple.txt\n")
    assert data_cli.run(fetch_args(tmp_path / "elsewhere", (tmp_path / "none").as_uri())) == 1
    error = capsys.readouterr().err.strip()
    assert len(error.splitlines()) == 1 and str(tmp_path / "elsewhere") in error
    assert not (tmp_path / "elsewhere").exists()
