"""pe-research sweep experiments/studies/demo/demo_reverse_seeds_1_20.py \
    --workdir runs/demo_reverse_seeds_1_20 --jobs 2

demo_reverse_seeds.py at the NoPE paper's lengths: the same decoder-only model (4 layers,
d_model 64) and five schemes (NoPE, ALiBi, RoPE, sinusoidal, T5), three seeds each, on
reverse_string trained on lengths 1-20 and evaluated at every length 1-40, as
demo_seeds_1_20.py does for copy. It trains 5,000 steps, as at 1-8 (a NoPE pilot reached 98 %
teacher-forced sequence accuracy at 1-20 by step 5,000). It asks whether the ordering beyond the
training lengths measured at 1-8 -> 9-16 (ALiBi and NoPE ahead of T5, sinusoidal and RoPE)
holds on that grid. About 65 minutes on 2 CPU cores, the report included; what it showed is in
docs/studies/demo.md.
"""

from pathlib import Path

from pe_research.config import load_config
from pe_research.sweeps import Sweep, product

REPO = Path(__file__).resolve().parents[3]
COPY_1_20 = REPO / "experiments/studies/demo/demo_seeds_1_20.py"


def get_config():
    config = load_config(COPY_1_20, validate=False)
    config.task.name = "reverse_string"
    config.train.steps = 5000
    config.wandb.group = "demo_reverse_seeds_1_20"
    return config


def sweep():
    return Sweep(grid=product({"model.pe.type": ["none", "alibi", "rope", "sinusoidal", "t5"]}),
                 seeds=(0, 1, 2))
