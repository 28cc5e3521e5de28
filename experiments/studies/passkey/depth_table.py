"""python experiments/studies/passkey/depth_table.py runs/passkey \
    --out docs/figures/passkey_depth_grid.png

The passkey study's length x depth grids (the sweep of passkey_cpu.py): every run scored with
the key at each depth (evaluation/depth_grid.py), RoPE also under each test-time extension.
Prints, per scheme and setting, exact match of the key (mean over seeds) per length averaged
over depths, the per-seed mean over lengths beyond training, and each setting's verdict against
plain RoPE there (above / below: every seed above / below every seed); draws one heatmap per
scheme and setting.
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

import numpy as np

from pe_research.evaluation.depth_grid import depth_grid, plot_depth_grids

TRAIN_LENGTH = 48  # filler characters; about 64 positions with the key, SEP and the answer
LENGTHS = (24, 48, 96, 160, 256)
DEPTHS = (0.0, 0.25, 0.5, 0.75, 1.0)
# RoPE's settings for 256 filler characters (about 4x the trained sequence): PI and YaRN at
# factor 4; Self-Extend by its authors' rule W + (N - W) / G within about 0.6 of the trained
# positions (16 + 254 / 12 = 37); sinks as StreamingLLM's 4, the cache as long as training's.
ROPE_SETTINGS: dict[str, tuple[str, ...]] = {
    "pi x4": ("model.pe.scaling.type=pi", "model.pe.scaling.factor=4"),
    "yarn x4": ("model.pe.scaling.type=yarn", "model.pe.scaling.factor=4",
                "model.pe.scaling.original_max_position=64"),
    "self_extend": ("model.pe.self_extend.group_size=12",
                    "model.pe.self_extend.neighbor_window=16"),
    "attention_sinks": ("model.pe.attention_sinks.sinks=4",
                        "model.pe.attention_sinks.window=60"),
}


def panels(sweep_dir: Path, schemes: list[str] | None = None,
           settings: list[str] | None = None) -> dict[str, list[np.ndarray]]:
    """Panel name -> one grid per seed (of the runs of ``schemes`` and RoPE's ``settings``,
    default all; ``none`` is RoPE without a setting)."""
    grids: dict[str, list[np.ndarray]] = {}
    for run_dir in sorted(sweep_dir.glob("*/seed_*")):
        scheme = json.loads((run_dir / "config.json").read_text())["model"]["pe"]["type"]
        if schemes and scheme not in schemes:
            continue
        chosen = {"": ()}
        if scheme == "rope":
            chosen.update({f" + {name}": overrides for name, overrides in ROPE_SETTINGS.items()})
            if settings:
                chosen = {suffix: overrides for suffix, overrides in chosen.items()
                          if (suffix.removeprefix(" + ") or "none") in settings}
        for suffix, overrides in chosen.items():
            name = "depth" + suffix.replace(" + ", "_").replace(" ", "")
            grids.setdefault(f"{scheme}{suffix}", []).append(
                depth_grid(run_dir, LENGTHS, DEPTHS, overrides, name=name))
    return grids


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("sweep_dir", type=Path)
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--scheme", action="append", default=None,
                        help="only the runs of this model.pe.type (repeatable): evaluate the "
                             "schemes in parallel processes, then run once without it")
    parser.add_argument("--setting", action="append", default=None,
                        help="only this RoPE setting ('none' or a key of ROPE_SETTINGS; "
                             "repeatable), likewise")
    args = parser.parse_args()
    grids = panels(args.sweep_dir, args.scheme, args.setting)
    if not grids:
        raise SystemExit(f"no runs under {args.sweep_dir}: run the sweep first")
    beyond = np.asarray(LENGTHS) > TRAIN_LENGTH
    print(f"exact match of the key (%), mean over {len(DEPTHS)} depths and the seeds; "
          f"trained on 1-{TRAIN_LENGTH} filler characters")
    print("| scheme | " + " | ".join(f"n={n}" for n in LENGTHS) + " | beyond, per seed |")
    print("|---|" + "---:|" * (len(LENGTHS) + 1))
    per_seed_beyond = {}
    for name, seeds in grids.items():
        mean = 100 * np.mean(seeds, axis=(0, 1))
        per_seed_beyond[name] = [100 * float(g[:, beyond].mean()) for g in seeds]
        print(f"| {name} | " + " | ".join(f"{v:.1f}" for v in mean) + " | "
              + ", ".join(f"{v:.1f}" for v in per_seed_beyond[name]) + " |")
    plain = per_seed_beyond.get("rope")
    if plain:
        print("\nbeyond training, against plain RoPE (every seed against every seed):")
        for name, values in per_seed_beyond.items():
            if name != "rope":
                mark = ("above" if min(values) > max(plain) else
                        "below" if max(values) < min(plain) else "level")
                print(f"- {name}: {statistics.mean(values):.1f} vs "
                      f"{statistics.mean(plain):.1f}: {mark}")
    if args.out:
        seeds = min(len(s) for s in grids.values())
        plot_depth_grids({name: np.mean(s, axis=0) for name, s in grids.items()}, LENGTHS,
                         DEPTHS, TRAIN_LENGTH, f"Passkey retrieval, decoder-only 4 layers "
                         f"d_model 64, trained on 1-{TRAIN_LENGTH} filler characters: exact "
                         f"match of the key, mean over {seeds} seeds", args.out)
        print(f"figure: {args.out}")


if __name__ == "__main__":
    main()
