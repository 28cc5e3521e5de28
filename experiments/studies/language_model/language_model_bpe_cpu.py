"""pe-research sweep experiments/studies/language_model/language_model_bpe_cpu.py \
    --workdir runs/lm_bpe --jobs 2

language_model_cpu.py with the papers' unit of text: byte-level BPE subwords (1,024 learned from
the training part of the Python source) instead of characters. Windows of 64 subwords (about
170 characters) in training, 16 to 1,024 subwords in evaluation; ALiBi's four schemes, Kerple
(log) and NoPE, two seeds each. What it showed is in docs/results.md.
"""

from pathlib import Path

from pe_research.config import load_config
from pe_research.sweeps import Sweep, product

REPO = Path(__file__).resolve().parents[3]
BASE = REPO / "configs/language_model.py"
SCHEMES = ("sinusoidal", "rope", "t5", "alibi", "kerple_log", "none")


def get_config():
    config = load_config(BASE, validate=False)
    config.task.tokenizer = "bpe"
    config.task.vocab_size = 1024
    config.wandb.group = "language_model_bpe"
    return config


def sweep():
    return Sweep(grid=product({"model.pe.type": list(SCHEMES)}), seeds=(0, 1))
