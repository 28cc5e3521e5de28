"""pe-research sweep experiments/studies/t5_buckets/t5_buckets_reverse.py \
    --workdir runs/t5_buckets --jobs 2

A follow-up to demo_reverse_seeds.py. There T5 (32 buckets, causal: distances 0-15 exact, then
logarithmic) scored 0-27 % exact match at length 9 on every seed and 31-58 % at 10. Reversing
n tokens reads back over distances up to 2n - 1: 15 at length 8, the last exact bucket. This
moves the bucket boundary, everything else unchanged: 16 buckets (exact to 7, so training
already uses the logarithmic ones) and 64 (exact to 31, so every distance beyond the training
range has its own, never-trained bucket). About 7 minutes on 2 CPU cores. The same on copy, at
the demo's 3,000 steps: add `--config.task.name=copy --config.train.steps=3000` (about 5
minutes). What both showed is in docs/results.md.
"""

from pathlib import Path

from pe_research.config import load_config
from pe_research.sweeps import Sweep, product

REPO = Path(__file__).resolve().parents[3]
REVERSE = REPO / "experiments/studies/demo/demo_reverse_seeds.py"


def get_config():
    config = load_config(REVERSE, ["model.pe.type=t5"], validate=False)
    config.wandb.group = "t5_buckets_reverse"
    return config


def sweep():
    return Sweep(grid=product({"model.pe.num_buckets": [16, 64]}), seeds=(0, 1, 2))
