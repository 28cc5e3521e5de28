"""pe-research sweep experiments/studies/selective_copy/selective_copy_cpu.py \
    --workdir runs/selective_copy --jobs 2

CoPE's claim on selective copying (Golovneva et al. 2024: CoPE solves it where the usual
position encodings fail) in this codebase's length-generalisation setup: the demo's decoder-only
model and budget (experiments/studies/demo/demo_seeds.py) on selective_copy, n = 1-8 symbols among
as
many scattered blanks (sources of 2-16 tokens), tested at n = 1-16. A symbol's place in the
output is its count among the non-blank tokens, which CoPE's gates can count and a distance
cannot give. CoPE against NoPE, the relative biases (ALiBi, T5, FIRE), RoPE, sinusoidal and
FoX's forget gate, three seeds each, 5,000 steps (counting through blanks is harder to learn
than copy). About 50 minutes on 2 CPU cores; what it showed is in docs/results.md.
"""

from pathlib import Path

from pe_research.config import load_config
from pe_research.sweeps import Sweep, product

REPO = Path(__file__).resolve().parents[3]
SEEDS = REPO / "experiments/studies/demo/demo_seeds.py"
SCHEMES = ("cope", "fire", "fox", "t5", "rope", "alibi", "none", "sinusoidal")


def get_config():
    config = load_config(SEEDS, validate=False)
    config.task = {"name": "selective_copy", "alphabet_size": 10, "blanks_per_token": 1}
    config.train.steps = 5000
    config.wandb.group = "selective_copy"
    return config


def sweep():
    return Sweep(grid=product({"model.pe.type": list(SCHEMES)}), seeds=(0, 1, 2))
