"""pe-research sweep experiments/studies/dape_fire/dape_even_pairs_cpu.py \
    --workdir runs/dape_even_pairs --jobs 2

DAPE (Zheng et al. 2024) on even_pairs: does its MLP over logits and bias extend how far its
base bias scheme holds? ALiBi and Kerple (log), each alone and under DAPE, with plain positions,
trained as randomized_pe_alibi_no_eos_cpu.py trains (encoder-only, lengths 1-10, 20,000 steps,
the end token out of the loss) and evaluated up to length 100. 3 seeds. About 50 minutes on 2
CPU cores; what it showed is in docs/results.md.
"""

from pathlib import Path

from pe_research.config import load_config
from pe_research.sweeps import Sweep

REPO = Path(__file__).resolve().parents[3]
BASE = REPO / "experiments/studies/regular_tasks/randomized_pe_alibi_no_eos_cpu.py"
BIASES = ("alibi", "kerple_log")


def get_config():
    config = load_config(BASE, validate=False)
    config.wandb.group = "dape_even_pairs_cpu"
    return config


def sweep():
    plain = {"task.name": "even_pairs", "model.pe.randomize.max_position": 0}
    grid = []
    for base in BIASES:
        grid.append({**plain, "model.pe.type": base})
        grid.append({**plain, "model.pe.type": "dape", "model.pe.base": base})
    return Sweep(grid=grid, seeds=(0, 1, 2))
