"""python experiments/studies/rope_extension/window_table.py runs/rope_extension_lm \
    --out docs/figures/rope_extension_perplexity.png

Perplexity by window length of RoPE language models (the sweep of rope_lm_cpu.py) under each
test-time setting: none, position interpolation, YaRN, Self-Extend, attention sinks. Each run is
evaluated at its latest checkpoint under each setting (``eval/<setting>.json``, reused when it
holds every length with the same overrides). Prints the mean and per-seed perplexity per
length, each setting's verdict against plain RoPE at every length beyond training (below: every
seed below every seed of plain RoPE), and draws the figure.
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path

from matplotlib.figure import Figure

from pe_research.evaluation.plots import plain_numbers, save_figure
from pe_research.evaluation.results import cached_rows

TRAIN_LENGTH = 64
LENGTHS = (64, 128, 256, 512, 1024)
# Fixed settings, each chosen for the longest window (1,024 = 16 x 64): PI and YaRN at factor
# 16; Self-Extend's neighbour window and group by its authors' rule W + (N - W) / G within about
# half to two thirds of the trained length (16 + 1008 / 48 = 37); sinks as StreamingLLM's 4,
# with a cache as long as the training window.
LABELS = {"none": "none", "pi": "PI x16", "yarn": "YaRN x16",
          "self_extend": "Self-Extend (G 48, W 16)", "attention_sinks": "sinks (4 + 60 recent)"}
SETTINGS: dict[str, tuple[str, ...]] = {
    "none": (),
    "pi": ("model.pe.scaling.type=pi", "model.pe.scaling.factor=16"),
    "yarn": ("model.pe.scaling.type=yarn", "model.pe.scaling.factor=16",
             f"model.pe.scaling.original_max_position={TRAIN_LENGTH}"),
    "self_extend": ("model.pe.self_extend.group_size=48",
                    "model.pe.self_extend.neighbor_window=16"),
    "attention_sinks": ("model.pe.attention_sinks.sinks=4",
                        f"model.pe.attention_sinks.window={TRAIN_LENGTH - 4}"),
}


def perplexities(run_dir: Path, setting: str) -> dict[int, float]:
    rows = cached_rows(run_dir, f"window_{setting}", LENGTHS, SETTINGS[setting])
    return {int(row["length"]): float(row["perplexity"]) for row in rows}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("sweep_dir", type=Path)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    runs = sorted(args.sweep_dir.glob("*/seed_*"))
    if not runs:
        raise SystemExit(f"no runs under {args.sweep_dir}: run the sweep first")
    table = {setting: [perplexities(run, setting) for run in runs] for setting in SETTINGS}
    print(f"perplexity, mean over {len(runs)} seeds (per seed); trained on {TRAIN_LENGTH}")
    print("| setting | " + " | ".join(f"n={n}" for n in LENGTHS) + " |")
    print("|---|" + "---:|" * len(LENGTHS))
    for setting, per_run in table.items():
        cells = [f"{statistics.mean(r[n] for r in per_run):.2f} "
                 f"({', '.join(f'{r[n]:.2f}' for r in per_run)})" for n in LENGTHS]
        print(f"| {setting} | " + " | ".join(cells) + " |")
    print("\nagainst plain RoPE (every seed against every seed):")
    for setting, per_run in table.items():
        if setting == "none":
            continue
        marks = []
        for n in LENGTHS:
            values, plain = [r[n] for r in per_run], [r[n] for r in table["none"]]
            mark = ("below" if max(values) < min(plain) else
                    "above" if min(values) > max(plain) else "level")
            marks.append(f"n={n} {mark}")
        print(f"- {setting}: " + "; ".join(marks))
    if args.out:
        figure = Figure(figsize=(8.4, 4.2))
        axis = figure.add_subplot()
        for setting, per_run in table.items():
            means = [statistics.mean(r[n] for r in per_run) for n in LENGTHS]
            axis.plot(LENGTHS, means, marker="o", label=LABELS[setting])
        axis.axvline(TRAIN_LENGTH, color="gray", linestyle="--", label="training length")
        axis.set(xscale="log", yscale="log", xlabel="window length (characters)",
                 ylabel="perplexity (held-out, mean over seeds)",
                 title=f"RoPE char LM trained on {TRAIN_LENGTH}: test-time extensions "
                       f"({len(runs)} seeds)")
        axis.set_xticks(LENGTHS, [str(n) for n in LENGTHS])
        axis.yaxis.set_major_formatter(plain_numbers())
        axis.yaxis.set_minor_formatter(plain_numbers())
        axis.legend(loc="upper left", bbox_to_anchor=(1.02, 1.0), fontsize=8)
        figure.tight_layout()
        save_figure(figure, args.out)
        print(f"figure: {args.out}")


if __name__ == "__main__":
    main()
