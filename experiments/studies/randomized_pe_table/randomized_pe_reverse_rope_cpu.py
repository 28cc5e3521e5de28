"""pe-research sweep experiments/studies/randomized_pe_table/randomized_pe_reverse_rope_cpu.py \
    --workdir runs/rpe_rev_rope

The reverse_string comparison of randomized_pe_cosine_cpu.py (encoder-only, 2 layers, lengths
1-10, 20,000 cosine-decayed steps, plain vs randomized over [0, 128)) with RoPE in place of the
paper's relative encoding (Transformer-XL), everything else unchanged: is the DCF reproduction a
property of one scheme? On even_pairs RoPE gained the most from randomized positions. 3 seeds.
About 35 minutes on 2 CPU cores; what it showed is in docs/results.md.
"""

from pathlib import Path

from pe_research.config import load_config
from pe_research.sweeps import Sweep, product

REPO = Path(__file__).resolve().parents[3]
BASE = REPO / "experiments/studies/randomized_pe_table/randomized_pe_cosine_cpu.py"


def get_config():
    config = load_config(BASE, validate=False)
    config.wandb.group = "randomized_pe_reverse_rope_cpu"
    return config


def sweep():
    return Sweep(grid=product({"task.name": ["reverse_string"], "model.pe.type": ["rope"],
                               "model.pe.randomize.max_position": [0, 128]}),
                 seeds=(0, 1, 2))
