"""pe-research sweep experiments/studies/randomized_pe_table/randomized_pe_cosine_cpu.py \
    --workdir runs/rpe_cosine_cpu

The randomized runs of randomized_pe_trained_cpu.py again, with the learning rate decayed to zero
over the 20,000 steps (cosine, 500 warm-up steps) instead of the paper's constant 1e-3, and plain
positions on reverse_string under the same schedule, so that the comparison there differs in the
positions alone. At the constant rate the randomized runs' held-out exact match in distribution
still swung between 60 % and 100 % from one evaluation to the next; this asks whether annealing
settles them, and whether their extrapolation holds once they have settled. About 50 minutes on
2 CPU cores; what it showed is in docs/results.md.
"""

from pathlib import Path

from pe_research.config import load_config
from pe_research.sweeps import Sweep, product

REPO = Path(__file__).resolve().parents[3]
BASE = REPO / "experiments/studies/randomized_pe_table/randomized_pe_trained_cpu.py"


def get_config():
    config = load_config(BASE, validate=False)
    config.train.schedule = "cosine"
    config.train.warmup_steps = 500
    config.wandb.group = "randomized_pe_cosine_cpu"
    return config


def sweep():
    randomized = product({"task.name": ["reverse_string", "duplicate_string"],
                          "model.pe.randomize.max_position": [128]})
    plain = [{"task.name": "reverse_string", "model.pe.randomize.max_position": 0}]
    return Sweep(grid=randomized + plain, seeds=(0, 1))
