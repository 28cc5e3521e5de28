"""pe-research sweep experiments/studies/demo/demo_sort_seeds.py \
    --workdir runs/demo_sort_seeds --jobs 2

demo_seeds.py on the NoPE paper's single-token sort: the same decoder-only model (4 layers,
d_model 64) and five schemes (NoPE, ALiBi, RoPE, sinusoidal, T5), three seeds each. As in the
paper's generator (Kazemnejad et al. 2023, scripts/dataset_builders/make_sort_dataset.py,
split len_sngd_tr8_ts16), a string is n tokens drawn with replacement from 50 symbols and the
target is the same tokens in increasing order; it trains on n = 1-8 and is evaluated at every
length 1-16. It trains 5,000 steps, as reverse_string does at 1-8. It asks whether the ordering
beyond the training lengths measured on copy and reverse_string holds on a task whose output
order does not follow input positions. About 21 minutes on 2 CPU cores; what it showed is in
docs/studies/demo.md.
"""

from pathlib import Path

from pe_research.config import load_config
from pe_research.sweeps import Sweep, product

REPO = Path(__file__).resolve().parents[3]
SEEDS = REPO / "experiments/studies/demo/demo_seeds.py"


def get_config():
    config = load_config(SEEDS, validate=False)
    config.task.name = "sort"
    config.task.alphabet_size = 50
    config.task.distinct = False
    config.train.steps = 5000
    config.wandb.group = "demo_sort_seeds"
    return config


def sweep():
    return Sweep(grid=product({"model.pe.type": ["none", "alibi", "rope", "sinusoidal", "t5"]}),
                 seeds=(0, 1, 2))
