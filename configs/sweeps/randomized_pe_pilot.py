"""pe-research sweep configs/sweeps/randomized_pe_pilot.py --workdir runs/rpe_pilot

A pilot of the randomized-PE table (configs/sweeps/randomized_pe_table.py) for one accelerator:
one cell of the table at the paper's own model and protocol, reverse_string with RoPE, plain and
randomized over [0, 2048), 3 seeds. The 6 runs stack in one program, as the full table's
grouping stacks a scheme's tasks and both arms. Every length 1-500 is evaluated, so the table's
average over 41-500 is the paper's uniform one:

    pe-research table 'runs/rpe_pilot/*/*' --metric output_token_accuracy

The full table trains each run for 100,000 steps; a GPU lent for minutes takes a stated fraction
of them (`--config.train.steps=10000`, benchmarks/gpu_session.sh). Another cell: TASK and SCHEME
below (the grid points set both, so `--config.task.name=...` would not change them).
"""

from pathlib import Path

from pe_research.config import load_config, load_user_module
from pe_research.sweeps import Sweep

REPO = Path(__file__).resolve().parents[2]
TABLE = REPO / "configs/sweeps/randomized_pe_table.py"
TASK, SCHEME = "reverse_string", "rope"
LONGEST_TRAINED, LONGEST_EVALUATED, MAX_POSITION = 40, 500, 2048


def get_config():
    config = load_config(TABLE, validate=False)  # the paper's model, data and training
    config.eval.lengths = tuple(range(1, LONGEST_EVALUATED + 1))
    config.train.eval_lengths = (100, 500)
    config.wandb.group = "randomized_pe_pilot"
    return config


def sweep():
    table = load_user_module(TABLE)
    grid = table.grid((TASK,), (SCHEME,), MAX_POSITION, MAX_POSITION, LONGEST_TRAINED)
    return Sweep(grid=grid, seeds=(0, 1, 2), members_per_program="auto")
