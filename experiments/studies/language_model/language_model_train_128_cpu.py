"""pe-research sweep experiments/studies/language_model/language_model_train_128_cpu.py \
    --workdir runs/lm_128

language_model_cpu.py at a second training length: windows of 128 characters instead of 64,
16 windows a batch instead of 32 (the same 2,048 characters a step, so the same compute), scored
on 16 to 2,048 characters (16x the training length, as 1,024 was for 64). ALiBi's paper shows
its fig. 1 ordering at two training lengths (512 and 1,024); this asks whether the CPU-scale
ordering and ALiBi's flat curve hold when the training length doubles. ALiBi's four schemes,
Kerple (log) and NoPE, two seeds each: about 12 min per pair of seeds, two pairs at a time on 2
cores. docs/results.md has all six.
"""

from pathlib import Path

from pe_research.config import load_config
from pe_research.sweeps import Sweep, product

REPO = Path(__file__).resolve().parents[3]
BASE = REPO / "configs/language_model.py"
SCHEMES = ("sinusoidal", "rope", "t5", "alibi", "kerple_log", "none")


def get_config():
    config = load_config(BASE, validate=False)
    config.data.train_lengths = (128, 128)
    config.data.batch_size = 16
    config.data.buckets = (33, 65, 129, 257, 513, 1025, 2049)
    config.train.eval_lengths = (256, 512)
    config.eval.lengths = (16, 32, 64, 128, 192, 256, 384, 512, 768, 1024, 1536, 2048)
    config.wandb.group = "language_model_train_128"
    return config


def sweep():
    return Sweep(grid=product({"model.pe.type": list(SCHEMES)}), seeds=(0, 1))
