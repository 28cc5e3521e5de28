"""pe-research sweep configs/sweeps/randomized_pe_all_tasks_cpu.py --workdir runs/rpe_all_tasks_cpu

The randomized-PE table (configs/sweeps/randomized_pe_table.py) on all 15 Chomsky-hierarchy tasks
at 2-core CPU scale: RoPE and the paper's relative scheme (Transformer-XL), each plain and
randomized over [0, 256), 3 seeds stacked per grid point (60 points, 180 runs). Encoder-only,
2 layers, d_model 64, no end-token slot (as the paper), training lengths 1-10 (from a task's
shortest length), 2,000 steps at batch 32. Every length 1-30 is evaluated, so the table's
average over the test lengths 11-30 is the papers' uniform one:

    pe-research table 'runs/rpe_all_tasks_cpu/*/*' --metric output_token_accuracy

Each cell also shows its in-distribution score, which marks a task the budget did not learn.
"""

from pathlib import Path

from pe_research.config import load_config, load_user_module
from pe_research.sweeps import Sweep
from pe_research.tasks import BENCHMARK_TASKS

REPO = Path(__file__).resolve().parents[2]
TABLE = REPO / "configs/sweeps/randomized_pe_table.py"
CPU_TABLE = REPO / "configs/sweeps/randomized_pe_table_cpu.py"
SCHEMES = ("rope", "transformer_xl")
LONGEST_TRAINED, LONGEST_EVALUATED, MAX_POSITION = 10, 30, 256


def get_config():
    config = load_config(CPU_TABLE, validate=False)  # its model, data and training
    config.train.predict_eos = False  # as the paper (and the full table)
    config.train.log_every = 200
    config.eval.lengths = tuple(range(1, LONGEST_EVALUATED + 1))
    config.wandb.group = "randomized_pe_all_tasks_cpu"
    return config


def sweep():
    table = load_user_module(TABLE)
    grid = table.grid(BENCHMARK_TASKS, SCHEMES, MAX_POSITION, MAX_POSITION, LONGEST_TRAINED)
    for point in grid:  # a task with a shortest length > 1 is evaluated from it
        if "data.train_lengths" in point:
            shortest = point["data.train_lengths"][0]
            point["eval.lengths"] = tuple(range(shortest, LONGEST_EVALUATED + 1))
    return Sweep(grid=grid, seeds=(0, 1, 2), members_per_program="auto")
