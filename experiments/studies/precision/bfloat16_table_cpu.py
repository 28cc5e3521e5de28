"""pe-research sweep experiments/studies/precision/bfloat16_table_cpu.py \
    --workdir runs/bfloat16_table_cpu

Does bfloat16 change what the randomized-PE table measures? The table's CPU cut,
configs/sweeps/randomized_pe_table_cpu.py (encoder-only, 2 layers, d_model 64, lengths 1-10,
batch 32, 2,000 steps, Transformer-XL plain and randomized over [0, 256)), on parity_check and
reverse_string, each run once in float32 and once in bfloat16 (parameters and optimizer state in
float32, activations and products in bfloat16: `model.dtype`), 3 seeds. A seed's two runs draw
the same batches and initial parameters, so they differ only in precision. About 12 minutes on
2 CPU cores.
"""

from pathlib import Path

from pe_research.config import load_config
from pe_research.sweeps import Sweep, product

REPO = Path(__file__).resolve().parents[3]
BASE = REPO / "configs/sweeps/randomized_pe_table_cpu.py"


def get_config():
    config = load_config(BASE, validate=False)
    config.wandb.group = "randomized_pe_precision_cpu"
    return config


def sweep():
    return Sweep(grid=product({"task.name": ["parity_check", "reverse_string"],
                               "model.pe.type": ["transformer_xl"],
                               "model.pe.randomize.max_position": [0, 256],
                               "model.dtype": ["float32", "bfloat16"]}),
                 seeds=(0, 1, 2), members_per_program="auto")
