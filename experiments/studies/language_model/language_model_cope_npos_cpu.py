"""pe-research sweep experiments/studies/language_model/language_model_cope_npos_cpu.py \
    --workdir runs/lm_cope_npos

CoPE in the language model of language_model_cpu.py (character-level Python source, windows of
64, scored on 16 to 1,024) with its position table sized as its authors size it: ``npos_max`` =
the context + 1 (65; their code's default, facebookresearch/RAM projects/cope), and = the
longest evaluated window + 1 (1,025), so that no count beyond training is clamped and counts
above 64 read table rows that training never reached (zero, as initialised). The first sweep ran
CoPE at this codebase's default, 64 (counts clamped at 63). Two seeds each; what it showed is in
docs/results.md.
"""

from pathlib import Path

from pe_research.config import load_config
from pe_research.sweeps import Sweep, product

REPO = Path(__file__).resolve().parents[3]
BASE = REPO / "configs/language_model.py"


def get_config():
    config = load_config(BASE, validate=False)
    config.wandb.group = "language_model_cope_npos"
    return config


def sweep():
    grid = product({"model.pe.type": ("cope",), "model.pe.npos_max": (65, 1025)})
    return Sweep(grid=grid, seeds=(0, 1))
