"""pe-research sweep experiments/studies/rope_finetuning/rope_reverse_1_20_scratch_cpu.py \
    --workdir runs/rope_scratch

The control of rope_scaling_finetune_cpu.py: the same RoPE model trained from scratch on
lengths 1-20 with plain positions, under the sources' own recipe (20,000 steps, cosine from 1e-3,
500 warm-up steps, as randomized_pe_reverse_rope_cpu.py on lengths 1-10): can this model learn
lengths 1-20 at all, and how many steps does it take without a source? 3 seeds. 46 minutes on
2 CPU cores beside another sweep; what it showed is in docs/results.md.
"""

from pathlib import Path

from pe_research.config import load_config
from pe_research.sweeps import Sweep, product

REPO = Path(__file__).resolve().parents[3]
BASE = REPO / "experiments/studies/rope_finetuning/rope_scaling_finetune_cpu.py"


def get_config():
    config = load_config(BASE, validate=False)
    config.train.init_from = ""
    config.train.steps = 20_000
    config.train.schedule = "cosine"
    config.train.learning_rate = 1e-3
    config.train.warmup_steps = 500
    config.train.log_every = 500
    config.train.eval_every = 500
    config.train.checkpoint_every = 2_000
    config.train.keep_checkpoints = 2
    config.eval.checkpoint = "best"
    config.wandb.group = "rope_reverse_1_20_scratch_cpu"
    return config


def sweep():
    return Sweep(grid=product({"task.name": ["reverse_string"], "model.pe.type": ["rope"],
                               "model.pe.randomize.max_position": [0]}),
                 seeds=(0, 1, 2))
