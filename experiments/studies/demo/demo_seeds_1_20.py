"""pe-research sweep experiments/studies/demo/demo_seeds_1_20.py \
    --workdir runs/demo_seeds_1_20 --jobs 2

demo_seeds.py at the NoPE paper's lengths: the same decoder-only model (4 layers, d_model 64) and
five schemes (NoPE, ALiBi, RoPE, sinusoidal, T5), three seeds each, on copy trained on lengths
1-20 and evaluated at every length 1-40 (the grid docs/results.md gives for Kazemnejad et al.
2023; configs/sweeps/nope_decoder_only.py uses it at the paper's model size). Sequences are 2.5x
as long as the demo's, so it trains 4,000 steps instead of 3,000. It asks whether the demo's
ordering beyond the training lengths (NoPE and ALiBi ahead of T5, RoPE and sinusoidal, measured
at 1-8 -> 9-16) holds on that grid. About 46 minutes on 2 CPU cores, the report included; what
it showed is in docs/studies/demo.md.
"""

from pathlib import Path

from pe_research.config import load_config
from pe_research.sweeps import Sweep, product

REPO = Path(__file__).resolve().parents[3]
SEEDS = REPO / "experiments/studies/demo/demo_seeds.py"


def get_config():
    config = load_config(SEEDS, validate=False)
    config.data.train_lengths = (1, 20)
    config.data.buckets = (11, 21, 31, 41)
    config.train.steps = 4000
    config.train.eval_lengths = (30, 40)
    config.eval.lengths = tuple(range(1, 41))
    config.wandb.group = "demo_seeds_1_20"
    return config


def sweep():
    return Sweep(grid=product({"model.pe.type": ["none", "alibi", "rope", "sinusoidal", "t5"]}),
                 seeds=(0, 1, 2))
