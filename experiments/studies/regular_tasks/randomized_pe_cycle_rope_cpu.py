"""pe-research sweep experiments/studies/regular_tasks/randomized_pe_cycle_rope_cpu.py \
    --workdir runs/rpe_cycle_rope

Randomized RoPE on cycle_navigation (a count mod 5), where randomized positions did not help
Transformer-XL. RoPE gained the most from them on even_pairs, so is the counting task's failure
a matter of the scheme? Trained as in nope_vs_schemes_counts_cpu.py (encoder-only, 2 layers,
lengths 1-10, 10,000 steps, end token out of the loss, scored at the oracle length), plain and
randomized over [0, 512): about 51 times the longest training sequence, the ratio of the paper's
2,048 positions to its training lengths, and a range where Transformer-XL's far-end collapse had
ended. 3 seeds. About 15 minutes on 2 CPU cores; what it showed is in docs/results.md.
"""

from pathlib import Path

from pe_research.config import load_config
from pe_research.sweeps import Sweep, product

REPO = Path(__file__).resolve().parents[3]
BASE = REPO / "experiments/studies/regular_tasks/nope_vs_schemes_counts_cpu.py"


def get_config():
    config = load_config(BASE, validate=False)
    config.wandb.group = "randomized_pe_cycle_rope_cpu"
    return config


def sweep():
    return Sweep(grid=product({"task.name": ["cycle_navigation"], "model.pe.type": ["rope"],
                               "model.pe.randomize.max_position": [0, 512]}),
                 seeds=(0, 1, 2))
