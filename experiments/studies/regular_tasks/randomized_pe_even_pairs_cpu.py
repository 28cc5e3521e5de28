"""pe-research sweep experiments/studies/regular_tasks/randomized_pe_even_pairs_cpu.py \
    --workdir runs/rpe_even_pairs

even_pairs from randomized_pe_regular_cpu.py, across the randomized-PE paper's other schemes: NoPE,
sin/cos, learned, RoPE and ALiBi, each plain and randomized over [0, 128) (NoPE has no positions
to randomize), 3 seeds. In that sweep the Transformer-XL models learned the training lengths by
step 1,000-3,000, so these train 5,000 steps (cosine) on lengths 1-10 and are evaluated up to
length 100. About 30 minutes on 2 CPU cores with --jobs 2; what it showed is in docs/results.md.
"""

from pathlib import Path

from pe_research.config import load_config, load_user_module
from pe_research.sweeps import Sweep

REPO = Path(__file__).resolve().parents[3]
BASE = REPO / "experiments/studies/regular_tasks/randomized_pe_regular_cpu.py"
SCHEMES = ("none", "sinusoidal", "learned", "rope", "alibi")


def get_config():
    config = load_config(BASE, validate=False)
    config.train.steps = 5_000
    config.train.eval_every = 500
    config.train.checkpoint_every = 500
    config.wandb.group = "randomized_pe_even_pairs_cpu"
    return config


def sweep():
    # the paper's grid, one task
    table = load_user_module(REPO / "configs/sweeps/randomized_pe_table.py")
    return Sweep(grid=table.grid(("even_pairs",), SCHEMES, 128, 256, 10), seeds=(0, 1, 2))
