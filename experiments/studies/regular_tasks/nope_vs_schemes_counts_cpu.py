"""pe-research sweep experiments/studies/regular_tasks/nope_vs_schemes_counts_cpu.py \
    --workdir runs/nope_vs_rel

The NoPE comparison of nope_vs_relative_counts_cpu.py extended from Transformer-XL to the other
relative schemes: RoPE, ALiBi and T5's bucketed bias, plain positions, on the two counting tasks
(cycle_navigation, parity_check). Trained as the NoPE runs of randomized_pe_nope_regular_cpu.py
were (encoder-only, 2 layers, lengths 1-10, 10,000 steps), with the end token left out of the
loss and scored at the oracle length, so that every arm differs from NoPE in its positions
alone. 3 seeds. About an hour on 2 CPU cores; what it showed is in docs/results.md.
"""

from pathlib import Path

from pe_research.config import load_config
from pe_research.sweeps import Sweep, product

REPO = Path(__file__).resolve().parents[3]
BASE = REPO / "experiments/studies/regular_tasks/nope_vs_relative_counts_cpu.py"


def get_config():
    config = load_config(BASE, validate=False)
    config.wandb.group = "nope_vs_schemes_counts_cpu"
    return config


def sweep():
    return Sweep(grid=product({"task.name": ["cycle_navigation", "parity_check"],
                               "model.pe.type": ["rope", "alibi", "t5"],
                               "model.pe.randomize.max_position": [0]}),
                 seeds=(0, 1, 2))
