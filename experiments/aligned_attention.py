"""Where a decoder-only model's outputs look, by length: the weight on the source token copied.

    python experiments/aligned_attention.py runs/t5_buckets_copy/num_buckets=16 \\
        --key model.pe.max_distance --values 32,128,1024,524288 --lengths 1:24 \\
        --out docs/figures/t5_aligned_attention_copy.png

Each positional argument is a group: a directory of runs (``seed_*``, as a sweep writes them) or
one run, decoder-only, of copy, reverse_string or duplicate_string. For every run, every value of
the eval-time key ``--key`` (none: the run as trained) and every length, ``--examples`` examples
of the run's frozen evaluation set go through the attention decomposition
(``analysis/decomposition.py``), and each layer and head gets its aligned weight: the mean weight
that the query predicting target token j puts on the source token that token j reproduces
(``analysis/alignment.py``).

A run's aligned head is the (layer, head) with the largest aligned weight at the longest training
length, with the run as trained; it is chosen once and followed at every length and value. Next
to it: where that head's largest weight sits (on the reproduced token or not, and the distance
back from the query it sits at most often), and decoded exact match at the same lengths
(``eval/<leaf>_<value>.json``, or ``eval/as_trained.json`` without ``--key``; kept and reused).
Prints per group and value, for each seed, where the aligned head's weight and exact match fall
most from one length to the next beyond training, and draws a figure: per group, the aligned
head's weight (left) and exact match (right) against length, one curve per value (mean over
seeds, thin lines: seeds), the training range marked; with one value and several groups
(schemes, say), one pair of panels with a curve per group. ``--json`` keeps every number.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.figure import Figure

from pe_research.analysis.decomposition import decompose
from pe_research.analysis.run_inputs import (
    evaluation_positions,
    example_batch,
    load_analysis_run,
)
from pe_research.cli.eval import parse_lengths
from pe_research.cli.script import run_script, write_outputs
from pe_research.core.errors import UsageError
from pe_research.data import covering_buckets
from pe_research.evaluation.plots import mark_training_range
from pe_research.evaluation.results import cached_exact_match
from pe_research.runs.run_dir import grid_point_runs, load_run_config

AS_TRAINED = "as trained"


# Source index that target token j reproduces, at task length n.
ALIGNED_SOURCE: dict[str, Callable[[int, int], int]] = {
    "copy": lambda n, j: j,
    "reverse_string": lambda n, j: n - 1 - j,
    "duplicate_string": lambda n, j: j % n,
}


def check_alignable(task: str, architecture: str) -> None:
    """A one-line UsageError unless the task has an aligned source and the model one stack."""
    if task not in ALIGNED_SOURCE:
        raise UsageError(f"task {task!r} has no aligned source token; aligned attention is "
                         f"defined for {', '.join(sorted(ALIGNED_SOURCE))}")
    if architecture != "decoder_only":
        raise UsageError(f"model.architecture={architecture!r}: aligned attention reads the "
                         "self-attention of a decoder-only model; give a decoder_only run")


def aligned_pairs(batch: Mapping[str, Any], task: str,
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``(example, query, key, target)`` index arrays, one entry per target token j before EOS:
    the joint-sequence slot predicting target token j, the source token's slot it reproduces,
    and j itself."""
    sources = np.asarray(batch["source_mask"], bool).sum(axis=-1)
    outputs = np.asarray(batch["target_mask"], bool).sum(axis=-1) - 1  # the last predicts EOS
    pairs = [(b, int(n) + j, ALIGNED_SOURCE[task](int(n), j), j)
             for b, (n, m) in enumerate(zip(sources, outputs, strict=True)) for j in range(int(m))]
    if not pairs:
        raise UsageError("the batch has no target tokens to align")
    return tuple(np.array(column) for column in zip(*pairs, strict=True))


def aligned_weights(sites: Sequence[Mapping[str, Any]], batch: Mapping[str, Any],
                    task: str) -> np.ndarray:
    """``[layers, H]``: mean over examples and target tokens of the weight that the query
    predicting target token j puts on its aligned source token (``sites``: ``decompose`` of a
    decoder-only model on ``batch``)."""
    examples, queries, keys, _ = aligned_pairs(batch, task)
    return np.stack([np.asarray(site["weights"])[examples, :, queries, keys].mean(axis=0)
                     for site in sites])


def pointer(sites: Sequence[Mapping[str, Any]], batch: Mapping[str, Any], task: str,
            layer: int, head: int) -> dict[str, Any]:
    """Where one head's largest weight sits, over the target queries of ``batch``: the fraction
    on the aligned source token, and the distance back from the query (in tokens) it sits at
    most often, with that distance's share."""
    examples, queries, keys, _ = aligned_pairs(batch, task)
    weights = np.asarray(sites[layer]["weights"])[examples, head, queries]  # [P, S]
    largest = np.argmax(weights, axis=-1)
    distances, counts = np.unique(queries - largest, return_counts=True)
    return {"on_aligned": float(np.mean(largest == keys)),
            "modal_distance": int(distances[np.argmax(counts)]),
            "modal_share": float(np.max(counts) / len(largest))}



