"""pe-research sweep experiments/studies/stick_breaking/state_tracking_cpu.py \
    --workdir runs/stick_breaking_state

Stick-breaking attention (positional/stick_breaking.py) against RoPE and NoPE on two
state-tracking tasks of the Chomsky hierarchy, parity_check and cycle_navigation, at CPU scale:
the decoder-only causal LM of configs/sweeps/nope_decoder_only_cpu.py (4 layers, d_model 64,
4 heads), lengths 1-10, 2,000 steps, evaluated at every length up to 30, three seeds. A scheme's
two tasks train stacked in one program (6 members). About 15 minutes on a 2-core CPU; the study
is docs/studies/stick_breaking.md.
"""

from pathlib import Path

import ml_collections

from pe_research.config import default_task_block, load_config
from pe_research.sweeps import Sweep, product

REPO = Path(__file__).resolve().parents[3]
BASE = REPO / "configs/sweeps/nope_decoder_only_cpu.py"


def get_config():
    config = load_config(BASE, validate=False)
    config.task = ml_collections.ConfigDict(default_task_block("parity_check"))
    config.data.train_lengths = (1, 10)
    config.data.buckets = (16, 32, 64)
    config.train.eval_lengths = (20, 30)
    config.eval.lengths = tuple(range(1, 31))
    config.wandb.group = "stick_breaking_state"
    return config


def sweep():
    return Sweep(grid=product({"model.pe.type": ["stick_breaking", "path", "rope", "none"],
                               "task.name": ["parity_check", "modular_arithmetic",
                                             "cycle_navigation"]}),
                 seeds=(0, 1, 2), members_per_program="auto")
