"""python experiments/studies/addition/seed_table.py runs/addition_positions

Per grid point of the finished addition sweep (each run's ``eval/eval.json``): decoded exact
match averaged with equal weight over the training lengths (1-10), the lengths 15-25 and the
lengths 30-40, mean ± std over seeds (per seed); then each arm against every other (above /
below where every seed is above / below every seed of the other, else level: the claims
table's rule).
"""

from __future__ import annotations

import itertools
import json
import statistics
import sys
from collections import defaultdict
from pathlib import Path

RANGES = {"1-10": (1, 10), "15-25": (15, 25), "30-40": (30, 40)}


def run_scores(run_dir: Path) -> dict[str, float]:
    """``{range: exact match %}`` of one run."""
    rows = json.loads((run_dir / "eval" / "eval.json").read_text())["rows"]
    return {name: 100 * statistics.mean(row["exact_match"] for row in rows
                                        if low <= row["length"] <= high)
            for name, (low, high) in RANGES.items()}


def verdict(values: list[float], other: list[float]) -> str:
    """``above`` / ``below`` when every seed is above / below every seed of ``other``."""
    if min(values) > max(other):
        return "above"
    if max(values) < min(other):
        return "below"
    return "level"


def main(sweep_dir: str) -> None:
    points: dict[str, list[dict[str, float]]] = defaultdict(list)
    for run_dir in sorted(Path(sweep_dir).glob("*/seed_*")):
        points[run_dir.parent.name].append(run_scores(run_dir))
    print("exact match, mean ± std over seeds (per seed), %\n")
    print("| point | " + " | ".join(RANGES) + " |")
    print("|---|" + "---:|" * len(RANGES))
    for point, runs in points.items():
        cells = [f"{statistics.mean(v):.1f} ± {statistics.stdev(v):.1f} "
                 f"({', '.join(f'{x:.1f}' for x in v)})"
                 for v in ([run[r] for run in runs] for r in RANGES)]
        print(f"| {point} | " + " | ".join(cells) + " |")
    print("\nevery seed against every seed:")
    for (a, runs_a), (b, runs_b) in itertools.permutations(points.items(), 2):
        marks = [f"{r} {verdict([x[r] for x in runs_a], [x[r] for x in runs_b])}"
                 for r in RANGES]
        print(f"- {a} vs {b}: " + "; ".join(marks))


if __name__ == "__main__":
    main(sys.argv[1])
