"""Where an encoder-only model's answer slot looks, by length: its head on the last or first token.

    python experiments/studies/regular_tasks/answer_attention.py \\
        'runs/rpe_neos/pe.type=rope,max_position=128,...' \\
        'runs/rpe_neos/pe.type=sinusoidal,max_position=128,...' --lengths 10,20,40,60,100 \\
        --out docs/figures/randomized_pe_far_end_heads.png

Each positional argument is a group: a sweep's grid-point directory (``seed_*``) or one run,
encoder-only. For every run, the head whose weight from the first answer slot onto the last
input token (``--token first``: the first) is largest at the longest training length is chosen
once (``analysis/answer_slot.py``) and followed at every length: its weight on that token, on
the three at that end, and the mean position it attends to, next to the token's position. Each
length
averages ``--draws`` position draws (randomized runs draw as evaluation does, from their own
range; ``--plain`` gives every run positions 0 .. n-1 instead) of ``--examples`` examples from
the run's frozen evaluation set. Beside them: output-token accuracy at the same lengths
(``eval/eval.json`` when it holds them, else evaluated and kept under ``eval/answer_attention``),
and, for randomized runs, where the last input token sat in training (a simulation of the
training draws: its 99th percentile). Prints a table per group and draws a figure: per group, the
head's weight on its token, the position it attends to, and accuracy against length (mean over
seeds, thin lines: seeds), the training range marked. ``--json`` keeps every number.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from matplotlib.figure import Figure

from pe_research.analysis.decomposition import decompose
from pe_research.analysis.run_inputs import example_batch, load_analysis_run
from pe_research.cli.eval import parse_lengths
from pe_research.cli.script import run_script, write_outputs
from pe_research.core.errors import UsageError
from pe_research.data import covering_buckets
from pe_research.evaluation.plots import mark_training_range
from pe_research.evaluation.results import evaluate_and_write, read_rows
from pe_research.model import single_stack
from pe_research.model.inputs import batch_positions
from pe_research.positional.randomize import randomize_settings
from pe_research.runs.run_dir import grid_point_runs, load_run_config

PLAIN = "model.pe.randomize.eval_policy=plain"
FIELDS = ("last", "last3", "first", "first3", "attended_position", "last_position",
          "first_position", "slot_position")
TOKENS = ("last", "first")


def slot_rows(sites: Sequence[Mapping[str, Any]], batch: Mapping[str, Any]) -> np.ndarray:
    """``[B, layers, H, W]``: the first answer slot's softmax weights over the joint sequence
    (``sites``: ``decompose`` of an encoder-only model on ``batch``)."""
    slot_B = np.asarray(batch["source_mask"], bool).sum(axis=-1)
    rows = np.arange(len(slot_B))
    return np.stack([np.asarray(site["weights"])[rows, :, slot_B, :] for site in sites], axis=1)


def end_indices(batch: Mapping[str, Any]) -> tuple[np.ndarray, np.ndarray]:
    """Joint-sequence indices ``[B]`` of each example's first and last input token."""
    count = np.asarray(batch["source_mask"], bool).sum(axis=-1)
    return np.zeros_like(count), count - 1


def joint_positions(batch: Mapping[str, Any], source_positions: Any,
                    target_positions: Any) -> np.ndarray:
    """``[B, W]`` position of every joint-sequence slot, as the model packs them
    (``single_stack.joint_positions`` of what ``batch_positions`` gives), one row per example."""
    joint = single_stack.joint_positions(jnp.asarray(source_positions),
                                         jnp.asarray(target_positions))
    return np.broadcast_to(np.asarray(joint), (np.asarray(batch["source"]).shape[0],
                                               joint.shape[1]))


def head_on(rows_BxLxHxW: np.ndarray, token_B: np.ndarray) -> tuple[int, int]:
    """The (layer, head) whose mean weight on the joint-sequence slots ``token_B`` (one per
    example: the first or the last input token) is largest."""
    on_token = rows_BxLxHxW[np.arange(len(token_B)), :, :, token_B].mean(axis=0)
    layer, head = np.unravel_index(int(np.argmax(on_token)), on_token.shape)
    return int(layer), int(head)


def follow_head(rows_BxLxHxW: np.ndarray, head: tuple[int, int], first_B: np.ndarray,
                last_B: np.ndarray, positions_BxW: np.ndarray) -> dict[str, float]:
    """One head's mean weight on the last token, on the last three, on the first, on the first
    three, the mean position it attends to, and the two ends' and the slot's mean positions."""
    weights = rows_BxLxHxW[:, head[0], head[1], :]
    rows = np.arange(len(last_B))
    keys = np.arange(weights.shape[1])[None, :]
    last3 = (keys >= (last_B - 2)[:, None]) & (keys <= last_B[:, None])
    first3 = (keys >= first_B[:, None]) & (keys <= np.minimum(first_B + 2, last_B)[:, None])
    return {"last": float(weights[rows, last_B].mean()),
            "last3": float((weights * last3).sum(axis=-1).mean()),
            "first": float(weights[rows, first_B].mean()),
            "first3": float((weights * first3).sum(axis=-1).mean()),
            "attended_position": float((weights * positions_BxW).sum(axis=-1).mean()),
            "last_position": float(positions_BxW[rows, last_B].mean()),
            "first_position": float(positions_BxW[rows, first_B].mean()),
            "slot_position": float(positions_BxW[rows, last_B + 1].mean())}


