"""pe-research sweep experiments/studies/addition/arithmetic_positions_cpu.py \
    --workdir runs/addition_positions

Position schemes built on the structure of addition, at CPU scale: Abacus embeddings (with NoPE
in attention, the authors' main model), position coupling and index hints against NoPE, FIRE
and a learned absolute table. One format for every scheme, Abacus' (McLeish et al. 2024):
operands and sum written least significant digit first, each number at its own width, operand
lengths drawn per pair (one operand n digits, the other 1 to n), one n from 1 to 10 per
training batch; position coupling also in its authors' format (Cho et al. 2024: operands
zero-padded and written as usual, the sum reversed). Evaluation adds two n-digit numbers, n up
to 40 (exact match of the greedy decoding). The decoder-only causal LM of
configs/sweeps/nope_decoder_only_cpu.py (4 layers, d_model 64, 4 heads), 5,000 steps, three
seeds. The study is docs/studies/addition.md.
"""

from pathlib import Path

import ml_collections

from pe_research.config import default_task_block, load_config
from pe_research.sweeps import Sweep

REPO = Path(__file__).resolve().parents[3]
BASE = REPO / "configs/sweeps/nope_decoder_only_cpu.py"
# name -> the overrides of one arm
ARMS: dict[str, dict] = {
    "abacus_nope": {"model.pe.type": "none", "model.pe.abacus": True},
    "coupling": {"model.pe.type": "position_coupling"},
    # The coupling authors' own format: zero-padded operands as written, the sum reversed.
    "coupling_own_format": {"model.pe.type": "position_coupling", "task.reversed_operands": False,
                            "task.zero_pad": True},
    "index_hints": {"model.pe.type": "none", "task.index_hints": True},
    "nope": {"model.pe.type": "none"},
    "fire": {"model.pe.type": "fire"},
    "learned": {"model.pe.type": "learned"},
}


def get_config():
    config = load_config(BASE, validate=False)
    config.task = ml_collections.ConfigDict(default_task_block("addition"))
    config.task.reversed = True
    config.task.operand_lengths = "per_pair"
    config.task.zero_pad = False
    config.data.train_lengths = (1, 10)
    config.data.length_sampling = "per_batch"  # one n per batch: short batches cost less
    config.data.batch_size = 64
    config.data.buckets = (4, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192)
    config.train.steps = 5000
    config.train.learning_rate = 3e-3
    config.train.schedule = "cosine"
    config.train.eval_every = 2500
    config.train.checkpoint_every = 2500
    config.train.eval_lengths = (20, 30)
    config.eval.lengths = (1, 2, 4, 6, 8, 10, 15, 20, 25, 30, 35, 40)
    config.wandb.group = "addition_positions"
    return config


def sweep():
    # One program per arm: index hints stacked with NoPE would pad NoPE's batches to the hinted
    # widths (twice as long), and a 6-member program runs on one core alone.
    return Sweep(grid=list(ARMS.values()), seeds=(0, 1, 2), members_per_program="point")
