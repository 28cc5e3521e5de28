"""pe-research sweep experiments/studies/demo/demo_seeds_1_20_alphabet_100.py \
    --workdir runs/demo_seeds_1_20_alphabet_100 --jobs 2

demo_seeds_1_20.py on the NoPE paper's own copy data: its split cmc_tr20_ts40
(scripts/dataset_builders/make_copy_dataset.py in McGill-NLP/length-generalization) draws each
token with replacement from 100 symbols, where demo_seeds_1_20.py draws from 10. Everything else
is the same: decoder-only, 4 layers, d_model 64, five schemes (NoPE, ALiBi, RoPE, sinusoidal,
T5), three seeds each, trained on lengths 1-20 for 4,000 steps and evaluated at every length
1-40. It asks whether ALiBi's lead over NoPE on copy at 1-20 survives strings whose tokens
rarely repeat. About 54 minutes on 2 CPU cores, the report included; what it showed is in
docs/studies/demo.md.
"""

from pathlib import Path

from pe_research.config import load_config
from pe_research.sweeps import Sweep, product

REPO = Path(__file__).resolve().parents[3]
COPY_1_20 = REPO / "experiments/studies/demo/demo_seeds_1_20.py"


def get_config():
    config = load_config(COPY_1_20, validate=False)
    config.task.alphabet_size = 100
    config.wandb.group = "demo_seeds_1_20_alphabet_100"
    return config


def sweep():
    return Sweep(grid=product({"model.pe.type": ["none", "alibi", "rope", "sinusoidal", "t5"]}),
                 seeds=(0, 1, 2))
