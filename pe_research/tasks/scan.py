"""SCAN (Lake & Baroni, 2018) from its official ``tasks_*.txt`` files, through ``datasets``.

Each line reads ``IN: <command words> OUT: <action words>``. The length of an example is
its number of output actions, so extrapolation curves are per output length: the
``length`` split trains on 1-22 actions and tests on 24-48; the ``simple`` split is a
random 80/20 split of all commands.
"""

from __future__ import annotations

import urllib.request
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import datasets

from pe_research.core.errors import ConfigError
from pe_research.tasks.dataset_task import (
    DatasetTask,
    build_vocabulary,
    encode_split,
    quiet_datasets,
)
from pe_research.tasks.vocabulary import Vocabulary

DEFAULT_SCAN_DIR = "data/scan"
SCAN_FILES = {
    "length": ("tasks_train_length.txt", "tasks_test_length.txt"),
    "simple": ("tasks_train_simple.txt", "tasks_test_simple.txt"),
}
SCAN_BASE_URL = "https://raw.githubusercontent.com/brendenlake/SCAN/master"


def fetch_command(directory: str | Path) -> str:
    return f"pe-research data scan --to {directory}"


def scan_files(scan_dir: str | Path, split: str) -> tuple[Path, Path]:
    """``(train file, test file)`` of a split; ConfigError naming the folder if missing."""
    if split not in SCAN_FILES:
        raise ConfigError("task.split", split, f"choose one of {sorted(SCAN_FILES)}")
    paths = tuple(Path(scan_dir).expanduser() / name for name in SCAN_FILES[split])
    missing = [p.name for p in paths if not p.is_file()]
    if missing:
        raise ConfigError("data.scan_dir", str(scan_dir),
                          f"{', '.join(missing)} not found there; run `{fetch_command(scan_dir)}` "
                          "or copy the tasks_*.txt files of github.com/brendenlake/SCAN there")
    return paths  # type: ignore[return-value]


def download_scan(directory: str | Path, splits: Sequence[str] = tuple(SCAN_FILES),
                  base_url: str = SCAN_BASE_URL, timeout: float = 60.0) -> list[Path]:
    """Fetch the official files of ``splits`` (``<base_url>/<split>_split/<file>``).

    Nothing is written unless every file arrived; raises OSError (URLError) otherwise.
    """
    fetched = {}
    for split in splits:
        for name in SCAN_FILES[split]:
            url = f"{base_url.rstrip('/')}/{split}_split/{name}"
            with urllib.request.urlopen(url, timeout=timeout) as response:
                fetched[name] = response.read()
    directory = Path(directory).expanduser()
    directory.mkdir(parents=True, exist_ok=True)
    written = []
    for name, data in fetched.items():
        partial = directory / (name + ".partial")
        partial.write_bytes(data)
        partial.replace(directory / name)
        written.append(directory / name)
    return written


def parse_line(line: str) -> tuple[list[str], list[str]]:
    """``'IN: jump twice OUT: I_JUMP I_JUMP'`` -> ``(['jump', 'twice'], ['I_JUMP', 'I_JUMP'])``."""
    if not line.startswith("IN: ") or " OUT: " not in line:
        raise ValueError(f"not a SCAN line (IN: ... OUT: ...): {line[:80]!r}")
    command, actions = line[4:].split(" OUT: ", 1)
    return command.split(), actions.split()


def _parse_batch(batch: dict) -> dict:
    pairs = [parse_line(line.strip()) for line in batch["text"] if line.strip()]
    return {"source_tokens": [p[0] for p in pairs], "target_tokens": [p[1] for p in pairs]}


class ScanTask(DatasetTask):
    """SCAN commands -> action sequences, word level, one vocabulary from the training split.

    Source: the command words; target: the action words; length: the number of actions.
    Example (length 2): ``jump twice -> I_JUMP I_JUMP``.
    ``data.train_lengths`` selects training rows by length: (1, 22) is the whole ``length``
    split, (1, 48) the whole ``simple`` split. 'mixed' sampling draws rows uniformly (the
    usual SCAN training); 'per_batch' draws a length uniformly, then rows of that length.
    """

    name = "scan"
    separator = " "

    @classmethod
    def default_config(cls) -> dict[str, Any]:
        return {"split": "length", "cache_dir": ""}

    @classmethod
    def from_config(cls, task_cfg: Mapping[str, Any], data_cfg: Mapping[str, Any],
                    vocabulary: Vocabulary | None = None) -> ScanTask:
        return cls(task_cfg, data_cfg.get("scan_dir") or DEFAULT_SCAN_DIR, vocabulary)

    def __init__(self, config: Mapping[str, Any], scan_dir: str | Path = DEFAULT_SCAN_DIR,
                 vocabulary: Vocabulary | None = None):
        super().__init__(config)
        train_file, test_file = scan_files(scan_dir, self.config["split"])
        with quiet_datasets():
            raw = datasets.load_dataset("text", data_files={"train": str(train_file),
                                                            "test": str(test_file)},
                                        cache_dir=self.config["cache_dir"] or None)
            try:
                tokens = raw.map(_parse_batch, batched=True, remove_columns=["text"])
            except ValueError as error:
                raise ConfigError("data.scan_dir", str(scan_dir), str(error)) from None
            vocabulary = vocabulary or build_vocabulary(tokens["train"], unknown=False)
            unseen = sorted(set(build_vocabulary(tokens["test"]).symbols)
                            - set(vocabulary.symbols))
            if unseen:
                raise ConfigError("data.scan_dir", str(scan_dir),
                                  f"test words not in the training split: {unseen[:10]}")
            self.setup(encode_split(tokens["train"], vocabulary, "target"),
                       encode_split(tokens["test"], vocabulary, "target"), vocabulary)
