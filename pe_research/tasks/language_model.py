"""Language modelling on a text corpus: windows of n tokens, scored by perplexity.

The setting in which ALiBi (Press et al. 2022, "Train Short, Test Long", sec. 4), Kerple, FIRE,
xPos and FoX measure length extrapolation: a causal model trained on windows of L tokens is
scored on windows of L' > L tokens cut from held-out text, each window evaluated on its own
(the papers' "nonoverlapping" evaluation), by the perplexity of every token in it.

Here an example of length n is a window of n consecutive corpus tokens: the source is empty,
the target is the window, so a decoder-only model reads ``BOS t1 ... tn`` and predicts
``t1 ... tn`` from positions 0 .. n-1. There is no end of text: runs set
``train.predict_eos=False`` (the end slot is never scored) and use ``architecture=
decoder_only``; range evaluation scores teacher-forced metrics only (``loss``, ``perplexity``,
``token_accuracy``), nothing is decoded.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import datasets
import numpy as np

from pe_research.core.errors import ConfigError
from pe_research.tasks.base import LENGTH_SAMPLING, Examples, Task, check_length_range
from pe_research.tasks.bpe import BYTE_SYMBOLS, bpe_ids, bpe_symbols, bpe_text, learn_bpe
from pe_research.tasks.dataset_task import Ragged, quiet_datasets
from pe_research.tasks.text_dataset import BUILDERS, TOKENIZERS, load_split
from pe_research.tasks.vocabulary import PAD_ID, Vocabulary

TEXT_SUFFIXES = (".txt", ".text", ".md", ".py")
LM_TOKENIZERS = (*sorted(TOKENIZERS), "bpe")


def load_text(path: str, split: str, key: str, cache_dir: str | None) -> datasets.Dataset:
    """One split of a corpus: a plain-text file (rows are lines, line breaks kept), or a split of
    a json/csv/parquet file, a local folder or a hub dataset."""
    local = Path(path).expanduser()
    if not local.exists() and local.suffix in (*TEXT_SUFFIXES, *BUILDERS):  # a file, not a hub id
        raise ConfigError(key, path, f"no such file (from {Path.cwd()}); write a corpus with "
                          f"`pe-research data stdlib --to {path}` or name an existing text file")
    if local.is_file() and local.suffix in TEXT_SUFFIXES:
        return datasets.load_dataset("text", data_files={split: str(local)}, split=split,
                                     keep_linebreaks=True, cache_dir=cache_dir)
    return load_split(path, split, key, cache_dir)


def token_lists(rows: datasets.Dataset, column: str, tokenizer: str) -> datasets.Dataset:
    """Rows of text -> a ``tokens`` column of string lists (a cached ``datasets.map``)."""
    split_text = TOKENIZERS[tokenizer]
    return rows.map(lambda batch: {"tokens": [split_text(t) for t in batch[column]]},
                    batched=True, remove_columns=rows.column_names)


def token_ids(tokens: datasets.Dataset, vocabulary: Vocabulary) -> np.ndarray:
    """Every row's tokens as ids, concatenated in row order: int32 ``[N]``."""
    table = dict(zip(vocabulary.tokens, range(vocabulary.size), strict=True))
    unk = vocabulary.unk_id
    ids = tokens.map(lambda batch: {"ids": [[table.get(t, unk) for t in row]
                                             for row in batch["tokens"]]},
                     batched=True, remove_columns=["tokens"],
                     features=datasets.Features({"ids": datasets.List(datasets.Value("int32"))}))
    return Ragged.from_arrow(ids.with_format("arrow")[:].column("ids")).values


def leading_text(texts: Sequence[str], fraction: float) -> Sequence[str]:
    """The first rows of ``texts`` holding ``fraction`` of its characters (rounded down)."""
    ends = np.cumsum([len(text) for text in texts])
    return texts[:int(np.searchsorted(ends, fraction * ends[-1], side="right"))] if len(
        texts) else texts


def corpus_vocabulary(tokens: datasets.Dataset) -> Vocabulary:
    """Every distinct token of the training text, sorted, plus ``<unk>`` for unseen ones."""
    seen: set[str] = set()
    for row in tokens.with_format("arrow")["tokens"].to_pylist():
        seen.update(row)
    return Vocabulary(sorted(seen), unknown=True)


