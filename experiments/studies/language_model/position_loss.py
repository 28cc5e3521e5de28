"""Loss by position inside long windows: where a language model's perplexity beyond training goes.

    python experiments/studies/language_model/position_loss.py runs/language_model/pe.type=alibi \\
        runs/language_model/pe.type=rope --length 1024 --out docs/figures/position_loss.png

Each positional argument is a group: a directory of trained ``language_model`` runs (``seed_*``,
as a sweep writes them) or one run. Every run scores the eval windows of ``--length`` tokens (the
windows of ``pe-research eval``) and its cross-entropy is averaged over windows at every position
of the window. Attention is causal, so the prediction at position p reads tokens 0..p alone:
positions below the training length are scored exactly as in training-length windows, and the
rest is what the longer window adds. Prints, per group, the perplexity (e to the mean loss over
the seeds) in bands of positions, and draws the per-band curves with the training length marked.

Bands hold different text, so a band against another mixes context with text. The paired
columns do not: the tokens that the long windows give L or more tokens of context (L the
training length), each scored once with exactly L - 1 tokens of context (a window of L ending at
it: the most context training ever gave) and once in the long windows (``paired``: perplexity
with L - 1 tokens of context, in the long windows, and their ratio; below 1 the model uses
context beyond its training length). Every ``--every``-th such token is paired (each needs a
window of its own).

    python experiments/studies/language_model/position_loss.py \\
        --redraw docs/figures/position_loss.json \\
        --out docs/figures/position_loss.png      # the figure again from its numbers
"""

from __future__ import annotations

import argparse
import functools
import json
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx
from matplotlib.figure import Figure
from matplotlib.ticker import NullFormatter

from pe_research import data
from pe_research.cli.script import run_script, write_outputs
from pe_research.core.errors import UsageError
from pe_research.evaluation.plots import label_log_axis, plain_numbers
from pe_research.model.inputs import batch_positions, eval_position_key
from pe_research.runs.restore import LoadedRun, load_run
from pe_research.runs.run_dir import grid_point_runs, load_run_config
from pe_research.tasks.base import Examples

EDGES = (0, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096)


def group_runs(group: Path) -> list[Path]:
    """The language-model runs of ``group`` (its ``seed_*`` directories, or the run itself)."""
    runs = grid_point_runs(group)
    for run in runs:
        task = load_run_config(run, validate=False).task.name
        if task != "language_model":
            raise UsageError(f"{run} was trained on task {task!r}; give language_model runs")
    return runs


def window_losses(run: LoadedRun, examples: Examples, width: int, rows: int) -> np.ndarray:
    """Cross-entropy ``[len(examples), width]`` of every token of windows of ``width`` tokens,
    ``rows`` windows per forward pass (one compiled program per batch shape)."""
    pe, key = run.config.model.pe, eval_position_key(run.config.seed)
    parts = []
    for start in range(0, len(examples), rows):
        batch = data.make_batch(examples.take(np.arange(start, min(start + rows,
                                                                   len(examples)))),
                                0, width + 1)
        source_positions, target_positions = batch_positions(pe, batch, key, training=False,
                                                             architecture="decoder_only")
        inputs = {name: jnp.asarray(batch[name]) for name in
                  ("source", "target_input", "source_mask", "target_mask", "target_output")}
        parts.append(np.asarray(_token_losses(run.model, inputs, source_positions,
                                              target_positions, width)))
    return np.concatenate(parts)


@functools.partial(nnx.jit, static_argnames="width")
def _token_losses(model: nnx.Module, batch: dict[str, jax.Array], source_positions: jax.Array,
                  target_positions: jax.Array, width: int) -> jax.Array:
    """Cross-entropy ``[rows, width]`` of the first ``width`` target tokens of ``batch``."""
    logits = model(batch["source"], batch["target_input"], source_positions, target_positions,
                   batch["source_mask"], batch["target_mask"])
    return optax.softmax_cross_entropy_with_integer_labels(
        logits[:, :width].astype(jnp.float32), batch["target_output"][:, :width])


def token_losses(run: LoadedRun, length: int, rows: int = 8) -> np.ndarray:
    """Cross-entropy ``[windows, length]`` of every token of the eval windows of ``length``
    (window k holds held-out tokens k * length ... (k + 1) * length - 1)."""
    return window_losses(run, run.task.eval_examples([length], 0, run.config.seed), length, rows)


def last_token_losses(run: LoadedRun, ends: np.ndarray, width: int,
                      rows: int = 256) -> np.ndarray:
    """Cross-entropy ``[len(ends)]`` of held-out token ``t`` for each ``t`` in ``ends``, read
    from a window of ``width`` tokens ending at it (``width - 1`` tokens of context)."""
    windows = run.task.windows(run.task.eval_ids, np.full(len(ends), width), ends - width + 1)
    return window_losses(run, windows, width, rows)[:, -1]


def paired_losses(run: LoadedRun, long: np.ndarray, trained: int,
                  every: int = 1) -> tuple[float, float]:
    """Mean loss of the same tokens with ``trained - 1`` tokens of context and in the long
    windows whose losses are ``long`` (``token_losses``), over every ``every``-th token at
    long-window positions ``trained`` and beyond."""
    ends = np.flatnonzero(np.arange(long.size) % long.shape[1] >= trained)[::every]
    return (float(last_token_losses(run, ends, trained).mean()),
            float(long.reshape(-1)[ends].mean()))


