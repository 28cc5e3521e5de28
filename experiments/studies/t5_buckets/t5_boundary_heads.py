"""Which heads carry T5's bucket boundary: exact match with one head's distances re-bucketed.

    python experiments/studies/t5_buckets/t5_boundary_heads.py \\
        runs/t5_buckets_copy/num_buckets=16 \\
        --max-distance 524288 --lengths 1:16 --out docs/figures/t5_boundary_heads_copy.png

T5 shares one ``[num_buckets, H]`` bias table across a stack's layers, and ``max_distance`` M
only decides which distances share a bucket (``positional/t5.py``). Changing M for the whole
model at evaluation moves where exact match breaks beyond training (``t5_max_distance.py``).
This script localises that effect: for every layer and head of a decoder-only or encoder-only
T5 run, only that head in that layer reads its bias with distances bucketed up to
``--max-distance`` (the table itself unchanged), and every other head keeps the trained M. Then
every head of one layer, and every head of every layer, which must equal evaluating with
``model.pe.max_distance`` set to the new M (checked: the script stops if it does not).

Prints per run the exact match in and beyond the training lengths as trained and with
everything moved, and the heads and layers whose move alone changes either by at least
``--show`` points; draws per run the change beyond training as a heatmap (rows: layers, columns:
heads; an extra column: the whole layer). ``--json`` keeps every per-length curve. The moved
heads are evaluated in memory, all with one compiled program (which heads move is data, not
structure); the run as trained and with the whole model moved are written to
(and reused from) ``eval/as_trained.json`` and ``eval/max_distance_<M>.json``, as
``t5_max_distance.py`` and ``aligned_attention.py`` name them.
"""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx
from matplotlib.figure import Figure
from tqdm import tqdm

from pe_research.cli.eval import parse_lengths
from pe_research.cli.script import run_script, write_outputs
from pe_research.core.errors import UsageError
from pe_research.data import covering_buckets
from pe_research.evaluation.group_summary import lengths_text, range_means
from pe_research.evaluation.range_eval import PROGRESS_DELAY_S, run_evaluator
from pe_research.evaluation.results import cached_exact_match
from pe_research.positional.t5 import T5Bias
from pe_research.runs.restore import LoadedRun, load_run
from pe_research.runs.run_dir import grid_point_runs, load_run_config

EVERY_HEAD = "all"


class MovedHeads(nnx.Variable):
    """Per-head flags ``[H]``: True reads the table under the moved max_distance (not a weight)."""


class RebucketedT5Bias(T5Bias):
    """The trained T5 bias whose heads flagged in ``moved_H`` read the table under another
    max_distance. The flags are data, so moving other heads changes no compiled program."""

    def __init__(self, trained: T5Bias, max_distance: int):
        config = {"num_buckets": trained.num_buckets, "max_distance": trained.max_distance,
                  "init_std": 0.0}
        super().__init__(config, d_model=trained.d_model, num_heads=trained.num_heads,
                         rngs=nnx.Rngs(0))
        self.encoder_table, self.decoder_table = trained.encoder_table, trained.decoder_table
        self.moved_max_distance = max_distance
        self.moved_H = MovedHeads(jnp.zeros(trained.num_heads, bool))

    def logit_bias(self, q_BxTxHxD, k_BxSxHxD, q_positions_BxT, k_positions_BxS, kind):
        trained = self.bias_at(self.max_distance, q_positions_BxT, k_positions_BxS, kind)
        moved = self.bias_at(self.moved_max_distance, q_positions_BxT, k_positions_BxS, kind)
        return jnp.where(self.moved_H[...][None, :, None, None], moved, trained)


def rebucketed_run(run: LoadedRun, max_distance: int) -> LoadedRun:
    """``run`` with a ``RebucketedT5Bias`` in every layer, no head moved; its ``params`` hold the
    flags too, so ``moved_params`` variants share one compiled evaluation."""
    model = run.model
    for layer in model.layers:
        layer.own_pe = nnx.data(RebucketedT5Bias(model.pe, max_distance))
    graphdef, params, rest = nnx.split(model, (nnx.Param, MovedHeads), ...)
    return dataclasses.replace(run, graphdef=graphdef, params=params, rest=rest)