def group_runs(group: Path) -> list[Path]:
    """The runs of ``group`` (its ``seed_*`` directories, or the run itself), checked."""
    runs = grid_point_runs(group)
    for run in runs:
        config = load_run_config(run, validate=False)
        check_alignable(config.task.name, config.model.architecture)
    return runs


def run_overrides(run: Path, key: str, value: str, lengths: tuple[int, ...]) -> list[str]:
    """``key=value`` (none as trained) and buckets wide enough for the longest length."""
    buckets = covering_buckets(load_run_config(run, validate=False).data.buckets,
                               2 * max(lengths) + 1)
    return ([] if value == AS_TRAINED else [f"{key}={value}"]) + [f"data.buckets={buckets}"]


def aligned_curve(run: Path, overrides: list[str], lengths: tuple[int, ...], examples: int,
                  head: tuple[int, int] | None = None,
                  ) -> tuple[np.ndarray, list[dict[str, Any]]]:
    """``[L, layers, H]`` aligned weights of ``run`` with ``overrides`` at ``lengths``, and
    where ``head``'s largest weight sits at each length (``alignment.pointer``; none without)."""
    loaded = load_analysis_run(run, "", overrides)
    curve, pointers = [], []
    for length in lengths:
        batch = example_batch(loaded, length, examples)
        source_positions, target_positions = evaluation_positions(loaded, batch)
        sites = decompose(loaded.model, batch, source_positions_BxS=source_positions,
                          target_positions_BxT=target_positions)
        task = loaded.config.task.name
        curve.append(aligned_weights(sites, batch, task))
        if head is not None:
            pointers.append(pointer(sites, batch, task, *head))
    return np.stack(curve), pointers


def trained_value(config: Any, key: str) -> str:
    """The run's own value of ``key`` (e.g. ``model.pe.max_distance``) as text, or ''."""
    if not key:
        return ""
    value = config
    for part in key.split("."):
        value = getattr(value, part, None)
    return "" if value is None else str(value)


def steepest_fall(x: np.ndarray, values: np.ndarray, beyond: np.ndarray) -> str:
    """``n=<length>: a → b`` where ``values`` falls most from one length to the next, beyond
    training."""
    falls = np.where(beyond[1:], values[:-1] - values[1:], -np.inf)
    at = int(np.argmax(falls)) + 1
    return f"n={x[at]}: {values[at - 1]:.2f} → {values[at]:.2f}"


def measure_group(group: Path, runs: list[Path], key: str, values: list[str],
                  lengths: tuple[int, ...], examples: int) -> dict[str, Any]:
    """Aligned heads, their curves and exact match for every run and value; prints the table."""
    config = load_run_config(runs[0], validate=False)
    low, high = (int(v) for v in config.data.train_lengths)
    if high not in lengths:
        raise UsageError(f"--lengths leaves out {high}, the longest training length of {group}, "
                         "where the aligned head is chosen")
    if max(lengths) <= high:
        raise UsageError(f"--lengths stops at {max(lengths)}: give at least one length beyond "
                         f"{high}, the longest training length of {group}")
    x = np.array(lengths)
    heads = {}
    for run in runs:  # the aligned head, chosen once with the run as trained
        trained = aligned_curve(run, run_overrides(run, "", AS_TRAINED, (high,)), (high,),
                                examples)[0][0]
        heads[run] = tuple(int(i) for i in np.unravel_index(int(np.argmax(trained)),
                                                             trained.shape))
    title = (f"{config.task.name}, {config.model.pe.type}, {group.parent.name}/{group.name} "
             f"({len(runs)} seed{'s' if len(runs) > 1 else ''})")
    print(f"\n{group}: {title}; aligned head (layer, head) per seed: "
          + ", ".join(f"{run.name} {heads[run]}" for run in runs))
    leaf = key.rsplit(".", 1)[-1]
    print(f"| {leaf or 'run'} | seed | aligned weight at {high} | aligned weight falls most "
          "| exact match falls most (%) |")
    print("|---|---|---:|---|---|")
    entry = {"title": title, "task": config.task.name, "train_lengths": [low, high],
             "trained_value": trained_value(config, key),
             "aligned_heads": {run.name: list(heads[run]) for run in runs}, "runs": {}}
    for value in values:
        for run in runs:
            overrides = run_overrides(run, key, value, lengths)
            curve, pointers = aligned_curve(run, overrides, lengths, examples, heads[run])
            name = "as_trained" if value == AS_TRAINED else f"{leaf}_{value}"
            match = 100 * cached_exact_match(run, name, lengths, overrides)
            weight = curve[:, heads[run][0], heads[run][1]]
            entry["runs"].setdefault(run.name, {})[value] = {
                "aligned": curve.tolist(), "aligned_head": weight.tolist(),
                "pointer": pointers, "exact_match": match.tolist()}
            print(f"| {value} | {run.name} | {weight[x == high][0]:.2f} | "
                  f"{steepest_fall(x, weight, x > high)} | {steepest_fall(x, match, x > high)} |")
    print_pointers(entry, x, high)
    return entry


