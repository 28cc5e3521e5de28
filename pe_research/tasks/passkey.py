"""Passkey retrieval: a key hidden at a chosen depth in filler text, asked for at the end.

The test of context extension of Mohtashami & Jaggi 2023 ("Landmark Attention: Random-Access
Infinite Context Length for Transformers", authors' code epfml/landmark-attention
``llama/run_test.py``, ``generate_prompt``), used by position interpolation (Chen et al. 2023)
and later work, at the character level. Its length n is the number of filler characters: the
filler is the authors' sentence repeated ("The grass is green. The sky is blue. ..."), cut to
``round(depth * n)`` characters before the key and ``n - round(depth * n)`` after it (both cuts
start at the filler's beginning, as the authors' do). ``depth`` is drawn per example, uniform in
[``depth_min``, ``depth_max``]; evaluation at one depth sets both (test-time keys), and
``experiments/studies/passkey/depth_grid.py`` scores a run on a length x depth grid.

* ``format='tiny'`` (default, sized for small models): ``filler | 5 digits | filler ?`` ->
  the digits (``key_digits`` of them, uniform, leading zeros kept).
* ``format='paper'``: the authors' prompt, lines joined by newlines: the task description, the
  filler before, "The pass key is K. Remember it. K is the pass key.", the filler after, "What
  is the pass key? The pass key is" -> " K". K is uniform in 10000..50000 (the authors' 1..50000
  without the keys shorter than 5 digits, so that every prompt of a length has one width).

Exact match of the decoded key is the headline metric.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from pe_research.core.errors import ConfigError
from pe_research.tasks.algorithmic import AlgorithmicTask, Generated, check_int, digit_symbols

FILLER = "The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again."
DESCRIPTION = ("There is an important info hidden inside a lot of irrelevant text. Find it and "
               "memorize them. I will quiz you about the important information there.")
QUESTION = "What is the pass key? The pass key is"
PAPER_KEYS = (10_000, 50_000)
FORMATS = ("tiny", "paper")


def information_line(key: str) -> str:
    """The authors' needle around a key."""
    return f"The pass key is {key}. Remember it. {key} is the pass key."


class Passkey(AlgorithmicTask):
    """Retrieve a key hidden in n characters of filler (see the module docstring).

    Example (tiny, n=12, depth 0.5): ``The gr|40172|The gr? -> 40172``.
    """

    name, family = "passkey", "extra"
    test_time_keys = ("depth_min", "depth_max")

    @classmethod
    def default_config(cls) -> dict[str, Any]:
        return {"format": "tiny", "key_digits": 5, "depth_min": 0.0, "depth_max": 1.0}

    def check_config(self) -> None:
        if self.config["format"] not in FORMATS:
            raise ConfigError("task.format", self.config["format"], f"choose one of {FORMATS}")
        self.key_digits = check_int(self.config, "key_digits", 1)
        if self.config["format"] == "paper" and self.key_digits != 5:
            raise ConfigError("task.key_digits", self.key_digits,
                              "5 with format='paper' (the authors' keys up to 50000)")
        low, high = self.config["depth_min"], self.config["depth_max"]
        if not all(isinstance(d, int | float) and not isinstance(d, bool) for d in (low, high)) \
                or not 0 <= low <= high <= 1:
            raise ConfigError("task.depth_min", (low, high), "depths with 0 <= depth_min <= "
                              "depth_max <= 1 (the key's place in the filler, 0 first, 1 last)")

    def symbols(self) -> tuple[str, ...]:
        text = FILLER + ("|?" if self.config["format"] == "tiny" else
                         DESCRIPTION + information_line("") + QUESTION + "\n")
        return digit_symbols(10) + tuple(sorted(set(text) - set("0123456789")))

    def overhead(self) -> int:
        """Source characters beside the filler."""
        if self.config["format"] == "tiny":
            return self.key_digits + 3
        return len(DESCRIPTION) + len(information_line("0" * 5)) + len(QUESTION) + 4

    def source_length(self, n: int) -> int:
        return n + self.overhead()

    def max_target_length(self, n: int) -> int:
        return self.key_digits + (self.config["format"] == "paper")

    @staticmethod
    def filler_of(n: int) -> str:
        """The filler sentence repeated (joined by spaces, as the authors'), cut to ``n``."""
        return " ".join([FILLER] * (n // len(FILLER) + 1))[:n]

    def generate(self, rng: np.random.Generator, n: int, count: int) -> Generated:
        depths = rng.uniform(self.config["depth_min"], self.config["depth_max"], size=count)
        before = np.rint(depths * n).astype(int)
        if self.config["format"] == "tiny":
            keys = ["".join(map(str, row)) for row in
                    rng.integers(0, 10, size=(count, self.key_digits))]
        else:
            keys = [str(k) for k in rng.integers(PAPER_KEYS[0], PAPER_KEYS[1] + 1, size=count)]
        index = {symbol: i for i, symbol in enumerate(self.symbols())}
        filler = self.filler_of(n)
        sources, targets = [], []
        for key, cut in zip(keys, before, strict=True):
            if self.config["format"] == "tiny":
                text = f"{filler[:cut]}|{key}|{filler[:n - cut]}?"
                answer = key
            else:
                text = "\n".join([DESCRIPTION, filler[:cut], information_line(key),
                                  filler[:n - cut], QUESTION])
                answer = f" {key}"
            sources.append([index[c] for c in text])
            targets.append([index[c] for c in answer])
        return np.asarray(sources), np.asarray(targets), None
