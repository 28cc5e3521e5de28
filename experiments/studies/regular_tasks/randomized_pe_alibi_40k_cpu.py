"""pe-research sweep experiments/studies/regular_tasks/randomized_pe_alibi_40k_cpu.py \
    --workdir runs/rpe_alibi_40k

ALiBi randomized over [0, 128) on even_pairs from randomized_pe_even_pairs_longer_cpu.py, trained
twice as long again: 40,000 cosine-decayed steps. At 20,000 steps one seed of three had learned
lengths 1-10 and the other two were at 91-98 % exact match in distribution with their training
loss still falling, so the sweep could not say whether randomized positions help ALiBi. The
plain arm learned at 20,000 steps and is not rerun. 3 seeds. About 45 minutes on 2 CPU cores;
what it showed is in docs/results.md.
"""

from pathlib import Path

from pe_research.config import load_config
from pe_research.sweeps import Sweep, product

REPO = Path(__file__).resolve().parents[3]
BASE = REPO / "experiments/studies/regular_tasks/randomized_pe_even_pairs_longer_cpu.py"


def get_config():
    config = load_config(BASE, validate=False)
    config.train.steps = 40_000
    config.train.eval_every = 4_000
    config.train.checkpoint_every = 4_000
    config.wandb.group = "randomized_pe_alibi_40k_cpu"
    return config


def sweep():
    return Sweep(grid=product({"task.name": ["even_pairs"], "model.pe.type": ["alibi"],
                               "model.pe.randomize.max_position": [128],
                               "model.pe.randomize.per": ["batch"]}),
                 seeds=(0, 1, 2))
