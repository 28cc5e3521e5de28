"""pe-research sweep experiments/studies/dape_fire/fire_even_pairs_cpu.py \
    --workdir runs/fire_even_pairs --jobs 1

FIRE (Li et al. 2023) on even_pairs, plain positions, trained as the arms of
dape_even_pairs_cpu.py (encoder-only, lengths 1-10, 20,000 steps, end token out of the loss).
There DAPE's MLP found the first token at any length by a bias that rises with distance; FIRE's
bias is itself an MLP of (log-)distance, with the authors' defaults. Does it find the far end
too? 3 seeds. About 15 minutes on 2 CPU cores; what it showed is in docs/results.md.
"""

from pathlib import Path

from pe_research.config import load_config
from pe_research.sweeps import Sweep

REPO = Path(__file__).resolve().parents[3]
BASE = REPO / "experiments/studies/dape_fire/dape_even_pairs_cpu.py"


def get_config():
    config = load_config(BASE, validate=False)
    config.wandb.group = "fire_even_pairs_cpu"
    return config


def sweep():
    return Sweep(grid=[{"task.name": "even_pairs", "model.pe.randomize.max_position": 0,
                        "model.pe.type": "fire"}], seeds=(0, 1, 2))
