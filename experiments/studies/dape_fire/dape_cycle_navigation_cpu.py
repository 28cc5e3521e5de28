"""pe-research sweep experiments/studies/dape_fire/dape_cycle_navigation_cpu.py \
    --workdir runs/dape_cycle --jobs 2

DAPE over ALiBi on cycle_navigation, trained as the ALiBi arm of nope_vs_schemes_counts_cpu.py
(encoder-only, 2 layers, lengths 1-10, 10,000 steps, end token out of the loss), with that ALiBi
arm run again beside it. On even_pairs DAPE's MLP turned ALiBi's decaying bias into a rising one
and found the far end; a count mod 5 needs every token alike, which ALiBi's decay works against
and NoPE does not. 3 seeds. About 15 minutes on 2 CPU cores; what it showed is in
docs/results.md.
"""

from pathlib import Path

from pe_research.config import load_config
from pe_research.sweeps import Sweep

REPO = Path(__file__).resolve().parents[3]
BASE = REPO / "experiments/studies/regular_tasks/nope_vs_schemes_counts_cpu.py"


def get_config():
    config = load_config(BASE, validate=False)
    config.wandb.group = "dape_cycle_navigation_cpu"
    return config


def sweep():
    plain = {"task.name": "cycle_navigation", "model.pe.randomize.max_position": 0}
    return Sweep(grid=[{**plain, "model.pe.type": "alibi"},
                       {**plain, "model.pe.type": "dape", "model.pe.base": "alibi"}],
                 seeds=(0, 1, 2))
