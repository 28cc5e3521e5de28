"""pe-research sweep configs/sweeps/randomized_pe_table_cpu.py --workdir runs/rpe_table_cpu

configs/sweeps/randomized_pe_table.py cut to a 2-core CPU: the same encoder-only model and
per-batch randomized positions, on 3 tasks (one per Chomsky class: parity_check, reverse_string,
duplicate_string), 2 schemes (sin/cos and the paper's relative one, Transformer-XL) plain and
randomized over [0, 256), 2 seeds; a smaller model (2 layers, d_model 64), training lengths
1-10 for 2,000 steps, evaluation up to length 30. It writes the same table (`pe-research
table`); what it showed is in docs/results.md.
"""

from pathlib import Path

from pe_research.config import load_config, load_user_module
from pe_research.sweeps import Sweep

REPO = Path(__file__).resolve().parents[2]
TABLE = REPO / "configs/sweeps/randomized_pe_table.py"
TASKS = ("parity_check", "reverse_string", "duplicate_string")
SCHEMES = ("sinusoidal", "transformer_xl")


def get_config():
    config = load_config(TABLE, validate=False)
    config.data.train_lengths = (1, 10)
    config.data.batch_size = 32
    config.data.buckets = (16, 32, 64)
    config.data.eval_samples = 64
    config.model.num_encoder_layers = 2
    config.model.num_heads = 4
    config.model.dropout_rate = 0.0
    config.model.pe.randomize.max_position = 256
    config.train.predict_eos = True  # the end-token slot, as when its results were recorded
    config.train.steps = 2000
    config.train.learning_rate = 1e-3
    config.train.log_every = 100
    config.train.eval_every = 1000
    config.train.checkpoint_every = 1000
    config.train.eval_lengths = (20,)
    config.eval.lengths = (*range(1, 11), 12, 14, 16, 18, 20, 25, 30)
    config.eval.batch_size = 64
    config.wandb.group = "randomized_pe_table_cpu"
    return config


def sweep():
    table = load_user_module(TABLE)  # the full table's grid, on fewer tasks and schemes
    return Sweep(grid=table.grid(TASKS, SCHEMES, 256, 256, 10), seeds=(0, 1),
                 members_per_program="auto")
