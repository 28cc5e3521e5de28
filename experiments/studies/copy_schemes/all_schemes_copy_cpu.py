"""pe-research sweep experiments/studies/copy_schemes/all_schemes_copy_cpu.py \
    --workdir runs/all_schemes_copy --jobs 2

Every registered positional scheme on the demo's setup (configs/sweeps/demo.py: a 4-layer
decoder-only LM, d_model 64, copy of lengths 1-8 over 10 symbols, 3,000 steps, cosine from
3e-3), three seeds each, stacked in one program per scheme, evaluated at lengths 1-16. The papers
of the newer schemes (xPos, Kerple, FIRE, CoPE, FoX, PoPE, DAPE) each claim to extrapolate
further than RoPE or ALiBi; this puts all eighteen on one task and one budget, and the report
says which of them learned the training lengths before anything beyond them is read. The
expensive schemes (per-pair MLPs, explicit attention) come first so the two job slots finish
together. About 80 minutes on 2 CPU cores; what it showed is in docs/results.md.
"""

from pathlib import Path

from pe_research.config import load_config
from pe_research.sweeps import Sweep, product

REPO = Path(__file__).resolve().parents[3]
SEEDS = REPO / "experiments/studies/demo/demo_seeds.py"
SCHEMES = ("dape", "cope", "dynamic_bias", "fire", "shaw", "pope", "transformer_xl",
           "kerple_log", "kerple_power", "xpos", "fox", "t5", "rope", "alibi", "none",
           "sinusoidal", "scaled_sinusoidal", "learned")


def get_config():
    config = load_config(SEEDS, validate=False)
    config.wandb.group = "all_schemes_copy"
    return config


def sweep():
    return Sweep(grid=product({"model.pe.type": list(SCHEMES)}), seeds=(0, 1, 2))
