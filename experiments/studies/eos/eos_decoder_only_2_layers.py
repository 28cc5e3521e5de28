"""pe-research sweep experiments/studies/eos/eos_decoder_only_2_layers.py \
    --workdir runs/eos_dec2 --jobs 2

A control for eos_encoder_decoder.py: there, a 2-layer encoder with a 2-layer decoder gained
from -EOS on reverse_string, while the 4-layer decoder-only models of demo_eos.py lost. This is
the decoder-only model at the encoder-decoder's depth per stack (2 layers), same task, steps and
seeds, so depth and architecture come apart. ALiBi, T5 and RoPE (NoPE is left out: with 2
layers it had not learned even copy after 3,000 steps), +EOS and -EOS. About 10 minutes on 2
CPU cores; compare the arms with experiments/studies/eos/eos_decision.py; what it showed is in
docs/results.md.
"""

from pathlib import Path

from pe_research.config import load_config
from pe_research.sweeps import Sweep, product

REPO = Path(__file__).resolve().parents[3]
REVERSE = REPO / "experiments/studies/demo/demo_reverse_seeds.py"


def get_config():
    config = load_config(REVERSE, validate=False)
    config.model.num_decoder_layers = 2
    config.eval.oracle_length = True
    config.wandb.group = "eos_decoder_only_2_layers"
    return config


def sweep():
    return Sweep(grid=product({"model.pe.type": ["alibi", "t5", "rope"],
                               "train.predict_eos": [True, False]}), seeds=(0, 1, 2))
