"""From a notebook: load two trained runs, evaluate them, plot their curves side by side.

    python docs/example.py runs/copy_alibi runs/copy_rope --out runs/example.png

Each ``# %%`` cell can be pasted into a notebook as it is; there the figure shows inline
(``pe_research`` never chooses a matplotlib backend) and ``figure.savefig`` is optional.
"""

# %% The runs: any two run directories `pe-research train` wrote.
import argparse

from matplotlib.figure import Figure

from pe_research import evaluate, load_run

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("runs", nargs=2, help="two run directories")
parser.add_argument("--lengths", type=int, default=16, help="evaluate lengths 1..N")
parser.add_argument("--out", default="runs/example.png", help="where to save the figure")
args = parser.parse_args()

# %% Evaluate each on its frozen test set, one row per length, every metric of the table.
results = {}
for run_dir in args.runs:
    run = load_run(run_dir, "best")  # restored onto the devices present
    results[run_dir] = evaluate(run, lengths=range(1, args.lengths + 1))
    exact = [f"{row.exact_match:.2f}" for row in results[run_dir].rows]
    print(f"{run_dir} (step {run.step}): exact match by length {' '.join(exact)}")

# %% Plot: each result draws into an axes of one figure (or, without ``ax``, its own figure).
figure = Figure(figsize=(12, 4))
for ax, result in zip(figure.subplots(1, 2), results.values(), strict=True):
    result.plot(ax=ax)
figure.tight_layout()
figure.savefig(args.out, dpi=100)
print(f"figure: {args.out}")
