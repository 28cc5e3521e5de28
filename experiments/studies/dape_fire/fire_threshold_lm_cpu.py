"""pe-research sweep experiments/studies/dape_fire/fire_threshold_lm_cpu.py \
    --workdir runs/fire_threshold_lm

FIRE on the language-model setup (configs/language_model.py: windows of 64 characters) with its
threshold L started at the training length instead of the reference code's 512. FIRE divides
psi(i - j) by psi(max(L, i)): with L = 512 and training at 64 the normalised distances seen in
training stay below psi(63) / psi(512) and longer windows feed the MLP values it never saw,
while with L = 64 a longer window maps back into the trained range (the paper's "progressive
interpolation"). Two seeds, about 10 minutes on 2 CPU cores; what it showed is in
docs/results.md.
"""

from pathlib import Path

from pe_research.config import load_config
from pe_research.sweeps import Sweep, product

REPO = Path(__file__).resolve().parents[3]
BASE = REPO / "configs/language_model.py"


def get_config():
    config = load_config(BASE, validate=False)
    config.model.pe = {"type": "fire"}
    config.wandb.group = "fire_threshold_lm"
    return config


def sweep():
    return Sweep(grid=product({"model.pe.init_threshold": [64.0]}), seeds=(0, 1))
