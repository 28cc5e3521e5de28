"""Which attention heads a trained model needs, in and beyond training: exact match with each
head zeroed in turn.

    python experiments/head_ablation.py runs/t5_buckets_copy/num_buckets=16 --lengths 1:16 \\
        --out docs/figures/t5_head_ablation_copy.png

Each positional argument is a group: a directory of runs (``seed_*``, as a sweep writes them) or
one run, of any architecture and task. For every run and every attention head (each layer's
self-attention; in the encoder-decoder also cross-attention; ``--layers`` keeps some layers),
the run is evaluated over ``--lengths`` with that head zeroed (``model.ablated_heads``,
``model/ablation.py``: the head's output is 0, so no later layer reads it) and compared with the
run intact. The script zeroes the head's rows of the output projection instead, which is the
same model as a parameter change, so all of a run's ablations share one compiled program.
``--key``/``--value`` add one eval-time override to every evaluation, intact and ablated (e.g.
``--key model.pe.max_distance --value 524288``). Evaluations are written to the run's ``eval/``
(``ablate_<site>_<layer>_<head>[_<leaf>_<value>].json``, recorded with the equivalent
``model.ablated_heads`` override) and reused.

Heads are compared within a run only: head 2 of one seed has nothing to do with head 2 of another.
Prints per run the intact decoded exact match in and beyond the training lengths, and every head
whose ablation changes either by at least ``--show`` points, largest drop first; draws per run
the change in and beyond training as two heatmaps (rows: layers, columns: heads). ``--json``
keeps every per-length curve.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.figure import Figure
from tqdm import tqdm

from pe_research.cli.eval import parse_lengths
from pe_research.cli.script import run_script, write_outputs
from pe_research.core.errors import UsageError
from pe_research.data import covering_buckets
from pe_research.evaluation.group_summary import lengths_text, range_means
from pe_research.evaluation.range_eval import PROGRESS_DELAY_S, run_evaluator
from pe_research.evaluation.results import cached_exact_match, read_exact_match, write_results
from pe_research.model.ablation import (
    KEY,
    SINGLE_STACK_SITE,
    params_with_head_zeroed,
    site_layers,
)
from pe_research.runs.restore import load_run
from pe_research.runs.run_dir import grid_point_runs, load_run_config


def run_heads(config: Any, layers: tuple[int, ...] | None) -> list[tuple[str, int, int]]:
    """Every ``(site, layer, head)`` of the run's model, in ``layers`` when given."""
    model = config.model
    sites = site_layers(model.architecture, model.num_encoder_layers, model.num_decoder_layers)
    return [(site, layer, head) for site, count in sites.items() for layer in range(count)
            if layers is None or layer in layers for head in range(model.num_heads)]


def head_entry(site: str, layer: int, head: int) -> str:
    """The ``model.ablated_heads`` entry of one head: ``2:1`` or ``cross.0:3``."""
    return f"{layer}:{head}" if site == SINGLE_STACK_SITE else f"{site}.{layer}:{head}"


def row_label(site: str, layer: int) -> str:
    """A heatmap row's name: ``layer 2`` or ``cross 0``."""
    return f"layer {layer}" if site == SINGLE_STACK_SITE else f"{site} {layer}"


def measure_run(run_dir: Path, heads: list[tuple[str, int, int]], lengths: tuple[int, ...],
                override: str) -> dict[str, Any]:
    """Exact match ``[L]`` (%) intact and with each head ablated, under ``override``."""
    config = load_run_config(run_dir, validate=False)
    buckets = covering_buckets(config.data.buckets, 2 * max(lengths) + 1)
    base = ([override] if override else []) + [f"data.buckets={buckets}"]
    key, _, value = override.partition("=")
    suffix = f"_{key.rsplit('.', 1)[-1]}_{value}" if override else ""
    # The intact evaluation has the name aligned_attention.py gives it, so either reuses it.
    intact = 100 * cached_exact_match(run_dir, suffix[1:] or "as_trained", lengths, base)
    ablated, missing, compilations = {}, [], 0
    for site, layer, head in heads:
        entry = head_entry(site, layer, head)
        name, overrides = f"ablate_{site}_{layer}_{head}{suffix}", [*base, f"{KEY}={entry}"]
        cached = read_exact_match(run_dir, name, lengths, overrides)
        if cached is None:
            missing.append((site, layer, head, name, overrides))
        else:
            ablated[entry] = (100 * cached).tolist()
    if missing:
        # Zeroing a head's output rows is model.ablated_heads as a parameter change, so every
        # ablation shares one compiled program (tests/test_ablation.py checks the two agree).
        run = load_run(run_dir, None, base)
        evaluate = run_evaluator(run, lengths, progress=False)
        for site, layer, head, name, overrides in tqdm(
                missing, desc=f"{run_dir.name}: heads", unit="head", leave=False,
                delay=PROGRESS_DELAY_S, dynamic_ncols=True):
            result = evaluate(params_with_head_zeroed(run.graphdef, run.params, run.rest, site,
                                                      layer, head))
            write_results(run, result, name, overrides)
            compilations += result.compilations
            ablated[head_entry(site, layer, head)] = [100 * row.exact_match
                                                      for row in result.rows]
    return {"intact": intact.tolist(), "compilations": compilations,
            "ablated": {head_entry(*h): ablated[head_entry(*h)] for h in heads}}


