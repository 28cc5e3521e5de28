"""pe-research sweep configs/sweeps/copy_randomized_cpu.py --workdir runs/sweep_randomized

The randomized-PE paper's question on the README sweep's setup (copy, lengths 1-8, 2000 steps,
evaluated up to 16; configs/sweeps/copy_schemes_cpu.py): do positions sampled from a larger
range (0-63 here) during training carry RoPE and sinusoidal positions beyond the training
lengths? Two seeds per grid point, trained stacked. About 5 minutes on a 2-core CPU. In this
encoder-decoder the source and the target draw their random positions independently; what that
showed when measured is in docs/results.md.
"""

from pathlib import Path

from pe_research.config import load_config
from pe_research.sweeps import Sweep, product

REPO = Path(__file__).resolve().parents[2]
BASE = REPO / "configs/sweeps/copy_schemes_cpu.py"


def get_config():
    config = load_config(BASE, validate=False)
    config.wandb.group = "sweep_randomized"
    return config


def sweep():
    return Sweep(grid=product({"model.pe.type": ["rope", "sinusoidal"],
                               "model.pe.randomize.max_position": [0, 64]}),
                 seeds=(0, 1))
