"""pe-research sweep experiments/studies/regular_tasks/nope_vs_relative_counts_cpu.py \
    --workdir runs/nope_vs_txl

The control for randomized_pe_nope_regular_cpu.py: plain Transformer-XL on the two counting
tasks (cycle_navigation, parity_check) trained as the NoPE runs there were, with the end token
left out of the loss and scored at the oracle length, so that the two differ in their positions
alone. The Transformer-XL runs of randomized_pe_regular_cpu.py were trained with the end token.
3 seeds, 10,000 steps. About 20 minutes on 2 CPU cores; what it showed is in docs/results.md.
"""

from pathlib import Path

from pe_research.config import load_config
from pe_research.sweeps import Sweep, product

REPO = Path(__file__).resolve().parents[3]
BASE = REPO / "experiments/studies/regular_tasks/randomized_pe_regular_cpu.py"


def get_config():
    config = load_config(BASE, validate=False)
    config.train.predict_eos = False
    config.wandb.group = "nope_vs_relative_counts_cpu"
    return config


def sweep():
    return Sweep(grid=product({"task.name": ["cycle_navigation", "parity_check"],
                               "model.pe.randomize.max_position": [0]}),
                 seeds=(0, 1, 2))
