"""pe-research sweep experiments/studies/rope_finetuning/rope_scaling_finetune_cpu.py \
    --workdir runs/rope_ft

Position interpolation's claim (Chen et al. 2023), at CPU scale: a RoPE model fine-tuned on
longer inputs with its positions interpolated adapts in fewer steps than one fine-tuned with its
positions extrapolated. The sources are the plain RoPE reverse_string runs of
randomized_pe_reverse_rope_cpu.py (encoder-only, lengths 1-10, i.e. 21 positions, 20,000 steps;
train them first into runs/rpe_rev_rope). Each seed is fine-tuned from its own last checkpoint on
lengths 1-20 (41 positions) for 2,000 steps at a constant 3e-4 after 20 warm-up steps, with the
frequencies unchanged ('none': extrapolation), divided by 2 ('pi'), NTK-aware ('ntk') or YaRN
('yarn'), all for a factor of 2 over the 21 trained positions. Checkpoints every 100 steps are
kept (the latest 20: evaluate them with experiments/studies/rope_finetuning/fine_tuning_curves.py
before going on with
--config.train.steps=6000, which docs/results.md did). 11 minutes on 2 CPU cores; what it showed
is in docs/results.md.
"""

from pathlib import Path

from pe_research.config import load_config
from pe_research.sweeps import Sweep, product

REPO = Path(__file__).resolve().parents[3]
BASE = REPO / "experiments/studies/randomized_pe_table/randomized_pe_reverse_rope_cpu.py"
SOURCES = REPO / "runs" / "rpe_rev_rope" / "max_position=0"


def get_config():
    config = load_config(BASE, validate=False)
    config.data.train_lengths = (1, 20)
    config.train.init_from = str(SOURCES / "seed_{seed}")
    config.train.init_checkpoint = "latest"
    config.train.steps = 2_000
    config.train.schedule = "constant"
    config.train.learning_rate = 3e-4
    config.train.warmup_steps = 20
    config.train.log_every = 100
    config.train.eval_every = 100
    config.train.checkpoint_every = 100
    config.train.keep_checkpoints = 20
    config.train.eval_lengths = (20, 30, 40)
    config.eval.lengths = (*range(1, 21), 25, 30, 35, 40)
    config.eval.checkpoint = "latest"
    config.wandb.group = "rope_scaling_finetune_cpu"
    return config


def sweep():
    return Sweep(grid=product({"task.name": ["reverse_string"], "model.pe.type": ["rope"],
                               "model.pe.randomize.max_position": [0],  # as the sources
                               "model.pe.scaling.type": ["none", "pi", "ntk", "yarn"],
                               "model.pe.scaling.factor": [2.0],
                               "model.pe.scaling.original_max_position": [21]}),
                 seeds=(0, 1, 2))