class LanguageModel(Task):
    """Next-token prediction over windows of ``n`` corpus tokens (see the module docstring).

    Config: ``path``, a plain-text file (.txt, .md, .py), a .jsonl/.json/.csv/.parquet file, a
    folder or a hub id, whose ``column`` holds the text (the ``train_split``); ``eval_path`` /
    ``eval_split`` name the held-out text, and when both are empty the last ``eval_fraction`` of
    the training text is held out. ``tokenizer`` 'char' (every character), 'word' or 'bpe'
    (byte-level subwords learned from the training text to ``vocab_size`` tokens, never from the
    held-out part; tasks/bpe.py). Training windows start at uniformly random offsets. The eval
    set at length n tiles the first ``eval_tokens`` tokens of the held-out text (0: all of it)
    with non-overlapping windows of n (a last partial window is dropped), so every length
    scores the same text and a curve moves with the length alone; ``data.eval_samples`` does
    not apply.
    Example (char level, n=12): ``def f(x):\\n `` (``data show`` writes line breaks as \\n).
    """

    name, family = "language_model", "text"
    test_time_keys = ("eval_tokens",)
    metric = "perplexity"
    decodes = False

    @classmethod
    def default_config(cls) -> dict[str, Any]:
        return {"path": "", "column": "text", "train_split": "train", "eval_path": "",
                "eval_split": "", "eval_fraction": 0.1, "eval_tokens": 32768, "tokenizer": "char",
                "vocab_size": 1024, "cache_dir": ""}

    @classmethod
    def from_config(cls, task_cfg: Mapping[str, Any], data_cfg: Mapping[str, Any],
                    vocabulary: Vocabulary | None = None) -> LanguageModel:
        return cls(task_cfg, vocabulary)

    def __init__(self, config: Mapping[str, Any], vocabulary: Vocabulary | None = None):
        super().__init__(config)
        cfg = self.config
        if not cfg["path"]:
            raise ConfigError("task.path", cfg["path"], "a text file (.txt), a .jsonl/.json/"
                              ".csv/.parquet file or folder, or a hub id")
        if cfg["tokenizer"] not in LM_TOKENIZERS:
            raise ConfigError("task.tokenizer", cfg["tokenizer"], f"choose one of {LM_TOKENIZERS}")
        size = cfg["vocab_size"]
        if isinstance(size, bool) or not isinstance(size, int) or size <= BYTE_SYMBOLS:
            raise ConfigError("task.vocab_size", size, f"the subwords of tokenizer 'bpe': an "
                              f"integer above its {BYTE_SYMBOLS} byte symbols, e.g. 1024")
        fraction = cfg["eval_fraction"]
        if isinstance(fraction, bool) or not isinstance(fraction, int | float) or not (
                0 < fraction < 1):
            raise ConfigError("task.eval_fraction", fraction,
                              "a fraction strictly between 0 and 1 of the text to hold out")
        tokens = cfg["eval_tokens"]
        if isinstance(tokens, bool) or not isinstance(tokens, int) or tokens < 0:
            raise ConfigError("task.eval_tokens", tokens, "how many held-out tokens every eval "
                              "length scores: an integer >= 0 (0: all of them)")
        with quiet_datasets():
            self._load(cfg, vocabulary)
        if tokens:
            self.eval_ids = self.eval_ids[:tokens]

    def _load(self, cfg: Mapping[str, Any], vocabulary: Vocabulary | None) -> None:
        cache_dir = cfg["cache_dir"] or None
        train_rows = load_text(cfg["path"], cfg["train_split"], "task.path", cache_dir)
        self._check_column(train_rows, f"split {cfg['train_split']!r} of {cfg['path']!r}")
        eval_rows = None
        if cfg["eval_path"] or cfg["eval_split"]:
            eval_rows = load_text(cfg["eval_path"] or cfg["path"], cfg["eval_split"] or "train",
                                  "task.eval_path" if cfg["eval_path"] else "task.eval_split",
                                  cache_dir)
            self._check_column(eval_rows, "the eval text")
        if cfg["tokenizer"] == "bpe":
            train_ids, eval_ids = self._bpe_ids(train_rows, eval_rows, vocabulary)
        else:
            train_tokens = token_lists(train_rows, cfg["column"], cfg["tokenizer"])
            self.vocabulary = vocabulary or corpus_vocabulary(train_tokens)
            train_ids = token_ids(train_tokens, self.vocabulary)
            eval_ids = None if eval_rows is None else token_ids(
                token_lists(eval_rows, cfg["column"], cfg["tokenizer"]), self.vocabulary)
        if eval_ids is None:
            cut = int(round(train_ids.size * (1 - float(cfg["eval_fraction"]))))
            train_ids, eval_ids = train_ids[:cut], train_ids[cut:]
        if train_ids.size < 2 or eval_ids.size < 1:
            raise ConfigError("task.path", cfg["path"], f"holds {train_ids.size} training and "
                              f"{eval_ids.size} eval tokens; give it more text")
        self.train_ids, self.eval_ids = train_ids, eval_ids
        self.max_length = int(train_ids.size)

    def _bpe_ids(self, train_rows: datasets.Dataset, eval_rows: datasets.Dataset | None,
                 vocabulary: Vocabulary | None) -> tuple[np.ndarray, np.ndarray | None]:
        """Learn the subwords (from the training part only), set the vocabulary, and return the
        training text's ids and the eval text's (None when the eval part is cut off later)."""
        cfg = self.config
        texts = [str(text) for text in train_rows[cfg["column"]]]
        learned_from = texts if eval_rows is not None else leading_text(
            texts, 1 - float(cfg["eval_fraction"]))
        tokenizer = learn_bpe(learned_from, cfg["vocab_size"])
        try:
            learned = Vocabulary(bpe_symbols(tokenizer))
        except ValueError as error:  # a learned subword spells a special token, e.g. "<pad>"
            raise ConfigError("task.tokenizer", "bpe", f"{error}; remove that text from the "
                              "corpus or use tokenizer 'char'") from None
        if vocabulary is not None and vocabulary != learned:
            raise ConfigError("task.path", cfg["path"], "the subwords learned from this text "
                              "differ from the run's vocabulary.json (the text or the tokenizers "
                              "version changed); evaluate on the text the run was trained on")
        self.vocabulary = learned

        def ids(rows: Sequence[str]) -> np.ndarray:
            pieces = bpe_ids(tokenizer, rows)
            flat = np.fromiter((i for piece in pieces for i in piece), np.int32)
            return flat + np.int32(learned.first_symbol_id)

        eval_ids = None if eval_rows is None else ids(
            [str(text) for text in eval_rows[cfg["column"]]])
        return ids(texts), eval_ids

    def _check_column(self, rows: datasets.Dataset, where: str) -> None:
        if self.config["column"] not in rows.column_names:
            raise ConfigError("task.column", self.config["column"],
                              f"{where} has no such column; its columns are {rows.column_names}")

    @property
    def separator(self) -> str:
        return " " if self.config["tokenizer"] == "word" else ""

    def format_example(self, source_ids: Iterable[int], target_ids: Iterable[int]) -> str:
        """The window on one line, line breaks and tabs written as ``\\n`` and ``\\t``."""
        tokens = self.vocabulary.decode(target_ids)
        text = bpe_text(tokens) if self.config["tokenizer"] == "bpe" else self.separator.join(
            tokens)
        return text.replace("\\", "\\\\").replace("\n", "\\n").replace("\t", "\\t")

    # -- lengths -----------------------------------------------------------------------

    def widest(self, lengths: Iterable[int]) -> tuple[int, int]:
        return 0, max((int(n) for n in lengths), default=0)

    def max_lengths(self, keys: np.ndarray) -> tuple[int, int]:
        """Keys are ``[count, 2]`` rows of (length, start offset)."""
        return 0, int(np.max(keys[:, 0], initial=0))

    # -- examples ----------------------------------------------------------------------

    def draw_train_keys(self, rng: np.random.Generator, count: int,
                        train_lengths: Sequence[int], length_sampling: str) -> np.ndarray:
        low, high = check_length_range(train_lengths)
        if length_sampling == "per_batch":
            lengths = np.full(count, rng.integers(low, high + 1))
        elif length_sampling == "mixed":
            lengths = rng.integers(low, high + 1, size=count)
        else:
            raise ConfigError("data.length_sampling", length_sampling,
                              f"choose one of {LENGTH_SAMPLING}")
        starts = rng.integers(0, self.train_ids.size - lengths + 1)
        return np.stack([lengths, starts], axis=1).astype(np.int64)

    def make_examples(self, keys: np.ndarray, rng: np.random.Generator) -> Examples:
        keys = np.asarray(keys, dtype=np.int64).reshape(-1, 2)
        return self.windows(self.train_ids, keys[:, 0], keys[:, 1])

    def eval_examples(self, lengths: Sequence[int], samples_per_length: int,
                      seed: int) -> Examples:
        groups = []
        for n in (int(n) for n in lengths):
            windows = self.eval_ids.size // n
            if windows == 0:
                raise ConfigError("eval lengths", n, f"the eval text holds {self.eval_ids.size} "
                                  "tokens, fewer than one window; raise task.eval_tokens or "
                                  "give it more text")
            groups.append(self.windows(self.eval_ids, np.full(windows, n),
                                        np.arange(windows) * n))
        return Examples.concatenate(groups)

    @staticmethod
    def windows(ids: np.ndarray, lengths: np.ndarray, starts: np.ndarray) -> Examples:
        """Rows ``ids[start:start + length]`` as examples without a source, right-padded."""
        lengths = np.asarray(lengths, np.int32)
        count, columns = len(lengths), np.arange(int(lengths.max(initial=0)))
        real = columns < lengths[:, None]
        index = np.where(real, np.asarray(starts)[:, None] + columns, 0)
        return Examples(source=np.zeros((count, 0), np.int32),
                        source_lengths=np.zeros(count, np.int32),
                        target=np.where(real, ids[index], PAD_ID).astype(np.int32),
                        target_lengths=lengths, lengths=lengths)

    def fingerprint(self) -> dict[str, Any]:
        config = {k: v for k, v in self.config.items() if k != "cache_dir"}
        digest = Ragged(self.train_ids, np.array([0, self.train_ids.size])).digest()
        held_out = Ragged(self.eval_ids, np.array([0, self.eval_ids.size])).digest()
        return {**config, "vocabulary": list(self.vocabulary.tokens), "train": digest,
                "eval": held_out}
