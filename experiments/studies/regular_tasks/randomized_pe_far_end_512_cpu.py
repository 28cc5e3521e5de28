"""pe-research sweep experiments/studies/regular_tasks/randomized_pe_far_end_512_cpu.py \
    --workdir runs/rpe_far512

Randomized sin/cos, learned and RoPE positions on even_pairs as in
randomized_pe_even_pairs_no_eos_cpu.py, drawn from [0, 512) instead of [0, 128). Over 128 the
absolute schemes' last-token heads point at an absolute band of positions, below where the last
token sits at long test lengths; RoPE's point at an offset. If that is why they lose the far end,
a wider range moves the band with the test positions and the edge stays at the same length; if
the dense spacing of long test sequences is why, the edge moves out. 3 seeds. About 25 minutes
on 2 CPU cores; what it showed is in docs/results.md.
"""

from pathlib import Path

from pe_research.config import load_config
from pe_research.sweeps import Sweep

REPO = Path(__file__).resolve().parents[3]
BASE = REPO / "experiments/studies/regular_tasks/randomized_pe_even_pairs_no_eos_cpu.py"
STEPS = {"sinusoidal": 5_000, "learned": 20_000, "rope": 5_000}  # as over [0, 128)


def get_config():
    config = load_config(BASE, validate=False)
    config.wandb.group = "randomized_pe_far_end_512_cpu"
    return config


def sweep():
    grid = []
    for scheme, steps in STEPS.items():
        point = {"task.name": "even_pairs", "model.pe.type": scheme,
                 "model.pe.randomize.max_position": 512, "model.pe.randomize.per": "batch",
                 "train.steps": steps, "train.eval_every": steps // 10,
                 "train.checkpoint_every": steps // 10}
        if scheme == "learned":
            point["model.pe.max_len"] = 512
        grid.append(point)
    return Sweep(grid=grid, seeds=(0, 1, 2))
