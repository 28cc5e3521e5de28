"""pe-research sweep experiments/studies/eos/demo_eos.py --workdir runs/demo_eos --jobs 2

The EOS decision on the demo's algorithmic tasks: the decoder-only model, five schemes and three
seeds of demo_seeds.py (copy, 3,000 steps) and demo_reverse_seeds.py (reverse_string, 5,000
steps), trained without the end token in the loss (-EOS, ``train.predict_eos=False``) and
evaluated with the end token forced at the true length (``eval.oracle_length``, metric
``oracle_exact_match``). The +EOS arm is those two sweeps' runs, evaluated with
``--config.eval.oracle_length=True``. It asks how much of each scheme's failure beyond the
training lengths is where it stops rather than what it writes. About 40 minutes on 2 CPU cores;
what it showed is in docs/results.md.
"""

from pathlib import Path

from pe_research.config import load_config
from pe_research.sweeps import Sweep

REPO = Path(__file__).resolve().parents[3]
SEEDS = REPO / "experiments/studies/demo/demo_seeds.py"
SCHEMES = ("none", "alibi", "rope", "sinusoidal", "t5")
TASK_STEPS = {"copy": 3000, "reverse_string": 5000}


def get_config():
    config = load_config(SEEDS, validate=False)
    config.train.predict_eos = False
    config.eval.oracle_length = True
    config.wandb.group = "demo_eos"
    return config


def sweep():
    return Sweep(grid=[{"task.name": task, "train.steps": steps, "model.pe.type": scheme}
                       for task, steps in TASK_STEPS.items() for scheme in SCHEMES],
                 seeds=(0, 1, 2))
