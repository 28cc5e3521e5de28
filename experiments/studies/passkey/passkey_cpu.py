"""pe-research sweep experiments/studies/passkey/passkey_cpu.py --workdir runs/passkey

Passkey retrieval (tasks/passkey.py, the tiny format: a 5-digit key at a random depth in the
authors' filler) at CPU scale: the decoder-only causal LM of
configs/sweeps/nope_decoder_only_cpu.py (4 layers, d_model 64, 4 heads) trained on 1-48 filler
characters for 1,000 steps, RoPE, ALiBi and NoPE, three seeds each (a scheme's seeds in one
program). Scored on a length x depth grid, RoPE also under its test-time extensions, by
experiments/studies/passkey/depth_table.py. The study is docs/studies/passkey.md.
"""

from pathlib import Path

import ml_collections

from pe_research.config import default_task_block, load_config
from pe_research.sweeps import Sweep, product

REPO = Path(__file__).resolve().parents[3]
BASE = REPO / "configs/sweeps/nope_decoder_only_cpu.py"


def get_config():
    config = load_config(BASE, validate=False)
    config.task = ml_collections.ConfigDict(default_task_block("passkey"))
    config.data.train_lengths = (1, 48)
    config.data.length_sampling = "mixed"
    config.data.buckets = (32, 64, 128, 256, 512)
    config.data.eval_samples = 32
    config.train.steps = 1000
    config.train.eval_every = 500
    config.train.checkpoint_every = 500
    config.train.eval_lengths = (64, 96)
    config.eval.lengths = (24, 48, 96, 160, 256)
    config.wandb.group = "passkey"
    return config


def sweep():
    return Sweep(grid=product({"model.pe.type": ["rope", "alibi", "none"]}), seeds=(0, 1, 2),
                 members_per_program="auto")
