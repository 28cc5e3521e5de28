"""pe-research sweep experiments/studies/rope_base/rope_base_cpu.py \
    --workdir runs/rope_base --jobs 2

RoPE's base (``model.pe.max_wavelength``, theta) at the demo's scale: the decoder-only copy of
configs/sweeps/demo.py (4 layers, d_model 64, head size 16: 8 frequencies theta^(-2i/16)),
trained on lengths 1-8 for 3,000 steps and evaluated at every length 1-16, with bases from 10 to
10^6, six seeds each. The grid points differ only in the base, so their 30 runs train stacked
in programs of up to 8 on a CPU (``members_per_program="auto"``). About 25 minutes on 2 CPU cores.

The question comes from Liu et al. 2023 ("Scaling Laws of RoPE-based Extrapolation"): a RoPE
dimension whose period is longer than the training context never completes a turn in training,
and those dimensions are where extrapolation fails; a small base (they fine-tune with 500) gives
every dimension whole periods within the context. What it showed: docs/studies/rope_base.md.
"""

from pathlib import Path

from pe_research.config import load_config
from pe_research.sweeps import Sweep, product

REPO = Path(__file__).resolve().parents[3]
DEMO = REPO / "configs/sweeps/demo.py"
BASES = (10.0, 100.0, 500.0, 10_000.0, 1_000_000.0)


def get_config():
    config = load_config(DEMO, validate=False)
    config.model.pe.type = "rope"
    config.wandb.group = "rope_base"
    return config


def sweep():
    return Sweep(grid=product({"model.pe.max_wavelength": list(BASES)}), seeds=(0, 1, 2, 3, 4, 5),
                 members_per_program="auto")
