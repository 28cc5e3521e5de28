"""pe-research sweep experiments/studies/regular_tasks/randomized_pe_spacing_rescored_cpu.py \
    --workdir runs/rpe_spacing

The even_pairs half of randomized_pe_range_cpu.py (Transformer-XL, encoder-only, end-token slot,
10,000 steps, 3 seeds) over [0, 128) and [0, 512), trained again so that it can be scored with
every test example on its own position draw. Its first scoring put all 256 examples of a length
on one draw, and the spacing finding of "The randomized range" in docs/results.md (two seeds of
three at 4 % and 28 % exact match at length 100 over 128, 67-100 % over 512) rests on those
single draws. About 10 minutes on 2 CPU cores; what it showed is in docs/results.md.
"""

from pathlib import Path

from pe_research.config import load_config
from pe_research.sweeps import Sweep, product

REPO = Path(__file__).resolve().parents[3]
BASE = REPO / "experiments/studies/regular_tasks/randomized_pe_regular_cpu.py"


def get_config():
    config = load_config(BASE, validate=False)
    config.wandb.group = "randomized_pe_spacing_rescored_cpu"
    return config


def sweep():
    return Sweep(grid=product({"task.name": ["even_pairs"],
                               "model.pe.randomize.max_position": [128, 512]}), seeds=(0, 1, 2))
