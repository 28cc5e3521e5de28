"""pe-research sweep experiments/studies/randomized_pe_table/reverse_rope_no_eos_cpu.py \
    --workdir runs/rpe_rr_neos

randomized_pe_reverse_rope_cpu.py with the end token left out of the loss and scored at the
oracle length, as the randomized-PE paper's model is trained. With the end-token slot, plain
RoPE's free decodes beyond the training lengths also failed at the slot (the end token late or
missing on up to every example at length 12-20); on even_pairs the slot had cost plain ALiBi
9-46 points. Does it make the reverse_string gap? 3 seeds, 20,000 steps. About 15 minutes on
2 CPU cores; what it showed is in docs/results.md.
"""

from pathlib import Path

from pe_research.config import load_config, load_user_module

REPO = Path(__file__).resolve().parents[3]
BASE = REPO / "experiments/studies/randomized_pe_table/randomized_pe_reverse_rope_cpu.py"


def get_config():
    config = load_config(BASE, validate=False)
    config.train.predict_eos = False
    config.wandb.group = "randomized_pe_reverse_rope_no_eos_cpu"
    return config


def sweep():
    return load_user_module(BASE).sweep()
