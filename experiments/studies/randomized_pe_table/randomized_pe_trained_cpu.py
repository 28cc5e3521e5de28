"""pe-research sweep experiments/studies/randomized_pe_table/randomized_pe_trained_cpu.py \
    --workdir runs/rpe_trained_cpu

The randomized-PE paper's central claim, with models trained until they learn the training
lengths: on reverse_string (DCF) and duplicate_string (CS), does the relative Transformer-XL
encoding extrapolate further when training positions are drawn at random (once per batch) from a
larger range? The CPU table (randomized_pe_table_cpu.py) stopped at 2,000 steps, before either
task was learned; here each run trains 20,000 steps and is evaluated at its best checkpoint by
held-out in-distribution exact match. Training lengths 1-10, evaluation up to 40; positions
randomized over [0, 128), which covers the longest evaluated sequence (duplicate_string at 40:
40 + 80 tokens). Two seeds per grid point, trained stacked. About 55 minutes on 2 CPU cores;
what it showed is in docs/results.md.
"""

from pathlib import Path

from pe_research.config import load_config
from pe_research.sweeps import Sweep, product

REPO = Path(__file__).resolve().parents[3]
BASE = REPO / "configs/sweeps/randomized_pe_table_cpu.py"


def get_config():
    config = load_config(BASE, validate=False)
    config.model.pe.type = "transformer_xl"
    config.model.pe.randomize.per = "batch"
    config.data.buckets = (16, 32, 64, 128)
    config.train.steps = 20_000
    config.train.log_every = 500
    config.train.eval_every = 2_000
    config.train.checkpoint_every = 2_000
    config.train.eval_lengths = (20, 40)
    config.eval.lengths = (*range(1, 11), 12, 14, 16, 18, 20, 25, 30, 35, 40)
    config.wandb.group = "randomized_pe_trained_cpu"
    return config


def sweep():
    return Sweep(grid=product({"task.name": ["reverse_string", "duplicate_string"],
                               "model.pe.randomize.max_position": [0, 128]}),
                 seeds=(0, 1))
