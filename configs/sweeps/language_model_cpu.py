"""pe-research sweep configs/sweeps/language_model_cpu.py --workdir runs/language_model --jobs 2

ALiBi's experiment ("Train Short, Test Long", Press et al. 2022, fig. 1 and sec. 4) at CPU scale:
character-level language models trained on windows of 64 characters of Python source (the
standard library; first run `pe-research data stdlib --to data/python_stdlib.txt`) and scored
by perplexity on held-out windows of 16 to 1,024 characters (configs/language_model.py: d_model
128, 2 layers, 2,000 steps). The paper's four schemes (sinusoidal, rotary, T5's bias, ALiBi)
plus NoPE and the later biases and gates (Kerple, FIRE, xPos, FoX), three seeds each. What it
showed is in docs/results.md.
"""

from pathlib import Path

from pe_research.config import load_config
from pe_research.sweeps import Sweep, product

REPO = Path(__file__).resolve().parents[2]
BASE = REPO / "configs/language_model.py"
SCHEMES = ("sinusoidal", "rope", "t5", "alibi", "none", "kerple_log", "fire", "xpos", "fox")


def get_config():
    config = load_config(BASE, validate=False)
    config.wandb.group = "language_model"
    return config


def sweep():
    return Sweep(grid=product({"model.pe.type": list(SCHEMES)}), seeds=(0, 1, 2))