def trained_last_positions(max_position: int, lengths: Sequence[int], slots_after: int,
                           draws: int, seed: int = 0) -> np.ndarray:
    """Positions the last input token takes in training with randomized positions: for each
    length n (equally often), ``draws`` sorted draws of n + ``slots_after`` distinct positions
    from ``[0, max_position)``, the n-th smallest of each; ``[len(lengths) * draws]``."""
    rng = np.random.default_rng(seed)
    found = []
    for n in lengths:
        scores = rng.random((draws, max_position))
        chosen = np.sort(np.argsort(scores, axis=1)[:, :n + slots_after], axis=1)
        found.append(chosen[:, n - 1])
    return np.concatenate(found)



def group_runs(group: Path) -> list[Path]:
    """The runs of ``group`` (its ``seed_*`` directories, or the run itself), encoder-only."""
    runs = grid_point_runs(group)
    for run in runs:
        architecture = load_run_config(run, validate=False).model.architecture
        if architecture != "encoder_only":
            raise UsageError(f"{run}: model.architecture={architecture!r}; the answer slot's "
                             "attention is measured in encoder_only runs")
    return runs


def head_numbers(loaded: Any, lengths: tuple[int, ...], examples: int, draws: int, token: str,
                 head: tuple[int, int] | None) -> tuple[tuple[int, int], dict[str, np.ndarray]]:
    """The head followed (the one on ``token`` at ``lengths[0]`` when ``head`` is None) and its
    ``FIELDS`` ``[L]`` at ``lengths``, each the mean over ``draws`` position draws."""
    pe, architecture = loaded.config.model.pe.to_dict(), loaded.config.model.architecture
    found = {field: [] for field in FIELDS}
    for length in lengths:
        batch = example_batch(loaded, length, examples)
        first, last = end_indices(batch)
        per_draw = []
        for draw in range(draws):
            key = jax.random.fold_in(jax.random.key(loaded.config.seed), draw)
            source_positions, target_positions = batch_positions(pe, batch, key, False,
                                                                 architecture)
            sites = decompose(loaded.model, batch, source_positions_BxS=source_positions,
                              target_positions_BxT=target_positions)
            rows = slot_rows(sites, batch)
            head = head_on(rows, last if token == "last" else first) if head is None else head
            positions = joint_positions(batch, source_positions, target_positions)
            per_draw.append(follow_head(rows, head, first, last, positions))
        for field in FIELDS:
            found[field].append(float(np.mean([numbers[field] for numbers in per_draw])))
    return head, {field: np.array(values) for field, values in found.items()}


def accuracy(run: Path, lengths: tuple[int, ...], overrides: list[str]) -> np.ndarray:
    """Output-token accuracy ``[L]`` (%): from ``eval/eval.json`` (``--plain``:
    ``eval/plain_positions.json``) when it holds every length, else from or into
    ``eval/answer_attention[_plain].json``."""
    plain = PLAIN in overrides
    kept, own = (("plain_positions", "answer_attention_plain") if plain
                 else ("eval", "answer_attention"))
    rows = read_rows(run, kept, lengths, overrides) or read_rows(run, own, lengths, overrides)
    if rows is None:
        _, result, _ = evaluate_and_write(run, lengths=lengths, name=own, overrides=overrides)
        return 100 * np.array([row.output_token_accuracy for row in result.rows])
    return 100 * np.array([row["output_token_accuracy"] for row in rows])


