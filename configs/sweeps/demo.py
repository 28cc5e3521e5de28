"""pe-research sweep configs/sweeps/demo.py --workdir runs/demo --jobs 2

What `make demo` runs (through experiments/demo.py): a decoder-only causal LM (the NoPE and ALiBi
papers' architecture; 4 layers, d_model 64, 4 heads) copies strings of length 1-8 over 10
symbols, for 3,000 steps with a cosine schedule, one seed per scheme. Four schemes: none (NoPE),
ALiBi, RoPE and sinusoidal. Every one learns the training lengths (at least 95% decoded exact
match) in about 75 s each on one CPU core, two at a time, and they are evaluated at every
length 1-16. What it showed when measured is in docs/results.md.

The small buckets are deliberate: the training sequence (source 8, SEP, target 8, EOS) fits in
9 + 9 slots, so no step pays for padding to 16 or 24.
"""

from pathlib import Path

from pe_research.config import load_config
from pe_research.sweeps import Sweep, product

REPO = Path(__file__).resolve().parents[2]
DEFAULT = REPO / "configs/default.py"
SCHEMES = ("none", "alibi", "rope", "sinusoidal")


def get_config():
    config = load_config(DEFAULT, validate=False)
    config.model.architecture = "decoder_only"
    config.model.num_decoder_layers = 4
    config.data.train_lengths = (1, 8)
    config.data.buckets = (9, 16, 24, 32)
    config.train.steps = 3000
    config.train.schedule = "cosine"
    config.train.log_every = 100
    config.train.eval_every = 1000
    config.train.checkpoint_every = 1000
    config.train.eval_lengths = (12, 16)
    config.eval.lengths = tuple(range(1, 17))
    config.wandb.group = "demo"
    return config


def sweep():
    return Sweep(grid=product({"model.pe.type": list(SCHEMES)}), seeds=(0,))
