"""python experiments/studies/length_scaling/seed_table.py runs/length_scaling_copy [...]

Per seed and per grid point of finished sweeps (each run's ``eval/eval.json``): decoded exact
match and output-token accuracy averaged over the training lengths, the first lengths beyond
them (up to 1.5x the longest) and every evaluated length beyond; then, for each scheme, whether
each logit scaling is above or below plain softmax (every seed above or below every seed of
plain softmax) or neither (level).
"""

from __future__ import annotations

import json
import statistics
import sys
from collections import defaultdict
from pathlib import Path

from pe_research.evaluation.finding import seed_order

METRICS = ("exact_match", "output_token_accuracy")


def run_scores(run_dir: Path) -> dict[str, float]:
    """``{metric/range: %}`` of one run, ranges ``in`` (1..L), ``near`` (L+1..1.5L), ``beyond``."""
    result = json.loads((run_dir / "eval" / "eval.json").read_text())
    longest = max(result["train_lengths"])
    ranges = {"in": lambda n: n <= longest, "near": lambda n: longest < n <= 1.5 * longest,
              "beyond": lambda n: n > longest}
    scores = {}
    for metric in METRICS:
        for name, keep in ranges.items():
            values = [row[metric] for row in result["rows"] if keep(row["length"])]
            scores[f"{metric}/{name}"] = 100 * statistics.mean(values)
    return scores


def main(sweep_dirs: list[str]) -> None:
    for sweep_dir in map(Path, sweep_dirs):
        points: dict[str, list[dict[str, float]]] = defaultdict(list)
        for run_dir in sorted(sweep_dir.glob("*/seed_*")):
            points[run_dir.parent.name].append(run_scores(run_dir))
        print(f"\n{sweep_dir}: mean ± std over seeds (per seed), %")
        columns = [f"{m}/{r}" for m in METRICS for r in ("in", "near", "beyond")]
        print("| point | " + " | ".join(columns) + " |")
        print("|---|" + "---:|" * len(columns))
        for point, runs in points.items():
            cells = []
            for column in columns:
                values = [run[column] for run in runs]
                cells.append(f"{statistics.mean(values):.1f} ± {statistics.stdev(values):.1f} "
                             f"({', '.join(f'{v:.1f}' for v in values)})")
            print(f"| {point} | " + " | ".join(cells) + " |")
        print("\nagainst plain softmax of the same scheme (every seed against every seed):")
        for point, runs in points.items():
            scheme, scaling = point.split(",")
            if scaling.endswith("=none"):
                continue
            plain = points.get(f"{scheme},logit_scaling=none")
            if plain is None:
                continue
            marks = [f"{column} "
                     f"{seed_order([r[column] for r in runs], [r[column] for r in plain])}"
                     for column in columns]
            print(f"- {point}: " + "; ".join(marks))


if __name__ == "__main__":
    main(sys.argv[1:])
