"""pe-research sweep experiments/studies/rope_extension/rope_lm_cpu.py \
    --workdir runs/rope_extension_lm

The RoPE character-level language model of configs/language_model.py (windows of 64 characters
of Python source, 2 layers, d_model 128, 2,000 steps), three seeds trained in one program, for
evaluating test-time context extensions on longer windows
(experiments/studies/rope_extension/window_table.py). First run `pe-research data stdlib --to
data/python_stdlib.txt`. About 10 minutes on a 2-core CPU; the study is
docs/studies/rope_extension.md.
"""

from pathlib import Path

from pe_research.config import load_config
from pe_research.sweeps import Sweep, product

REPO = Path(__file__).resolve().parents[3]
BASE = REPO / "configs/language_model.py"


def get_config():
    config = load_config(BASE, validate=False)
    config.wandb.group = "rope_extension_lm"
    return config


def sweep():
    return Sweep(grid=product({"model.pe.type": ["rope"]}), seeds=(0, 1, 2),
                 members_per_program="auto")
