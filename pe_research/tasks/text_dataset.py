"""Any seq2seq dataset with a source and a target text column, through ``datasets``."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import datasets

from pe_research.core.errors import ConfigError
from pe_research.tasks.dataset_task import (
    LENGTH_OF,
    DatasetTask,
    build_vocabulary,
    check_columns,
    encode_split,
    quiet_datasets,
    tokenize,
)
from pe_research.tasks.vocabulary import Vocabulary

BUILDERS = {".jsonl": "json", ".json": "json", ".csv": "csv", ".parquet": "parquet"}


def word_tokens(text: Any) -> list[str]:
    """Whitespace-separated words."""
    return str(text).split()


def char_tokens(text: Any) -> list[str]:
    """Every character, spaces included."""
    return list(str(text))


TOKENIZERS = {"word": word_tokens, "char": char_tokens}


def load_split(path: str, split: str, key: str, cache_dir: str | None) -> datasets.Dataset:
    """One split of a local file (jsonl / json / csv / parquet), a local folder or a hub id."""
    local = Path(path).expanduser()
    try:
        if local.is_file():
            if local.suffix not in BUILDERS:
                raise ConfigError(key, path, f"a file ending in one of {sorted(BUILDERS)}")
            return datasets.load_dataset(BUILDERS[local.suffix], data_files={split: str(local)},
                                         split=split, cache_dir=cache_dir)
        return datasets.load_dataset(str(local) if local.is_dir() else path, split=split,
                                     cache_dir=cache_dir)
    except ConfigError:
        raise
    except ValueError as error:  # e.g. an unknown split name
        raise ConfigError(key, path, f"cannot read split {split!r}: {error}") from None
    except (FileNotFoundError, ConnectionError, OSError) as error:
        raise ConfigError(key, path, "not a local file or folder, and not a reachable hub "
                                     f"dataset ({type(error).__name__}: {error})") from None


class TextSeq2SeqTask(DatasetTask):
    """Examples are rows of a dataset with a source and a target text column.

    Config: ``path`` (local .jsonl/.json/.csv/.parquet file or folder, or a hub id) with
    ``train_split`` / ``eval_split``; or a file ``path`` for training and a file
    ``eval_path`` for evaluation. ``tokenizer`` 'word' (whitespace) or 'char'. The length of
    an example is its number of ``length_of`` tokens ('target' or 'source'). Words of the
    eval split missing from the training split map to ``<unk>``.
    Example row ``{"source": "a b c", "target": "c b a"}`` (word level): ``a b c -> c b a``,
    length 3.
    """

    name = "text"

    @classmethod
    def default_config(cls) -> dict[str, Any]:
        return {"path": "", "eval_path": "", "train_split": "train", "eval_split": "test",
                "source_column": "source", "target_column": "target", "tokenizer": "word",
                "length_of": "target", "cache_dir": ""}

    @property
    def separator(self) -> str:
        return " " if self.config["tokenizer"] == "word" else ""

    @classmethod
    def from_config(cls, task_cfg: Mapping[str, Any], data_cfg: Mapping[str, Any],
                    vocabulary: Vocabulary | None = None) -> TextSeq2SeqTask:
        return cls(task_cfg, vocabulary)

    def __init__(self, config: Mapping[str, Any], vocabulary: Vocabulary | None = None):
        super().__init__(config)
        cfg = self.config
        if not cfg["path"]:
            raise ConfigError("task.path", cfg["path"],
                              "a local .jsonl/.json/.csv/.parquet file or folder, or a hub id")
        if cfg["tokenizer"] not in TOKENIZERS:
            raise ConfigError("task.tokenizer", cfg["tokenizer"],
                              f"choose one of {sorted(TOKENIZERS)}")
        if cfg["length_of"] not in LENGTH_OF:
            raise ConfigError("task.length_of", cfg["length_of"], f"choose one of {LENGTH_OF}")
        if Path(cfg["path"]).expanduser().is_file() and not cfg["eval_path"]:
            raise ConfigError("task.eval_path", cfg["eval_path"],
                              f"task.path={cfg['path']!r} is one file; name the eval file too")
        with quiet_datasets():
            self._load(cfg, vocabulary)

    def _load(self, cfg: Mapping[str, Any], vocabulary: Vocabulary | None) -> None:
        cache_dir = cfg["cache_dir"] or None
        train_raw = load_split(cfg["path"], cfg["train_split"], "task.path", cache_dir)
        eval_key = "task.eval_path" if cfg["eval_path"] else "task.path"
        eval_raw = load_split(cfg["eval_path"] or cfg["path"], cfg["eval_split"], eval_key,
                              cache_dir)
        columns = {"task.source_column": cfg["source_column"],
                   "task.target_column": cfg["target_column"]}
        check_columns(train_raw, columns, f"split {cfg['train_split']!r} of {cfg['path']!r}")
        check_columns(eval_raw, columns, f"split {cfg['eval_split']!r}")
        split_text = TOKENIZERS[cfg["tokenizer"]]
        train_tokens = tokenize(train_raw, split_text, cfg["source_column"], cfg["target_column"])
        eval_tokens = tokenize(eval_raw, split_text, cfg["source_column"], cfg["target_column"])
        vocabulary = vocabulary or build_vocabulary(train_tokens)
        self.setup(encode_split(train_tokens, vocabulary, cfg["length_of"]),
                   encode_split(eval_tokens, vocabulary, cfg["length_of"]), vocabulary)
