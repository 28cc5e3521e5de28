"""pe-research sweep experiments/studies/eos/scan_eos_cpu.py --workdir runs/scan_eos --jobs 2

The EOS decision on SCAN's length split (Newman et al. 2020, "The EOS Decision and Length
Extrapolation"): models trained to predict the end token (+EOS, ``train.predict_eos=True``) or
not (-EOS: the loss skips it), all evaluated with the end token forced at the true length
(``eval.oracle_length``, metric ``oracle_exact_match``) as well as decoding freely. The paper
reports -EOS well above +EOS at the oracle length on this split. A CPU-sized cut of
configs/scan_length.py (2+2 layers, d_model 64), RoPE and sinusoidal positions, three seeds per
point trained stacked, evaluated on the test split's lengths (24-48: scan_length.py's
eval.lengths; the eval set holds only those). Needs the official files in data/scan
(``pe-research data scan --to data/scan``); what it showed is in docs/results.md.
"""

from pathlib import Path

from pe_research.config import load_config
from pe_research.sweeps import Sweep, product

REPO = Path(__file__).resolve().parents[3]
BASE = REPO / "configs/scan_length.py"


def get_config():
    config = load_config(BASE, validate=False)
    config.data.batch_size = 64
    config.model.d_model = 64
    config.model.num_heads = 4
    config.model.num_encoder_layers = 2
    config.model.num_decoder_layers = 2
    config.model.d_ff = 256
    config.train.steps = 6_000
    config.train.eval_every = 1_000
    config.train.checkpoint_every = 1_000
    config.eval.oracle_length = True
    config.wandb.group = "scan_eos_cpu"
    return config


def sweep():
    return Sweep(grid=product({"model.pe.type": ["rope", "sinusoidal"],
                               "train.predict_eos": [True, False]}), seeds=(0, 1, 2))
