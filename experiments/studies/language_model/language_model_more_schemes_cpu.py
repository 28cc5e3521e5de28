"""pe-research sweep experiments/studies/language_model/language_model_more_schemes_cpu.py \
    --workdir runs/lm_more

The language model of language_model_cpu.py (character-level Python source, windows of 64,
scored on 16 to 1,024) with the schemes whose papers also measure language models by
perplexity on longer inputs and that sweep left out: DAPE over ALiBi and over Kerple (Zheng et
al. 2024, trained short and tested up to 64x longer), CoPE (Golovneva et al. 2024, code and
Wikitext), PoPE (Gopalakrishnan et al. 2025, zero-shot length extrapolation against RoPE), and
the two learned relative schemes, Shaw's clipped distances and Transformer-XL's. Three seeds each;
what it showed is in docs/results.md.
"""

from pathlib import Path

from pe_research.config import load_config
from pe_research.sweeps import Sweep

REPO = Path(__file__).resolve().parents[3]
BASE = REPO / "configs/language_model.py"
GRID = (
    {"model.pe.type": "dape", "model.pe.base": "alibi"},
    {"model.pe.type": "dape", "model.pe.base": "kerple_log"},
    {"model.pe.type": "cope"},
    {"model.pe.type": "pope"},
    {"model.pe.type": "shaw"},
    {"model.pe.type": "transformer_xl"},
)


def get_config():
    config = load_config(BASE, validate=False)
    config.wandb.group = "language_model_more_schemes"
    return config


def sweep():
    return Sweep(grid=[dict(point) for point in GRID], seeds=(0, 1, 2))