def moved_params(run: LoadedRun, layers: tuple[int, ...], heads: tuple[int, ...]) -> Any:
    """The params of a ``rebucketed_run`` with ``heads`` of ``layers`` moved (``run`` intact)."""
    copied = jax.tree.map(lambda leaf: leaf, run.params)  # new Variables around the same arrays
    model = nnx.merge(run.graphdef, copied, run.rest)
    for layer in layers:
        flags = model.layers[layer].own_pe.moved_H
        flags[...] = flags[...].at[jnp.array(heads)].set(True)
    return copied


def check_run(run_dir: Path) -> None:
    """A one-line UsageError unless ``run_dir`` is a single-stack T5 run."""
    config = load_run_config(run_dir, validate=False)
    if config.model.pe.type != "t5" or config.model.architecture == "encoder_decoder":
        raise UsageError(f"{run_dir} is model.pe.type={config.model.pe.type!r}, "
                         f"model.architecture={config.model.architecture!r}; give a "
                         "decoder-only or encoder-only T5 run")


def measure_run(run_dir: Path, lengths: tuple[int, ...], max_distance: int) -> dict[str, Any]:
    """Exact match ``[L]`` (%) as trained, each head moved, each layer moved, all moved."""
    config = load_run_config(run_dir, validate=False)
    buckets = covering_buckets(config.data.buckets, 2 * max(lengths) + 1)
    run = rebucketed_run(load_run(run_dir, None, [f"data.buckets={buckets}"]), max_distance)
    count, heads = len(run.model.layers), run.config.model.num_heads
    every = tuple(range(heads))
    moves = [(tuple(range(count)), every, EVERY_HEAD)]  # (layers, heads, name)
    for layer in range(count):
        moves += [((layer,), (head,), f"{layer}:{head}") for head in every]
        moves.append(((layer,), every, f"{layer}:{EVERY_HEAD}"))
    evaluate = run_evaluator(run, lengths, progress=False)
    trained = (100 * cached_exact_match(run_dir, "as_trained", lengths,
                                        [f"data.buckets={buckets}"])).tolist()
    numbers = {"trained": trained, "moved": {}, "compilations": 0}
    for layers, moved, name in tqdm(moves, desc=f"{run_dir.name}: heads", unit="move",
                                    leave=False, delay=PROGRESS_DELAY_S, dynamic_ncols=True):
        result = evaluate(moved_params(run, layers, moved))
        numbers["moved"][name] = [100 * row.exact_match for row in result.rows]
        numbers["compilations"] += result.compilations
    numbers["all"] = numbers["moved"].pop(EVERY_HEAD)
    whole_model = 100 * cached_exact_match(
        run_dir, f"max_distance_{max_distance}", lengths,
        [f"model.pe.max_distance={max_distance}", f"data.buckets={buckets}"])
    if not np.allclose(numbers["all"], whole_model):
        raise AssertionError(f"{run_dir}: moving every head of every layer gives "
                             f"{numbers['all']}, model.pe.max_distance={max_distance} gives "
                             f"{whole_model.tolist()}")
    return numbers


def print_run(name: str, numbers: dict[str, Any], x: np.ndarray, high: int, show: float) -> None:
    """As trained, all moved, and every head or layer whose move changes a mean by ``show``."""
    inside, beyond = range_means(numbers["trained"], x, high)
    all_in, all_beyond = range_means(numbers["all"], x, high)
    print(f"  {name}: as trained {inside:.1f} % in training lengths, {beyond:.1f} % beyond; "
          f"every head moved {all_in:.1f} %, {all_beyond:.1f} %")
    changes = []
    for entry, curve in numbers["moved"].items():
        a, b = range_means(curve, x, high)
        changes.append((-b + beyond, entry, a - inside, b - beyond))
    moved = [c for c in sorted(changes) if max(abs(c[2]), abs(c[3])) >= show]
    for _, entry, d_inside, d_beyond in moved:
        print(f"    {entry:>6} moved: {d_inside:+6.1f} in, {d_beyond:+6.1f} beyond")


