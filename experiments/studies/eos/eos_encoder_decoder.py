"""pe-research sweep experiments/studies/eos/eos_encoder_decoder.py \
    --workdir runs/eos_encdec --jobs 2

The EOS decision on reverse_string in an encoder-decoder: demo_eos.py's reverse_string setup
(lengths 1-8, 5,000 steps, three seeds) with the architecture of the SCAN sweep
(scan_eos_cpu.py: a 2-layer encoder and a 2-layer decoder) instead of the 4-layer decoder-only
model. -EOS beat +EOS at the oracle length on SCAN (encoder-decoder) but not on the algorithmic
tasks (decoder-only); this separates the task from the architecture. RoPE, sinusoidal and T5
(ALiBi and NoPE are left out: a symmetric encoder cannot tell a string from its reverse), +EOS
and -EOS. About 20 minutes on 2 CPU cores; compare the arms with
experiments/studies/eos/eos_decision.py;
what it showed is in docs/results.md.
"""

from pathlib import Path

from pe_research.config import load_config
from pe_research.sweeps import Sweep, product

REPO = Path(__file__).resolve().parents[3]
REVERSE = REPO / "experiments/studies/demo/demo_reverse_seeds.py"


def get_config():
    config = load_config(REVERSE, validate=False)
    config.model.architecture = "encoder_decoder"
    config.model.num_encoder_layers = 2
    config.model.num_decoder_layers = 2
    config.eval.oracle_length = True
    config.wandb.group = "eos_encoder_decoder"
    return config


def sweep():
    return Sweep(grid=product({"model.pe.type": ["rope", "sinusoidal", "t5"],
                               "train.predict_eos": [True, False]}), seeds=(0, 1, 2))
