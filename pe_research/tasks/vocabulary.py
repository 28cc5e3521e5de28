"""One token table shared by source and target: ids 0, 1, 2 are pad, bos, eos."""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from pathlib import Path

import numpy as np

from pe_research.core.atomic_files import atomic_write_text
from pe_research.core.errors import ConfigError

# Token ids every vocabulary reserves: padding, begin and end of the target sequence.
PAD_ID, BOS_ID, EOS_ID = 0, 1, 2
SPECIAL_TOKENS = ("<pad>", "<bos>", "<eos>")
UNK_TOKEN = "<unk>"
VOCABULARY_FILE = "vocabulary.json"


class Vocabulary:
    """Token strings <-> int ids. Task symbols start at id 3 (after pad, bos, eos).

    With ``unknown=True`` id 3 is ``<unk>`` and words outside the table map to it
    (text datasets, whose test split may hold words the training split lacks).
    """

    def __init__(self, symbols: Sequence[str], *, unknown: bool = False):
        specials = SPECIAL_TOKENS + ((UNK_TOKEN,) if unknown else ())
        tokens = specials + tuple(symbols)
        if len(set(tokens)) != len(tokens):
            raise ValueError(f"duplicate tokens in vocabulary: {tokens}")
        self.tokens: tuple[str, ...] = tokens
        self.unk_id: int | None = len(SPECIAL_TOKENS) if unknown else None
        self._ids = {token: i for i, token in enumerate(tokens)}

    pad_id, bos_id, eos_id = PAD_ID, BOS_ID, EOS_ID

    @property
    def size(self) -> int:
        return len(self.tokens)

    def __len__(self) -> int:
        return len(self.tokens)

    @property
    def first_symbol_id(self) -> int:
        """Id of the first task symbol: symbol k of the task has id ``first_symbol_id + k``."""
        return len(SPECIAL_TOKENS) + (self.unk_id is not None)

    @property
    def symbols(self) -> tuple[str, ...]:
        return self.tokens[self.first_symbol_id:]

    def __eq__(self, other: object) -> bool:
        return (isinstance(other, Vocabulary) and self.tokens == other.tokens
                and self.unk_id == other.unk_id)

    def __hash__(self) -> int:
        return hash(self.tokens)

    def __repr__(self) -> str:
        return f"Vocabulary(size={self.size}, symbols={list(self.symbols)[:12]})"

    def id_of(self, token: str) -> int:
        """The id of ``token``; ``<unk>`` for unknown words when the table has one."""
        if token in self._ids:
            return self._ids[token]
        if self.unk_id is None:
            raise KeyError(f"token {token!r} is not in {self!r}")
        return self.unk_id

    def encode(self, tokens: Iterable[str]) -> np.ndarray:
        """Token strings -> int32 ids ``[L]``."""
        return np.asarray([self.id_of(t) for t in tokens], dtype=np.int32)

    def decode(self, ids: Iterable[int], *, stop_at_eos: bool = True) -> list[str]:
        """Ids -> token strings, dropping pad and bos and (by default) stopping at eos."""
        out = []
        for i in (int(x) for x in ids):
            if i == EOS_ID and stop_at_eos:
                break
            if i not in (PAD_ID, BOS_ID):
                out.append(self.tokens[i])
        return out

    def to_json(self) -> dict:
        return {"tokens": list(self.tokens), "unk_id": self.unk_id}

    @classmethod
    def from_json(cls, data: dict) -> Vocabulary:
        tokens = list(data["tokens"])
        unknown = data.get("unk_id") is not None
        specials = len(SPECIAL_TOKENS) + unknown
        vocab = cls(tokens[specials:], unknown=unknown)
        if list(vocab.tokens) != tokens:
            raise ValueError(f"not a vocabulary file: special tokens {tokens[:specials]}")
        return vocab

    def save(self, path: str | Path) -> Path:
        """Write the table as JSON (a run directory keeps it beside config.json)."""
        path = Path(path)
        if path.is_dir():
            path = path / VOCABULARY_FILE
        atomic_write_text(path, json.dumps(self.to_json(), indent=1))
        return path

    @classmethod
    def load(cls, path: str | Path) -> Vocabulary:
        """Read a table written by ``save`` (a file, or a run directory holding one)."""
        path = Path(path)
        if path.is_dir():
            path = path / VOCABULARY_FILE
        if not path.exists():
            raise ConfigError("vocabulary", str(path), "no such file; it is written by training")
        return cls.from_json(json.loads(path.read_text()))
