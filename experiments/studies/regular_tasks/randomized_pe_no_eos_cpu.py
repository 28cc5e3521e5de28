"""pe-research sweep experiments/studies/regular_tasks/randomized_pe_no_eos_cpu.py \
    --workdir runs/rpe_no_eos --jobs 2

even_pairs with Transformer-XL from randomized_pe_regular_cpu.py, with the end token left out of
the loss (train.predict_eos=False). This codebase's encoder-only model reads the input followed by
one slot per output token and one for the end token, and learns to write the end token there;
the randomized-PE paper's model has no end-token slot. Does the extra target change how far the
models extrapolate? The papers' score, output-token accuracy, ignores the end token, so it
compares the two directly. 3 seeds per arm, as in that sweep. About 15 minutes on 2 CPU cores;
what it showed is in docs/results.md.
"""

from pathlib import Path

from pe_research.config import load_config
from pe_research.sweeps import Sweep, product

REPO = Path(__file__).resolve().parents[3]
BASE = REPO / "experiments/studies/regular_tasks/randomized_pe_regular_cpu.py"


def get_config():
    config = load_config(BASE, validate=False)
    config.train.predict_eos = False
    config.wandb.group = "randomized_pe_no_eos_cpu"
    return config


def sweep():
    return Sweep(grid=product({"task.name": ["even_pairs"],
                               "model.pe.randomize.max_position": [0, 128]}),
                 seeds=(0, 1, 2))
