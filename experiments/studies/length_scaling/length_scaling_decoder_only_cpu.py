"""pe-research sweep experiments/studies/length_scaling/length_scaling_decoder_only_cpu.py \
    --workdir runs/ls_decoder

Attention sharpened with the number of keys in the NoPE paper's setting, at CPU scale: the
decoder-only causal LM of configs/sweeps/nope_decoder_only_cpu.py (4 layers, d_model 64, 4 heads)
copying strings of length 1-8, 2,000 steps, evaluated at every length up to 24; NoPE and RoPE,
each with plain softmax, log-n scaling and Scalable-Softmax (positional/length_scaling.py), three
seeds stacked per grid point. About 25 minutes on a 2-core CPU; the study is
docs/studies/length_scaling.md.
"""

from pathlib import Path

from pe_research.config import load_config
from pe_research.sweeps import Sweep, product

REPO = Path(__file__).resolve().parents[3]
BASE = REPO / "configs/sweeps/nope_decoder_only_cpu.py"


def get_config():
    config = load_config(BASE, validate=False)
    config.task.name = "copy"
    config.data.buckets = (16, 24, 32, 48, 64)
    config.train.eval_lengths = (16, 24)
    config.eval.lengths = tuple(range(1, 25))
    config.wandb.group = "length_scaling_decoder_only"
    return config


def sweep():
    return Sweep(grid=product({"model.pe.type": ["none", "rope"],
                               "model.pe.logit_scaling": ["none", "log_n_scaling", "ssmax"]}),
                 seeds=(0, 1, 2))
