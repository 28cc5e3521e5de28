"""pe-research sweep configs/sweeps/randomized_pe_table.py --workdir runs/rpe_table --executor slurm

The table of "Randomized Positional Encodings Boost Length Generalization of Transformers"
(Ruoss et al., ACL 2023) on its own model: an encoder-only Transformer (5 layers, d_model 64,
8 heads, dropout 0.1) that reads the input followed by one slot per output token; the 15
Chomsky-hierarchy tasks x {NoPE, sin/cos, learned, RoPE, ALiBi, relative (Transformer-XL)} x
{plain, randomized over [0, 2048)} x 10 seeds (NoPE has no randomized variant): 165 grid
points, 1,650 runs. As in the paper, the end token is not a target (train.predict_eos=False).
Training lengths 1-40 (uniform, one length per batch), batch 128, Adam at 1e-3, clipping 1.0,
evaluation up to length 500 (configs/randomized_pe_benchmark.py, checked against
experiments/example.py of google-deepmind/randomized_positional_encodings). Randomized positions
are drawn once per batch as in that code (model.pe.randomize.per=batch). The score is the
papers' per-token accuracy on output tokens (`output_token_accuracy`) averaged over lengths
41-500, best of 10 seeds:

    pe-research sweep report runs/rpe_table
    pe-research table 'runs/rpe_table/*/*' --out runs/rpe_table/report

Sized for a cluster (one GPU per grid point; its 10 seeds train stacked). Each run draws its own
lengths, as the paper's code does, so a stacked step pads to its widest member's bucket;
`--config.data.length_stream=shared` gives every run the same length at each step and each
member its own bucket (docs/performance.md). The reduced version for
a 2-core CPU is configs/sweeps/randomized_pe_table_cpu.py.
"""

from pathlib import Path

from pe_research.config import load_config
from pe_research.sweeps import Sweep
from pe_research.tasks import BENCHMARK_TASKS, TASKS

REPO = Path(__file__).resolve().parents[2]
BASE = REPO / "configs/randomized_pe_benchmark.py"
SCHEMES = ("none", "sinusoidal", "learned", "rope", "alibi", "transformer_xl")


def get_config():
    config = load_config(BASE, validate=False)
    config.model.architecture = "encoder_only"
    config.model.pe.randomize.per = "batch"
    # The paper's model has no end-token slot. With one, NoPE cannot score on a one-token answer:
    # its answer slot and end slot are the same input (docs/results.md, NoPE on the regular
    # tasks). Range evaluation of such runs also decodes at the oracle length.
    config.train.predict_eos = False
    config.wandb.group = "randomized_pe_table"
    return config


def grid(tasks, schemes, max_position: int, learned_table: int, longest: int) -> list[dict]:
    """Every task x scheme x {plain, randomized}; a learned table long enough for both.

    Tasks that need a few tokens (e.g. solve_equation: 3) train from their shortest length up
    to ``longest``.
    """
    points = []
    for task in tasks:
        shortest = TASKS[task].min_length
        for scheme in schemes:
            for randomized in (0, max_position):
                if randomized and scheme == "none":
                    continue  # NoPE has no positions to randomize
                point = {"task.name": task, "model.pe.type": scheme,
                         "model.pe.randomize.max_position": randomized,
                         "model.pe.randomize.per": "batch"}
                if scheme == "learned":
                    point["model.pe.max_len"] = learned_table
                if shortest > 1:
                    point["data.train_lengths"] = (shortest, longest)
                points.append(point)
    return points


def sweep():
    # A scheme's 15 tasks share programs of up to 32 members (3 tasks x 10 seeds on a GPU).
    return Sweep(grid=grid(BENCHMARK_TASKS, SCHEMES, 2048, 2048, 40), seeds=tuple(range(10)),
                 slurm={"gpus_per_job": 1, "time_min": 24 * 60}, members_per_program="auto")
