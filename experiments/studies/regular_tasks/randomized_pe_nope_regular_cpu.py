"""pe-research sweep experiments/studies/regular_tasks/randomized_pe_nope_regular_cpu.py \
    --workdir runs/rpe_nope

NoPE on the three regular tasks of randomized_pe_regular_cpu.py, with the end token left out of
the loss (train.predict_eos=False) and scored at the oracle length. With the end token in the
loss a NoPE encoder-only model cannot score: its answer slot and its end-token slot are the same
input, so it writes the same token in both. Without it, the tasks split by what they need:
even_pairs (first bit != last bit) depends on order, which a bidirectional model without
positions cannot see, so it should stay at chance even in distribution; cycle_navigation and
parity_check are counts, which do not depend on order. Does a model that cannot see order count
past its training lengths? 3 seeds, 10,000 steps as in that sweep. About 20 minutes on 2 CPU
cores; what it showed is in docs/results.md.
"""

from pathlib import Path

from pe_research.config import load_config
from pe_research.sweeps import Sweep, product

REPO = Path(__file__).resolve().parents[3]
BASE = REPO / "experiments/studies/regular_tasks/randomized_pe_regular_cpu.py"


def get_config():
    config = load_config(BASE, validate=False)
    config.train.predict_eos = False
    config.eval.oracle_length = True
    config.wandb.group = "randomized_pe_nope_regular_cpu"
    return config


def sweep():
    return Sweep(grid=product({"task.name": ["even_pairs", "cycle_navigation", "parity_check"],
                               "model.pe.type": ["none"], "model.pe.randomize.max_position": [0]}),
                 seeds=(0, 1, 2))
