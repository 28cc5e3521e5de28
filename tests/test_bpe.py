"""Byte-level BPE language modelling: learned from the training text alone, lossless, restored."""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # local files only

from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402
import pytest  # noqa: E402
from conftest import REPO, train_here  # noqa: E402

from pe_research import cli  # noqa: E402
from pe_research.core.errors import ConfigError  # noqa: E402
from pe_research.evaluation.range_eval import evaluate_run  # noqa: E402
from pe_research.runs.restore import load_run  # noqa: E402
from pe_research.tasks import get_task  # noqa: E402
from pe_research.tasks.bpe import bpe_ids, bpe_symbols, bpe_text, learn_bpe  # noqa: E402
from pe_research.tasks.vocabulary import Vocabulary  # noqa: E402

CODE = "".join(f"def f{i}(x):\n    return x * {i} + {i % 7}  # é\n\n" for i in range(80))
TAIL = "zqzqzqzq " * 30  # within the held-out tenth: the subwords must not know it
TEXT = CODE + TAIL


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("bpe") / "code.txt"
    path.write_text(TEXT)
    return path


def bpe_task(corpus: Path, vocabulary: Vocabulary | None = None, **changes):
    return get_task({"name": "language_model", "path": str(corpus), "tokenizer": "bpe",
                     "vocab_size": 300, "cache_dir": str(corpus.parent / "hf"), **changes},
                    vocabulary=vocabulary)


def text_of(task, ids: np.ndarray) -> str:
    return bpe_text(task.vocabulary.decode(ids))


def test_bpe_is_deterministic_lossless_and_starts_from_the_bytes():
    first, second = learn_bpe([CODE], 300), learn_bpe([CODE], 300)
    assert bpe_symbols(first) == bpe_symbols(second) and len(bpe_symbols(first)) == 300
    assert len(set(bpe_symbols(first)[:256])) == 256 and all(
        len(symbol) == 1 for symbol in bpe_symbols(first)[:256])
    ids = bpe_ids(first, [CODE])[0]
    assert bpe_text([bpe_symbols(first)[i] for i in ids]) == CODE  # é is two bytes, kept
    assert len(ids) < len(CODE) / 2  # the merges compress this repetitive text


def test_the_text_round_trips_and_the_held_out_tenth_is_never_learned(corpus):
    task = bpe_task(corpus)
    assert task.vocabulary.size == 3 + 300 and task.vocabulary.unk_id is None
    assert text_of(task, np.concatenate([task.train_ids, task.eval_ids])) == TEXT
    assert len(TAIL) < 0.1 * len(TEXT) and TEXT.endswith(text_of(task, task.eval_ids))
    assert not any("zq" in symbol for symbol in task.vocabulary.symbols)
    with_tail = learn_bpe([TEXT], 300)  # the control: learned from all of it, it knows "zq"
    assert any("zq" in symbol for symbol in bpe_symbols(with_tail))
    windows = task.eval_examples([6], 1, 0)
    assert text_of(task, windows.target[0]) == text_of(task, task.eval_ids[:6])


def test_a_restored_run_gets_the_same_ids_and_a_changed_text_is_refused(corpus, tmp_path):
    task = bpe_task(corpus)
    stored = Vocabulary.load(task.vocabulary.save(tmp_path))  # through vocabulary.json
    again = bpe_task(corpus, stored)
    np.testing.assert_array_equal(again.train_ids, task.train_ids)
    np.testing.assert_array_equal(again.eval_ids, task.eval_ids)
    other = tmp_path / "other.txt"
    other.write_text(TEXT.replace("return", "yield"))
    with pytest.raises(ConfigError, match=r"task\.path=.*differ from the run's vocabulary"):
        bpe_task(other, stored)


def test_data_show_prints_bpe_windows_as_text(corpus, capsys):
    assert cli.main(["data", "show", "language_model", f"--config.task.path={corpus}",
                     "--config.task.tokenizer=bpe", "--config.task.vocab_size=300",
                     f"--config.task.cache_dir={corpus.parent / 'hf'}", "--length", "4",
                     "--count", "2"]) == 0
    lines = capsys.readouterr().out.splitlines()
    task = bpe_task(corpus)
    assert lines[1:] == ["  " + text_of(task, task.eval_ids[i:i + 4]).replace("\n", "\\n")
                         for i in (0, 4)]


@pytest.mark.slow
def test_a_bpe_language_model_trains_and_is_evaluated_from_its_run(corpus, tmp_path):
    code = tmp_path / "code.txt"  # the code alone: the held-out text is like the training text
    code.write_text(CODE)
    run_dir = tmp_path / "run"
    train_here(run_dir, [f"--config.task.path={code}", "--config.task.tokenizer=bpe",
                         "--config.task.vocab_size=300", "--config.task.eval_fraction=0.2",
                         f"--config.task.cache_dir={corpus.parent / 'hf'}",
                         "--config.data.train_lengths=(8, 8)", "--config.data.batch_size=8",
                         "--config.data.buckets=(9, 17)", "--config.model.d_model=16",
                         "--config.model.num_heads=2", "--config.model.num_decoder_layers=1",
                         "--config.model.d_ff=32", "--config.train.steps=30",
                         "--config.train.warmup_steps=2", "--config.train.eval_every=0",
                         "--config.train.checkpoint_every=30", "--config.train.eval_lengths=()",
                         "--config.eval.lengths=(8, 16)", "--config.wandb.mode=disabled"],
               config=REPO / "configs" / "language_model.py")
    run = load_run(run_dir, "latest")
    assert run.task.vocabulary == bpe_task(code, eval_fraction=0.2).vocabulary
    rows = evaluate_run(run).rows
    assert [row.length for row in rows] == [8, 16]
    # 30 steps from about uniform over 303 tokens (log 303 = 5.7 nats): learned something.
    assert all(0.0 < row.loss < np.log(303) for row in rows), rows
