"""pe-research sweep experiments/studies/regular_tasks/randomized_pe_spacing_cpu.py \
    --workdir runs/rpe_spacing --jobs 2

even_pairs with Transformer-XL from randomized_pe_regular_cpu.py, randomized over ranges between
the 128 and 512 positions of randomized_pe_range_cpu.py. Over [0, 128) two seeds of three fell to
4-28 % exact match at length 100; over [0, 512) the worst seed held 67 %. The hypothesis there:
the collapse comes from test positions spaced much closer than training ones (a mean gap of about
1.3 at length 100 from 128 positions, against 5 from 512). 192, 256 and 384 positions give mean
gaps of about 1.9, 2.5 and 3.8 at length 100: where does the collapse end? 3 seeds, 10,000 steps
as in those sweeps. About 20 minutes on 2 CPU cores; what it showed is in docs/results.md.
"""

from pathlib import Path

from pe_research.config import load_config
from pe_research.sweeps import Sweep, product

REPO = Path(__file__).resolve().parents[3]
BASE = REPO / "experiments/studies/regular_tasks/randomized_pe_regular_cpu.py"


def get_config():
    config = load_config(BASE, validate=False)
    config.wandb.group = "randomized_pe_spacing_cpu"
    return config


def sweep():
    return Sweep(grid=product({"task.name": ["even_pairs"],
                               "model.pe.randomize.max_position": [192, 256, 384]}),
                 seeds=(0, 1, 2))
