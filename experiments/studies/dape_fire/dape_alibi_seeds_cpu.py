"""pe-research sweep experiments/studies/dape_fire/dape_alibi_seeds_cpu.py \
    --workdir runs/dape_alibi_seeds --jobs 1

DAPE over ALiBi on even_pairs as in dape_even_pairs_cpu.py, seeds 3-5. There two seeds of three
held 99-100 % to length 100 and the third stayed where ALiBi alone is; three more seeds say how
often the MLP finds the far end. About 25 minutes on 2 CPU cores; what it showed is in
docs/results.md.
"""

from pathlib import Path

from pe_research.config import load_config
from pe_research.sweeps import Sweep

REPO = Path(__file__).resolve().parents[3]
BASE = REPO / "experiments/studies/dape_fire/dape_even_pairs_cpu.py"


def get_config():
    config = load_config(BASE, validate=False)
    config.wandb.group = "dape_alibi_seeds_cpu"
    return config


def sweep():
    return Sweep(grid=[{"task.name": "even_pairs", "model.pe.randomize.max_position": 0,
                        "model.pe.type": "dape", "model.pe.base": "alibi"}], seeds=(3, 4, 5))
