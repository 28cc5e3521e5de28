"""pe-research sweep experiments/studies/randomized_pe_table/randomized_pe_duplicate_rope_cpu.py \
    --workdir runs/rpe_dup_rope

The duplicate_string comparison of randomized_pe_duplicate_cpu.py (encoder-only, 2 layers,
lengths 1-10, 40,000 cosine-decayed steps, plain vs randomized over [0, 128)) with RoPE in place
of Transformer-XL, everything else unchanged: does the CS reproduction hold for a second scheme,
as the DCF one did on reverse_string? 3 seeds. About 30 minutes on 2 CPU cores; what it showed
is in docs/results.md.
"""

from pathlib import Path

from pe_research.config import load_config
from pe_research.sweeps import Sweep, product

REPO = Path(__file__).resolve().parents[3]
BASE = REPO / "experiments/studies/randomized_pe_table/randomized_pe_duplicate_cpu.py"


def get_config():
    config = load_config(BASE, validate=False)
    config.wandb.group = "randomized_pe_duplicate_rope_cpu"
    return config


def sweep():
    return Sweep(grid=product({"model.pe.type": ["rope"],
                               "model.pe.randomize.max_position": [0, 128]}),
                 seeds=(0, 1, 2))
