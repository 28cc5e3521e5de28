"""pe-research sweep experiments/studies/demo/demo_reverse_seeds.py \
    --workdir runs/demo_reverse_seeds --jobs 2

demo_seeds.py on a second task: the same decoder-only model and five schemes (NoPE, ALiBi, RoPE,
sinusoidal, T5), three seeds each, on reverse_string of lengths 1-8. Reversal is harder to learn
than copy here (the CPU NoPE table's 2,000 steps left NoPE at 82 % in distribution), so it
trains 5,000 steps instead of 3,000, under the same cosine schedule. It asks whether the
ordering measured on copy (NoPE and ALiBi ahead of T5, RoPE and sinusoidal beyond the training
lengths) holds once every model has learned reversal. About 25 minutes on 2 CPU cores; what it
showed is in docs/results.md.
"""

from pathlib import Path

from pe_research.config import load_config
from pe_research.sweeps import Sweep, product

REPO = Path(__file__).resolve().parents[3]
SEEDS = REPO / "experiments/studies/demo/demo_seeds.py"


def get_config():
    config = load_config(SEEDS, validate=False)
    config.task.name = "reverse_string"
    config.train.steps = 5000
    config.wandb.group = "demo_reverse_seeds"
    return config


def sweep():
    return Sweep(grid=product({"model.pe.type": ["none", "alibi", "rope", "sinusoidal", "t5"]}),
                 seeds=(0, 1, 2))
