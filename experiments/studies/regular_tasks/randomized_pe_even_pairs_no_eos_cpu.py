"""pe-research sweep experiments/studies/regular_tasks/randomized_pe_even_pairs_no_eos_cpu.py \
    --workdir runs/rpe_neos

Sin/cos, learned and RoPE positions on even_pairs, plain and randomized over [0, 128), with the
end token left out of the loss and scored at the oracle length, as the randomized-PE paper's
model is trained. Without the end-token slot plain ALiBi gained 40 points beyond the training
lengths (randomized_pe_alibi_no_eos_cpu.py): part of what the +EOS comparison credited to
randomized positions was plain models failing at the slot. Is that so for these schemes too?
Each arm changes only the slot against its +EOS sweep: sin/cos and RoPE train 5,000 steps as in
randomized_pe_even_pairs_cpu.py, learned 20,000 as in randomized_pe_even_pairs_longer_cpu.py.
3 seeds. About 30 minutes on 2 CPU cores; what it showed is in docs/results.md.
"""

from pathlib import Path

from pe_research.config import load_config, load_user_module
from pe_research.sweeps import Sweep

REPO = Path(__file__).resolve().parents[3]
BASE = REPO / "experiments/studies/regular_tasks/randomized_pe_even_pairs_longer_cpu.py"
STEPS = {"sinusoidal": 5_000, "learned": 20_000, "rope": 5_000}  # as in its +EOS sweep


def get_config():
    config = load_config(BASE, validate=False)
    config.train.predict_eos = False
    config.wandb.group = "randomized_pe_even_pairs_no_eos_cpu"
    return config


def sweep():
    # the paper's grid, one task
    table = load_user_module(REPO / "configs/sweeps/randomized_pe_table.py")
    grid = table.grid(("even_pairs",), tuple(STEPS), 128, 256, 10)
    for point in grid:
        steps = STEPS[point["model.pe.type"]]
        interval = steps // 10  # the +EOS sweeps evaluated and saved 10 times
        point.update({"train.steps": steps, "train.eval_every": interval,
                      "train.checkpoint_every": interval})
    return Sweep(grid=grid, seeds=(0, 1, 2))