def bands(length: int) -> list[tuple[int, int]]:
    """``[(0, 16), (16, 32), ...]`` up to ``length`` (the last band ends at ``length``)."""
    edges = sorted({e for e in EDGES if e < length} | {length})
    return list(zip(edges[:-1], edges[1:], strict=True))


def draw(record: dict, length: int, trained: set[int]) -> Figure:
    """Perplexity per band of positions, a step curve per group (log axes), training marked."""
    figure = Figure(figsize=(7.5, 4.2), layout="constrained")
    axes = figure.subplots()
    for name, numbers in record.items():
        spans = numbers["bands"]
        edges = [max(a, 1) for a, _ in spans] + [spans[-1][1]]  # position 0 drawn from 1
        axes.stairs(numbers["perplexity"], edges, baseline=None, label=name, linewidth=2)
    for high in sorted(trained):
        axes.axvline(high, color="0.4", linestyle=":", linewidth=1,
                     label=f"training length {high}")
    axes.set(xscale="log", xlim=(1, length),
             xlabel="position in the window (tokens; bands 0-15, 16-31, 32-63, ...)",
             ylabel="perplexity of the tokens at these positions",
             title=f"Perplexity by position in windows of {length} tokens (mean over seeds)")
    axes.xaxis.set_major_formatter(plain_numbers())
    axes.xaxis.set_minor_formatter(NullFormatter())
    label_log_axis(axes)
    axes.legend(fontsize=8, loc="upper left")
    return figure


def redraw(numbers: Path, out: Path) -> Figure:
    """Draw the figure again from a JSON this script wrote, without loading any run."""
    if not numbers.is_file():
        raise UsageError(f"--redraw {numbers}: no such file; give the .json written beside a "
                         "figure")
    record = json.loads(numbers.read_text())
    missing = [name for name, group in record.items() if "training_length" not in group]
    if missing:
        raise UsageError(f"--redraw {numbers}: no training_length for {', '.join(missing)}; "
                         "add it to each group (written since 2026-11-26)")
    length = max(group["bands"][-1][1] for group in record.values())
    trained = {int(group["training_length"]) for group in record.values()}
    figure = draw(record, length, trained)
    write_outputs(figure, out)
    return figure


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("groups", nargs="*", type=Path, help="grid-point or run directories")
    parser.add_argument("--redraw", type=Path, default=None,
                        help="a JSON this script wrote: draw its figure again (to --out)")
    parser.add_argument("--length", type=int, default=1024, help="window length (tokens)")
    parser.add_argument("--out", type=Path, default=Path("position_loss.png"))
    parser.add_argument("--every", type=int, default=8,
                        help="pair every k-th token (each needs a window of its own; default 8)")
    args = parser.parse_args()
    if args.redraw:
        redraw(args.redraw, args.out)
        return
    if not args.groups:
        raise UsageError("no group given: name run directories, or --redraw a JSON")
    if args.length < 2 or args.every < 1:
        raise UsageError(f"--length {args.length} --every {args.every}: give a window of at "
                         "least 2 tokens and a positive step")
    groups = [group_runs(group) for group in args.groups]
    spans = bands(args.length)
    print(f"perplexity by window position, windows of {args.length} tokens (mean over seeds)")
    print("| group | " + " | ".join(f"{a}-{b - 1}" for a, b in spans)
          + " | paired: L-windows / long / ratio |")
    print("|---|" + "---:|" * (len(spans) + 1))
    record, trained = {}, set()
    for runs in groups:
        config = load_run_config(runs[0], validate=False)
        high = int(config.data.train_lengths[1])
        loaded = [load_run(run, "latest") for run in runs]
        long_losses = [token_losses(run, args.length) for run in loaded]
        losses = np.mean([tokens.mean(axis=0) for tokens in long_losses], axis=0)
        short, long = np.exp(np.mean([paired_losses(run, tokens, high, args.every)
                                      for run, tokens in zip(loaded, long_losses, strict=True)],
                                     axis=0))
        trained.add(high)
        values = [float(np.exp(losses[a:b].mean())) for a, b in spans]
        pe = config.model.pe
        scheme = pe.type + (f" over {pe.base}" if "base" in pe else "")  # DAPE names its base
        name = f"{scheme} ({len(runs)} seeds)"
        if name in record:  # two groups of one scheme: name them by their folders
            name = f"{runs[0].parent.name} ({len(runs)} seeds)"
        print(f"| {name} | " + " | ".join(f"{v:.2f}" for v in values)
              + f" | {short:.2f} / {long:.2f} / {long / short:.2f}x |")
        record[name] = {"bands": spans, "perplexity": values, "training_length": high,
                        "paired": {"trained_windows": float(short), "long_windows": float(long)}}
    write_outputs(draw(record, args.length, trained), args.out, record,
                  args.out.with_suffix(".json"))


if __name__ == "__main__":
    run_script(main)