def draw(record: dict[str, Any]) -> Figure:
    """Per run (a panel), the change beyond training when one head (or layer) is moved."""
    x, panels_of = np.array(record["lengths"]), []
    for entry in record["groups"].values():
        panels_of += [(entry, name, numbers) for name, numbers in entry["runs"].items()]
    figure = Figure(figsize=(5.2 * len(panels_of), 4.2), layout="constrained")
    panels = figure.subplots(1, len(panels_of), squeeze=False)[0]
    image = None
    for (entry, name, numbers), axes in zip(panels_of, panels, strict=True):
        high = entry["train_lengths"][1]
        beyond = range_means(numbers["trained"], x, high)[1]
        columns = list(dict.fromkeys(e.split(":")[1] for e in numbers["moved"]))
        layers = 1 + max(int(e.split(":")[0]) for e in numbers["moved"])
        change = np.full((layers, len(columns)), np.nan)
        for e, curve in numbers["moved"].items():
            layer, column = e.split(":")
            change[int(layer), columns.index(column)] = range_means(curve, x, high)[1] - beyond
        image = axes.imshow(change, cmap="RdBu", vmin=-60, vmax=60, aspect="auto")
        axes.axvline(len(columns) - 1.5, color="black", linewidth=1)  # heads | whole layer
        for (i, j), value in np.ndenumerate(change):
            axes.text(j, i, f"{value:+.0f}", ha="center", va="center", fontsize=8)
        all_beyond = range_means(numbers["all"], x, high)[1]
        axes.set(title=f"{entry['title']}, {name}\nbeyond training ({lengths_text(x[x > high])}): "
                 f"{beyond:.0f} % as trained, {all_beyond:.0f} % all moved",
                 xticks=range(len(columns)),
                 xticklabels=[f"head {c}" if c != EVERY_HEAD else "layer" for c in columns],
                 yticks=range(layers), yticklabels=[f"layer {i}" for i in range(layers)])
        axes.title.set_fontsize(9)
    figure.colorbar(image, ax=panels, shrink=0.8, label="change in exact match (points)")
    figure.suptitle(f"T5: one head's distances bucketed up to max_distance "
                    f"{record['max_distance']}, the rest as trained")
    return figure


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("groups", nargs="+", type=Path, help="grid-point or run directories")
    parser.add_argument("--max-distance", type=int, default=524288,
                        help="the max_distance moved heads read their table under")
    parser.add_argument("--lengths", default="1:16", help="task lengths: 1:16 or 1,2,8,16")
    parser.add_argument("--show", type=float, default=5.0, help="print heads that move a mean "
                        "by at least this many points")
    parser.add_argument("--out", type=Path, default=Path("t5_boundary_heads.png"))
    parser.add_argument("--json", type=Path, help="write every number here")
    args = parser.parse_args()
    lengths = parse_lengths(args.lengths)
    x = np.array(lengths)
    record = {"max_distance": args.max_distance, "lengths": list(lengths), "groups": {}}
    for group in args.groups:
        runs = grid_point_runs(group)
        for run in runs:
            check_run(run)
        config = load_run_config(runs[0], validate=False)
        low, high = (int(v) for v in config.data.train_lengths)
        if not (x <= high).any() or not (x > high).any():
            raise UsageError(f"--lengths {args.lengths}: give lengths up to and beyond {high}, "
                             f"the longest training length of {group}")
        if args.max_distance <= config.model.pe.num_buckets // 2:
            raise UsageError(f"--max-distance {args.max_distance}: must exceed num_buckets / 2 "
                             f"= {config.model.pe.num_buckets // 2}")
        title = f"{config.task.name}, {group.name}, max_distance {config.model.pe.max_distance}"
        print(f"\n{group}: {title}, trained on {low}-{high}")
        entry = {"title": title, "train_lengths": [low, high], "runs": {}}
        for run in runs:
            entry["runs"][run.name] = measure_run(run, lengths, args.max_distance)
            print_run(run.name, entry["runs"][run.name], x, high, args.show)
        record["groups"][str(group)] = entry
    write_outputs(draw(record), args.out, record, args.json)


if __name__ == "__main__":
    run_script(main)
