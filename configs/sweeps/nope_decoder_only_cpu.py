"""pe-research sweep configs/sweeps/nope_decoder_only_cpu.py --workdir runs/nope_table_cpu

configs/sweeps/nope_decoder_only.py cut to a 2-core CPU: the same decoder-only causal LM, small
(4 layers, d_model 64, 4 heads), on copy and reverse_string of lengths 1-8 for 2,000 steps,
evaluated up to 16; NoPE, T5, ALiBi, RoPE and sinusoidal, 2 seeds each. About 28 minutes. It
writes the same table (`pe-research table ... --metric exact_match`); what it showed is in
docs/results.md.
"""

from pathlib import Path

from pe_research.config import load_config
from pe_research.sweeps import Sweep, product

REPO = Path(__file__).resolve().parents[2]
TABLE = REPO / "configs/sweeps/nope_decoder_only.py"


def get_config():
    config = load_config(TABLE, validate=False)
    config.model.d_model = 64
    config.model.num_heads = 4
    config.model.num_decoder_layers = 4
    config.model.d_ff = 256
    config.model.dtype = "float32"
    config.data.train_lengths = (1, 8)
    config.data.batch_size = 32
    config.data.buckets = (16, 24, 32)
    config.data.eval_samples = 64
    config.train.steps = 2000
    config.train.learning_rate = 3e-3
    config.train.warmup_steps = 100
    config.train.schedule = "constant"
    config.train.eval_every = 1000
    config.train.checkpoint_every = 1000
    config.train.eval_lengths = (12, 16)
    config.eval.lengths = tuple(range(1, 17))
    config.eval.batch_size = 64
    config.wandb.group = "nope_decoder_only_cpu"
    return config


def sweep():
    return Sweep(grid=product({"task.name": ["copy", "reverse_string"],
                               "model.pe.type": ["none", "t5", "alibi", "rope", "sinusoidal"]}),
                 seeds=(0, 1))
