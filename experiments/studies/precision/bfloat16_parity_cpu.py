"""pe-research sweep experiments/studies/precision/bfloat16_parity_cpu.py \
    --workdir runs/bfloat16_parity_cpu

bfloat16_table_cpu.py's plain parity_check arm, where bfloat16 fit the training lengths less well
than float32 at 2,000 steps on every seed, trained 3x longer (6,000 steps): does bfloat16 learn
the task more slowly, or stop short of float32? 3 seeds per precision; about 8 minutes on 2
CPU cores.
"""

from pathlib import Path

from pe_research.config import load_config
from pe_research.sweeps import Sweep, product

REPO = Path(__file__).resolve().parents[3]
BASE = REPO / "experiments/studies/precision/bfloat16_table_cpu.py"


def get_config():
    config = load_config(BASE, validate=False)
    config.train.steps = 6000
    config.train.eval_every = 2000
    config.train.checkpoint_every = 2000
    return config


def sweep():
    return Sweep(grid=product({"task.name": ["parity_check"], "model.pe.type": ["transformer_xl"],
                               "model.pe.randomize.max_position": [0],
                               "model.dtype": ["float32", "bfloat16"]}),
                 seeds=(0, 1, 2), members_per_program="auto")
