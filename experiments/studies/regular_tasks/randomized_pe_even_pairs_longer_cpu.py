"""pe-research sweep experiments/studies/regular_tasks/randomized_pe_even_pairs_longer_cpu.py \
    --workdir runs/rpe_longer

Learned and ALiBi positions from randomized_pe_even_pairs_cpu.py, trained four times as long.
After 5,000 steps their randomized models had not learned the training lengths (learned 56-76 %,
ALiBi 84-99 % exact match in distribution), so that sweep said nothing about them. Here both
arms, plain and randomized over [0, 128), train 20,000 cosine-decayed steps, so that the two
differ in their positions alone. 3 seeds. About 45 minutes on 2 CPU cores; what it showed is in
docs/results.md.
"""

from pathlib import Path

from pe_research.config import load_config, load_user_module
from pe_research.sweeps import Sweep

REPO = Path(__file__).resolve().parents[3]
BASE = REPO / "experiments/studies/regular_tasks/randomized_pe_even_pairs_cpu.py"


def get_config():
    config = load_config(BASE, validate=False)
    config.train.steps = 20_000
    config.train.eval_every = 2_000
    config.train.checkpoint_every = 2_000
    config.wandb.group = "randomized_pe_even_pairs_longer_cpu"
    return config


def sweep():
    # the paper's grid, one task
    table = load_user_module(REPO / "configs/sweeps/randomized_pe_table.py")
    return Sweep(grid=table.grid(("even_pairs",), ("learned", "alibi"), 128, 256, 10),
                 seeds=(0, 1, 2))
