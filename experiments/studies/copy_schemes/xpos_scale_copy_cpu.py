"""pe-research sweep experiments/studies/copy_schemes/xpos_scale_copy_cpu.py \
    --workdir runs/xpos_scale_copy --jobs 2

xPos on the all-schemes copy setup (experiments/studies/copy_schemes/all_schemes_copy_cpu.py) with
its decay made
to act at these lengths. At the paper's scale_base B = 512 the decay zeta_i^((n-m)/B) stays
above 0.92 for every pair over the 33 tokens of a length-16 copy, so xPos is RoPE there. With
B = 64 and 16 the fastest-rotating pairs fade to 0.52 and 0.08 of their weight over that span,
while the slowest keep their reach: the mechanism the paper credits with extrapolation. Three
seeds each; about 6 minutes on 2 CPU cores; what it showed is in docs/results.md.
"""

from pathlib import Path

from pe_research.config import load_config
from pe_research.sweeps import Sweep, product

REPO = Path(__file__).resolve().parents[3]
ALL_SCHEMES = REPO / "experiments/studies/copy_schemes/all_schemes_copy_cpu.py"


def get_config():
    config = load_config(ALL_SCHEMES, validate=False)
    config.model.pe = {"type": "xpos"}
    config.wandb.group = "xpos_scale_copy"
    return config


def sweep():
    return Sweep(grid=product({"model.pe.scale_base": [16.0, 64.0]}), seeds=(0, 1, 2))
