"""pe-research sweep experiments/studies/t5_buckets/t5_max_distance_trained.py \
    --workdir runs/t5_m1024 --jobs 2

A follow-up to experiments/studies/t5_buckets/t5_max_distance.py. There, T5 with 16 causal buckets
trained with
max_distance 128 and evaluated with 1024 went from 6 to 50 % exact match beyond the training
lengths on reverse_string (copy: 35 to 53 %), with the same weights. This trains with 1024 from
the start, everything else as in t5_buckets_reverse.py, to tell whether the gain needs the
bucket trained on the shorter span or only the wider span. About 4 minutes on 2 CPU cores; copy
at the demo's 3,000 steps: add `--config.task.name=copy --config.train.steps=3000`. What both
showed is in docs/results.md.
"""

from pathlib import Path

from pe_research.config import load_config
from pe_research.sweeps import Sweep

REPO = Path(__file__).resolve().parents[3]
REVERSE = REPO / "experiments/studies/demo/demo_reverse_seeds.py"


def get_config():
    config = load_config(REVERSE, ["model.pe.type=t5", "model.pe.num_buckets=16"],
                         validate=False)
    config.wandb.group = "t5_max_distance_trained"
    return config


def sweep():
    return Sweep(grid=[{"model.pe.max_distance": 1024}], seeds=(0, 1, 2))