def print_pointers(entry: dict[str, Any], x: np.ndarray, high: int) -> None:
    """Where each aligned head's largest weight sits at the longest training length, and 4 and 8
    tokens beyond it (lengths measured only)."""
    shown = [n for n in (high, high + 4, high + 8) if n in x]
    print("aligned head's largest weight: on the reproduced token (%), and the distance back "
          "it sits at most often (share %):")
    for run_name, by_value in entry["runs"].items():
        for value, numbers in by_value.items():
            cells = [f"n={n}: {100 * p['on_aligned']:.0f} %, distance {p['modal_distance']} "
                     f"({100 * p['modal_share']:.0f} %)"
                     for n, p in zip(x, numbers["pointer"], strict=True) if n in shown]
            print(f"  {value}, {run_name}: " + "; ".join(cells))


def draw(record: dict[str, Any]) -> Figure:
    """Per group (a row; one shared row when there is one value and several groups), the
    aligned head's weight and exact match against length, a curve per value (or group)."""
    groups, values, key = record["groups"], record["values"], record["key"]
    shared = len(values) == 1 and len(groups) > 1
    rows = 1 if shared else len(groups)
    figure = Figure(figsize=(15 if shared else 12, 4.5 * rows), layout="constrained")
    panels = figure.subplots(rows, 2, squeeze=False)
    x = np.array(record["lengths"])
    for index, entry in enumerate(groups.values()):
        attention_axes, match_axes = panels[0 if shared else index]
        for value in values:
            label = entry["title"] if shared else (
                value if not key else f"{key.rsplit('.', 1)[-1]} {value}"
                + (" (trained)" if value == entry["trained_value"] else ""))
            for axes, field in ((attention_axes, "aligned_head"), (match_axes, "exact_match")):
                curves = np.array([run[value][field] for run in entry["runs"].values()])
                line, = axes.plot(x, curves.mean(axis=0), marker=".", label=label)
                for seed_curve in curves:
                    axes.plot(x, seed_curve, color=line.get_color(), alpha=0.3, linewidth=0.8)
        if shared and index < len(groups) - 1:
            continue
        title = "" if shared else entry["title"] + "\n"
        for axes in (attention_axes, match_axes):
            mark_training_range(axes, entry["train_lengths"])
            axes.set_xlabel("task length n (tokens)")
            if not shared:
                axes.legend(fontsize=8)
        if shared:  # one legend for both panels, beside them, over no curve
            match_axes.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.02, 1.0))
        attention_axes.set(title=f"{title}each seed's aligned head", ylim=(-0.02, 1.02),
                           ylabel="weight on the source token reproduced")
        match_axes.set(title=f"{title}decoded exact match", ylim=(-2, 102),
                       ylabel="decoded exact match (%)")
    figure.suptitle("Aligned attention and exact match (thick: mean over seeds; thin: seeds)")
    return figure


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("groups", nargs="+", type=Path, help="grid-point or run directories")
    parser.add_argument("--key", default="", help="an eval-time config key to vary, e.g. "
                        "model.pe.max_distance (default: none, the runs as trained)")
    parser.add_argument("--values", default="", help="values of --key, comma-separated")
    parser.add_argument("--lengths", default="1:24", help="task lengths: 1:24 or 1,2,8,16")
    parser.add_argument("--examples", type=int, default=64, help="examples per length")
    parser.add_argument("--out", type=Path, default=Path("aligned_attention.png"))
    parser.add_argument("--json", type=Path, help="write every number here")
    args = parser.parse_args()
    lengths = parse_lengths(args.lengths)
    values = [v.strip() for v in args.values.split(",") if v.strip()]
    if bool(args.key) != bool(values):
        raise UsageError("--key and --values go together, e.g. --key model.pe.max_distance "
                         "--values 128,1024; give both or neither")
    if args.examples < 1:
        raise UsageError(f"--examples {args.examples}: give a positive integer")
    values = values or [AS_TRAINED]
    groups = {group: group_runs(group) for group in args.groups}
    record = {"key": args.key or None, "values": values, "lengths": list(lengths),
              "groups": {str(group): measure_group(group, runs, args.key, values, lengths,
                                                   args.examples)
                         for group, runs in groups.items()}}
    write_outputs(draw(record), args.out, record, args.json)


if __name__ == "__main__":
    run_script(main)