def measure_group(group: Path, runs: list[Path], lengths: tuple[int, ...], examples: int,
                  draws: int, plain: bool, token: str) -> dict[str, Any]:
    """Every run's head, its numbers and accuracy at ``lengths``; prints the group's table."""
    config = load_run_config(runs[0], validate=False)
    low, high = (int(v) for v in config.data.train_lengths)
    if high not in lengths or max(lengths) <= high:
        raise UsageError(f"--lengths must hold {high}, the longest training length of {group}, "
                         "where the head is chosen, and a length beyond it")
    max_position, _ = randomize_settings(config.model.pe.to_dict())
    base = config.model.pe.get("base")  # DAPE names the scheme it corrects
    pe_name = config.model.pe.type + (f" over {base}" if base else "") + (
        f", randomized over [0, {max_position})" if max_position else ", plain positions")
    entry = {"title": f"{config.task.name}, {pe_name}", "train_lengths": [low, high],
             "runs": {}}
    for run in runs:
        overrides = [f"data.buckets={covering_buckets(config.data.buckets, 2 * max(lengths) + 2)}",
                     *([PLAIN] if plain else [])]
        loaded = load_analysis_run(run, "", overrides)
        head, _ = head_numbers(loaded, (high,), examples, draws, token, None)
        _, numbers = head_numbers(loaded, lengths, examples, draws, token, head)
        entry["runs"][run.name] = {"head": list(head), "accuracy": accuracy(
            run, lengths, overrides).tolist(), **{k: v.tolist() for k, v in numbers.items()}}
    if max_position and not plain and token == "last":
        slots_after = int(np.asarray(example_batch(loaded, high, 1)["target_mask"]).sum())
        trained = trained_last_positions(max_position, range(low, high + 1), slots_after, 4000)
        entry["trained_last_position_p99"] = float(np.percentile(trained, 99))
    print(f"\n{group}: {entry['title']}"
          + (f"; last token's position in training, 99th percentile "
             f"{entry['trained_last_position_p99']:.0f}" if "trained_last_position_p99" in entry
             else ""))
    print(f"| seed | head (layer, head) | n | weight on {token} | on {token} 3 | attends to "
          f"position | {token} token at | accuracy (%) |")
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    for name, numbers in entry["runs"].items():
        for i, n in enumerate(lengths):
            print(f"| {name} | {tuple(numbers['head'])} | {n} | {numbers[token][i]:.2f} | "
                  f"{numbers[token + '3'][i]:.2f} | {numbers['attended_position'][i]:.1f} | "
                  f"{numbers[token + '_position'][i]:.1f} | {numbers['accuracy'][i]:.0f} |")
    return entry


def draw(record: dict[str, Any]) -> Figure:
    """Three panels, a curve per group: weight on the followed token, the position attended
    (with the token's, dashed), and output-token accuracy."""
    figure = Figure(figsize=(16, 4.8), layout="constrained")
    weight_axes, position_axes, accuracy_axes = figure.subplots(1, 3)
    x, token = np.array(record["lengths"]), record["token"]
    for entry in record["groups"].values():
        runs = entry["runs"].values()
        for axes, field in ((weight_axes, token), (position_axes, "attended_position"),
                            (accuracy_axes, "accuracy")):
            curves = np.array([run[field] for run in runs])
            line, = axes.plot(x, curves.mean(axis=0), marker=".", label=entry["title"])
            for curve in curves:
                axes.plot(x, curve, color=line.get_color(), alpha=0.3, linewidth=0.8)
            if field == "attended_position":
                axes.plot(x, np.mean([run[f"{token}_position"] for run in runs], axis=0), "--",
                          color=line.get_color(), linewidth=1)
            if field == "attended_position" and "trained_last_position_p99" in entry:
                axes.axhline(entry["trained_last_position_p99"], color=line.get_color(),
                             linestyle=":", linewidth=1)
    train_lengths = next(iter(record["groups"].values()))["train_lengths"]
    for axes in (weight_axes, position_axes, accuracy_axes):
        mark_training_range(axes, train_lengths)
        axes.set_xlabel("task length n (tokens)")
    weight_axes.set(title=f"the answer slot's head on the {token} input token",
                    ylim=(-0.02, 1.02), ylabel=f"weight on the {token} input token")
    trained = any("trained_last_position_p99" in entry for entry in record["groups"].values())
    position_axes.set(title=f"position it attends to (solid), the {token} token's (dashed)"
                            + (",\n99th percentile of the last token's in training (dotted)"
                               if trained else ""), ylabel="position")
    accuracy_axes.set(title="output-token accuracy", ylim=(-2, 102), ylabel="accuracy (%)")
    accuracy_axes.legend(fontsize=8, loc="lower left")
    positions = "plain positions 0 .. n-1" if record["plain"] else "positions as evaluated"
    figure.suptitle(f"The answer slot's {token}-token head ({positions}; thick: mean over "
                    "seeds, thin: seeds)")
    return figure


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("groups", nargs="+", type=Path, help="grid-point or run directories")
    parser.add_argument("--lengths", default="10,20,40,60,100",
                        help="task lengths: 10,20,40 or 10:100:10; must hold the longest "
                             "training length")
    parser.add_argument("--examples", type=int, default=32, help="examples per length")
    parser.add_argument("--draws", type=int, default=4, help="position draws per length")
    parser.add_argument("--token", choices=TOKENS, default="last",
                        help="follow the head on the last input token or on the first")
    parser.add_argument("--plain", action="store_true",
                        help="positions 0 .. n-1 at every length instead of the runs' own")
    parser.add_argument("--out", type=Path, default=Path("answer_attention.png"))
    parser.add_argument("--json", type=Path, help="write every number here")
    args = parser.parse_args()
    if args.examples < 1 or args.draws < 1:
        raise UsageError(f"--examples {args.examples} --draws {args.draws}: give positive "
                         "integers")
    lengths = parse_lengths(args.lengths)
    groups = {group: group_runs(group) for group in args.groups}
    record = {"lengths": list(lengths), "plain": args.plain, "token": args.token,
              "groups": {str(group): measure_group(group, runs, lengths, args.examples,
                                                   args.draws, args.plain, args.token)
                         for group, runs in groups.items()}}
    write_outputs(draw(record), args.out, record, args.json)


if __name__ == "__main__":
    run_script(main)
