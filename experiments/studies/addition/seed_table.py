"""python experiments/studies/addition/seed_table.py runs/addition_positions [...]

Per grid point of the finished addition sweep (each run's ``eval/eval.json``): decoded exact
match and output-token accuracy averaged with equal weight over the training lengths (1-10),
the lengths 15-25 and the lengths 30-40, mean ± std over seeds (per seed); then each arm
against every other (above / below where every seed is above / below every seed of the other,
else level: the claims table's rule).
"""

from __future__ import annotations

import itertools
import json
import statistics
import sys
from collections import defaultdict
from pathlib import Path

from pe_research.evaluation.finding import seed_order

RANGES = {"1-10": (1, 10), "15-25": (15, 25), "30-40": (30, 40)}
METRICS = ("exact_match", "output_token_accuracy")
COLUMNS = [f"{metric} {name}" for metric in METRICS for name in RANGES]


def run_scores(run_dir: Path) -> dict[str, float]:
    """``{"metric range": %}`` of one run."""
    rows = json.loads((run_dir / "eval" / "eval.json").read_text())["rows"]
    return {f"{metric} {name}": 100 * statistics.mean(row[metric] for row in rows
                                                      if low <= row["length"] <= high)
            for metric in METRICS for name, (low, high) in RANGES.items()}


def main(sweep_dirs: list[str]) -> None:
    points: dict[str, list[dict[str, float]]] = defaultdict(list)
    for sweep_dir in sweep_dirs:
        for run_dir in sorted(Path(sweep_dir).glob("*/seed_*")):
            if (run_dir / "eval" / "eval.json").exists():
                points[run_dir.parent.name].append(run_scores(run_dir))
    print("mean ± std over seeds (per seed), %\n")
    print("| point | " + " | ".join(COLUMNS) + " |")
    print("|---|" + "---:|" * len(COLUMNS))
    for point, runs in points.items():
        cells = [f"{statistics.mean(v):.1f} ± {statistics.stdev(v):.1f} "
                 f"({', '.join(f'{x:.1f}' for x in v)})"
                 for v in ([run[c] for run in runs] for c in COLUMNS)]
        print(f"| {point} | " + " | ".join(cells) + " |")
    print("\nevery seed against every seed:")
    for (a, runs_a), (b, runs_b) in itertools.permutations(points.items(), 2):
        marks = [f"{c} {seed_order([x[c] for x in runs_a], [x[c] for x in runs_b])}"
                 for c in COLUMNS]
        print(f"- {a} vs {b}: " + "; ".join(marks))


if __name__ == "__main__":
    main(sys.argv[1:])
