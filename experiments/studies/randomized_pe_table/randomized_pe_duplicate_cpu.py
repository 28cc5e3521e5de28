"""pe-research sweep experiments/studies/randomized_pe_table/randomized_pe_duplicate_cpu.py \
    --workdir runs/rpe_dup --jobs 2

duplicate_string from randomized_pe_cosine_cpu.py, trained twice as long. At 20,000 steps its
randomized runs had not finished learning the training lengths (87 % and 96 % held-out exact
match) while their training loss was still falling, so their extrapolation was measured on
undertrained models. Here both arms, plain and randomized over [0, 128), train 40,000 steps
under the same cosine schedule, so they differ in their positions alone. About 70 minutes on
2 CPU cores; what it showed is in docs/results.md.
"""

from pathlib import Path

from pe_research.config import load_config
from pe_research.sweeps import Sweep, product

REPO = Path(__file__).resolve().parents[3]
BASE = REPO / "experiments/studies/randomized_pe_table/randomized_pe_cosine_cpu.py"


def get_config():
    config = load_config(BASE, validate=False)
    config.task.name = "duplicate_string"
    config.train.steps = 40_000
    config.train.eval_every = 4_000
    config.train.checkpoint_every = 4_000
    config.wandb.group = "randomized_pe_duplicate_cpu"
    return config


def sweep():
    return Sweep(grid=product({"model.pe.randomize.max_position": [0, 128]}), seeds=(0, 1))
