"""pe-research sweep experiments/studies/regular_tasks/randomized_pe_alibi_no_eos_cpu.py \
    --workdir runs/rpe_alibi_neos

ALiBi on even_pairs as in randomized_pe_even_pairs_longer_cpu.py (20,000 steps, plain and
randomized over [0, 128)), with the end token left out of the loss and scored at the oracle
length, as the randomized-PE paper's model is trained. With the end token, one randomized seed
in three did not learn the training lengths in 20,000 or 40,000 steps, and learned models of
both arms failed at the end-token slot at the far end. Does the slot cause either? 3 seeds.
About 25 minutes on 2 CPU cores; what it showed is in docs/results.md.
"""

from pathlib import Path

from pe_research.config import load_config
from pe_research.sweeps import Sweep, product

REPO = Path(__file__).resolve().parents[3]
BASE = REPO / "experiments/studies/regular_tasks/randomized_pe_even_pairs_longer_cpu.py"


def get_config():
    config = load_config(BASE, validate=False)
    config.train.predict_eos = False
    config.wandb.group = "randomized_pe_alibi_no_eos_cpu"
    return config


def sweep():
    return Sweep(grid=product({"task.name": ["even_pairs"], "model.pe.type": ["alibi"],
                               "model.pe.randomize.max_position": [0, 128],
                               "model.pe.randomize.per": ["batch"]}),
                 seeds=(0, 1, 2))
