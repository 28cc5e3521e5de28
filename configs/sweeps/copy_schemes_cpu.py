"""pe-research sweep configs/sweeps/copy_schemes_cpu.py --workdir runs/sweep_demo

The small sweep of the README: about 5 minutes end to end on a 2-core CPU. Copy strings of length
1-8 (configs/default.py's model: d_model 64, 2+2 layers), 2000 steps, evaluated at every length
up to 16. Four schemes: two absolute (sinusoidal, learned) and two relative (RoPE, T5), two
seeds each, trained stacked in one program per scheme. It ends by evaluating every run over
eval.lengths and printing the comparison table (SWEEP_DIR/report/summary.md). What it showed
when measured is in docs/results.md.
"""

from pathlib import Path

from pe_research.config import load_config
from pe_research.sweeps import Sweep, product

REPO = Path(__file__).resolve().parents[2]
DEFAULT = REPO / "configs/default.py"


def get_config():
    config = load_config(DEFAULT, validate=False)
    config.data.train_lengths = (1, 8)
    config.data.buckets = (16, 24, 32, 64)
    config.train.steps = 2000
    config.train.eval_every = 500
    config.train.checkpoint_every = 500
    config.train.eval_lengths = (12, 16)
    config.eval.lengths = tuple(range(1, 17))
    config.wandb.group = "sweep_demo"
    return config


def sweep():
    return Sweep(grid=product({"model.pe.type": ["sinusoidal", "learned", "rope", "t5"]}),
                 seeds=(0, 1))