def print_run(run: Path, numbers: dict[str, Any], x: np.ndarray, high: int, show: float) -> None:
    """The intact means and each head that moves either mean by at least ``show`` points."""
    inside, beyond = range_means(numbers["intact"], x, high)
    print(f"  {run.name}: intact {inside:.1f} % in training lengths, {beyond:.1f} % beyond")
    changes = []
    for entry, curve in numbers["ablated"].items():
        a, b = range_means(curve, x, high)
        changes.append((min(a - inside, b - beyond), entry, a - inside, b - beyond))
    moved = [c for c in sorted(changes) if max(abs(c[2]), abs(c[3])) >= show]
    for _, entry, d_inside, d_beyond in moved:
        print(f"    head {entry:>12}: {d_inside:+6.1f} in, {d_beyond:+6.1f} beyond")
    if not moved:
        print(f"    no head moves either mean by {show:g} points or more")


def draw(record: dict[str, Any]) -> Figure:
    """Per run (a row), the change in exact match in and beyond training, per layer and head."""
    x, rows = np.array(record["lengths"]), []
    for entry in record["groups"].values():
        rows += [(entry, name, numbers) for name, numbers in entry["runs"].items()]
    figure = Figure(figsize=(11, 0.5 + 2.8 * len(rows)), layout="constrained")
    panels = figure.subplots(len(rows), 2, squeeze=False)
    image = None
    for (entry, name, numbers), axes_pair in zip(rows, panels, strict=True):
        high = entry["train_lengths"][1]
        inside, beyond = range_means(numbers["intact"], x, high)
        labels = list(dict.fromkeys(e.rsplit(":", 1)[0] for e in numbers["ablated"]))
        heads = 1 + max(int(e.rsplit(":", 1)[1]) for e in numbers["ablated"])
        for column, (axes, part, intact) in enumerate(zip(
                axes_pair, ("in training lengths", "beyond training"), (inside, beyond),
                strict=True)):
            change = np.full((len(labels), heads), np.nan)
            for e, curve in numbers["ablated"].items():
                where, head = e.rsplit(":", 1)
                change[labels.index(where), int(head)] = range_means(curve, x, high)[column] \
                    - intact
            image = axes.imshow(change, cmap="RdBu", vmin=-100, vmax=100, aspect="auto")
            for (i, j), value in np.ndenumerate(change):
                axes.text(j, i, f"{value:+.0f}", ha="center", va="center", fontsize=8,
                          color="white" if abs(value) > 60 else "black")
            lengths = lengths_text(x[x <= high] if column == 0 else x[x > high])
            axes.set(title=f"{entry['title']}, {name}\n{part} ({lengths}), intact "
                     f"{intact:.0f} %", xticks=range(heads), yticks=range(len(labels)),
                     xlabel="head", yticklabels=[row_label(*_split(label)) for label in labels])
            axes.title.set_fontsize(9)
    figure.colorbar(image, ax=panels, shrink=0.6,
                    label="change in decoded exact match when the head is zeroed (points)")
    figure.suptitle("Head ablation: exact match with one head zeroed, minus intact"
                    + (f" ({record['override']})" if record["override"] else ""))
    return figure


def _split(label: str) -> tuple[str, int]:
    """``('self', 2)`` from ``2``; ``('cross', 0)`` from ``cross.0``."""
    site, _, layer = label.rpartition(".")
    return site or SINGLE_STACK_SITE, int(layer)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("groups", nargs="+", type=Path, help="grid-point or run directories")
    parser.add_argument("--lengths", default="1:16", help="task lengths: 1:16 or 1,2,8,16")
    parser.add_argument("--layers", default="", help="layers to ablate in, e.g. 0,1 "
                        "(default: every layer)")
    parser.add_argument("--key", default="", help="an eval-time config key applied to every "
                        "evaluation, e.g. model.pe.max_distance")
    parser.add_argument("--value", default="", help="the value of --key")
    parser.add_argument("--show", type=float, default=5.0, help="print heads that move a mean "
                        "by at least this many points")
    parser.add_argument("--out", type=Path, default=Path("head_ablation.png"))
    parser.add_argument("--json", type=Path, help="write every number here")
    args = parser.parse_args()
    lengths = parse_lengths(args.lengths)
    if bool(args.key) != bool(args.value):
        raise UsageError("--key and --value go together, e.g. --key model.pe.max_distance "
                         "--value 1024; give both or neither")
    try:
        layers = tuple(int(v) for v in args.layers.split(",") if v.strip()) or None
    except ValueError:
        raise UsageError(f"--layers {args.layers!r}: give layer numbers, e.g. 0,1") from None
    override = f"{args.key}={args.value}" if args.key else ""
    record = {"override": override, "lengths": list(lengths), "groups": {}}
    x = np.array(lengths)
    for group in args.groups:
        runs = grid_point_runs(group)
        config = load_run_config(runs[0], validate=False)
        low, high = (int(v) for v in config.data.train_lengths)
        if not (x <= high).any() or not (x > high).any():
            raise UsageError(f"--lengths {args.lengths}: give lengths up to and beyond {high}, "
                             f"the longest training length of {group}")
        heads = run_heads(config, layers)
        if not heads:
            raise UsageError(f"--layers {args.layers}: {group} has no such layer")
        title = f"{config.task.name}, {config.model.pe.type}, {group.name}"
        print(f"\n{group}: {title}, trained on {low}-{high}; {len(heads)} heads per run")
        entry = {"title": title, "train_lengths": [low, high], "runs": {}}
        for run in runs:
            entry["runs"][run.name] = measure_run(run, heads, lengths, override)
            print_run(run, entry["runs"][run.name], x, high, args.show)
        record["groups"][str(group)] = entry
    write_outputs(draw(record), args.out, record, args.json)


if __name__ == "__main__":
    run_script(main)
