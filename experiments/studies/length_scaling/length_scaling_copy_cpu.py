"""pe-research sweep experiments/studies/length_scaling/length_scaling_copy_cpu.py \
    --workdir runs/length_scaling_copy

Attention sharpened with the number of keys, at CPU scale: plain softmax against log-n scaling
(Chiang & Cholak 2022) and Scalable-Softmax (Nakanishi 2025), each on NoPE and on RoPE
(positional/length_scaling.py). Copy strings of length 1-8 over 10 symbols (configs/default.py's
encoder-decoder: d_model 64, 2+2 layers), 2,000 steps, evaluated at every length up to 32, three
seeds stacked per grid point. About 20 minutes on a 2-core CPU; the study is
docs/studies/length_scaling.md.
"""

from pathlib import Path

from pe_research.config import load_config
from pe_research.sweeps import Sweep, product

REPO = Path(__file__).resolve().parents[3]
BASE = REPO / "configs/sweeps/copy_schemes_cpu.py"  # copy 1-8, 2,000 steps, default model


def get_config():
    config = load_config(BASE, validate=False)
    config.data.buckets = (16, 24, 32, 48)
    config.train.eval_lengths = (16, 32)
    config.eval.lengths = tuple(range(1, 33))
    config.wandb.group = "length_scaling_copy"
    return config


def sweep():
    return Sweep(grid=product({"model.pe.type": ["none", "rope"],
                               "model.pe.logit_scaling": ["none", "log_n_scaling", "ssmax"]}),
                 seeds=(0, 1, 2))
