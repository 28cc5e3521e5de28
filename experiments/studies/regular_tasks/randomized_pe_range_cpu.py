"""pe-research sweep experiments/studies/regular_tasks/randomized_pe_range_cpu.py \
    --workdir runs/rpe_range --jobs 2

even_pairs and cycle_navigation with Transformer-XL from randomized_pe_regular_cpu.py, randomized
over a wider range. Over [0, 128) the randomized even_pairs models held 100 % exact match to
length 30-40 and then fell, two seeds of three to 4-28 % at length 100, and on cycle_navigation
they fell below the plain models from length 25 on. A test sequence of 101 tokens drawn from 128
positions has neighbours at a mean gap of about 1.3, where training (at most 11 tokens) saw gaps
of about 11 or more: the test positions are out of distribution in their spacing. If that is the
cause, drawing training positions from [0, 512) or [0, 1024) (mean test gap 5 or 10) keeps the
models up at length 100. 3 seeds each, 10,000 steps as in that sweep. About 30 minutes on 2 CPU
cores; what it showed is in docs/results.md.
"""

from pathlib import Path

from pe_research.config import load_config
from pe_research.sweeps import Sweep, product

REPO = Path(__file__).resolve().parents[3]
BASE = REPO / "experiments/studies/regular_tasks/randomized_pe_regular_cpu.py"


def get_config():
    config = load_config(BASE, validate=False)
    config.wandb.group = "randomized_pe_range_cpu"
    return config


def sweep():
    return Sweep(grid=product({"task.name": ["even_pairs", "cycle_navigation"],
                               "model.pe.randomize.max_position": [512, 1024]}),
                 seeds=(0, 1, 2))
