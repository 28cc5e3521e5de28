"""pe-research sweep experiments/studies/demo/demo_seeds.py --workdir runs/demo_seeds --jobs 2

The check behind `make demo`: the same model, task and budget (configs/sweeps/demo.py), with T5
added and three seeds per scheme, each scheme's seeds trained stacked in one program. About 12
minutes on 2 CPU cores. The demo trains one seed, so this sweep is what says whether its
ordering survives other seeds; what it showed is in docs/results.md.
"""

from pathlib import Path

from pe_research.config import load_config
from pe_research.sweeps import Sweep, product

REPO = Path(__file__).resolve().parents[3]
DEMO = REPO / "configs/sweeps/demo.py"


def get_config():
    config = load_config(DEMO, validate=False)
    config.wandb.group = "demo_seeds"
    return config


def sweep():
    return Sweep(grid=product({"model.pe.type": ["none", "alibi", "rope", "sinusoidal", "t5"]}),
                 seeds=(0, 1, 2))
