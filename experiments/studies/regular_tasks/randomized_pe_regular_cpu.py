"""pe-research sweep experiments/studies/regular_tasks/randomized_pe_regular_cpu.py \
    --workdir runs/rpe_regular --jobs 2

The randomized-PE comparison of randomized_pe_cosine_cpu.py on the regular (R) class, which the
CPU table left at parity_check after 2,000 steps: even_pairs (first bit != last bit),
cycle_navigation (a walk on a 5-cycle, counting mod 5) and parity_check (counting mod 2), the
same encoder-only Transformer-XL model plain and randomized over [0, 128), 3 seeds, 10,000
cosine-decayed steps on lengths 1-10. Each answer is one token, so evaluation is cheap: 256
examples per length, up to length 100 (the positions' range holds 101 tokens). About 40 minutes
on 2 CPU cores; what it showed is in docs/results.md.
"""

from pathlib import Path

from pe_research.config import load_config
from pe_research.sweeps import Sweep, product

REPO = Path(__file__).resolve().parents[3]
BASE = REPO / "experiments/studies/randomized_pe_table/randomized_pe_cosine_cpu.py"


def get_config():
    config = load_config(BASE, validate=False)
    config.train.steps = 10_000
    config.train.eval_every = 1_000
    config.train.checkpoint_every = 1_000
    config.train.eval_lengths = (20, 40)
    config.data.eval_samples = 256
    config.eval.lengths = (*range(1, 11), 12, 14, 16, 18, 20, 25, 30, 40, 60, 80, 100)
    config.wandb.group = "randomized_pe_regular_cpu"
    return config


def sweep():
    return Sweep(grid=product({"task.name": ["even_pairs", "cycle_navigation", "parity_check"],
                               "model.pe.randomize.max_position": [0, 128]}),
                 seeds=(0, 1, 2))
