"""pe-research sweep experiments/studies/regular_tasks/randomized_pe_even_pairs_rescored_cpu.py \
    --workdir runs/rpe_res

The randomized arms of even_pairs with the end-token slot (randomized_pe_even_pairs_cpu.py for
sin/cos and RoPE, 5,000 steps; randomized_pe_even_pairs_longer_cpu.py for learned positions,
20,000 steps), trained again so that they can be scored with every test example on its own
position draw: their first scoring put all 256 examples of a length on one draw. The plain arms
have nothing to draw and keep their numbers. 3 seeds. About 10 minutes on 2 CPU cores with
--jobs 2; what it showed is in docs/results.md.
"""

from pathlib import Path

from pe_research.config import load_config, load_user_module
from pe_research.sweeps import Sweep

REPO = Path(__file__).resolve().parents[3]
BASE = REPO / "experiments/studies/regular_tasks/randomized_pe_even_pairs_cpu.py"
LONGER = {"train.steps": 20_000, "train.eval_every": 2_000, "train.checkpoint_every": 2_000}


def get_config():
    config = load_config(BASE, validate=False)
    config.wandb.group = "randomized_pe_even_pairs_rescored_cpu"
    return config


def sweep():
    # the paper's grid, one task
    table = load_user_module(REPO / "configs/sweeps/randomized_pe_table.py")
    points = [point for point in table.grid(("even_pairs",), ("sinusoidal", "rope", "learned"),
                                            128, 256, 10)
              if point["model.pe.randomize.max_position"]]
    return Sweep(grid=[{**point, **(LONGER if point["model.pe.type"] == "learned" else {})}
                       for point in points], seeds=(0, 1, 2))
