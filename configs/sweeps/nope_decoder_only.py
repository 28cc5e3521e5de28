"""pe-research sweep configs/sweeps/nope_decoder_only.py --workdir runs/nope_table --executor slurm

The comparison of "The Impact of Positional Encoding on Length Generalization in Transformers"
(Kazemnejad et al., NeurIPS 2023) on its own kind of model: a decoder-only causal LM over
`source SEP target`, the loss on target tokens only; copy, reverse, addition, sort and SCAN
(length split) x {NoPE, T5, ALiBi, RoPE, learned, sinusoidal} x 3 seeds. Training as in the
authors' trainer defaults (configs/trainer/default.jsonnet of McGill-NLP/length-generalization:
50,000 steps, batch 256, learning rate 3e-4, 6 % warm-up, no weight decay) on a T5-base-sized
decoder (12 layers, d_model 768, 12 heads, d_ff 3072). Each task follows the authors' split
(`SPLITS`, from their scripts/dataset_builders/make_*_dataset.py): copy and reverse draw tokens
with replacement from 100 symbols and train on lengths up to 20; addition and single-token sort
(50 symbols, with replacement) train up to 8; every run is evaluated at every length 1-40.
Differences: the learning rate decays by a cosine here (theirs: polynomial); examples are drawn
afresh each step rather than read from their fixed files; their generators start training
lengths at 4 by default, ours at 1; their prompts are words ("Sort the following list [ ... ]"),
ours the bare tokens and a separator. Then:

    pe-research sweep report runs/nope_table
    pe-research table 'runs/nope_table/*/*' --metric exact_match

The reduced version for a 2-core CPU is configs/sweeps/nope_decoder_only_cpu.py.
"""

from pathlib import Path

from pe_research.config import load_config
from pe_research.sweeps import Sweep

REPO = Path(__file__).resolve().parents[2]
DEFAULT = REPO / "configs/default.py"
# Per task, the overrides that put it on the authors' split (the split's name in their tables).
TO_8 = {"data.train_lengths": (1, 8)}
SPLITS = {
    "copy": {"task.alphabet_size": 100},  # cmc_tr20_ts40
    "reverse_string": {"task.alphabet_size": 100},  # mc_tr20_ts40
    # len_tr8_ts16: each operand's length drawn per pair, numbers at their natural width
    "addition": {**TO_8, "task.operand_lengths": "per_pair", "task.zero_pad": False},
    "sort": {**TO_8, "task.alphabet_size": 50, "task.distinct": False},  # len_sngd_tr8_ts16
    "scan": {},  # len_tr25_ts48: the SCAN length split
}
TASKS = tuple(SPLITS)
SCHEMES = ("none", "t5", "alibi", "rope", "learned", "sinusoidal")


def get_config():
    config = load_config(DEFAULT, validate=False)
    config.model.architecture = "decoder_only"
    config.model.d_model = 768
    config.model.num_heads = 12
    config.model.num_decoder_layers = 12
    config.model.d_ff = 3072
    config.model.dtype = "bfloat16"
    config.data.train_lengths = (1, 20)
    config.data.batch_size = 256
    config.data.buckets = (32, 64, 128)
    config.data.eval_samples = 256
    config.train.steps = 50_000
    config.train.learning_rate = 3e-4
    config.train.warmup_steps = 3_000
    config.train.schedule = "cosine"
    config.train.weight_decay = 0.0
    config.train.log_every = 100
    config.train.eval_every = 5_000
    config.train.checkpoint_every = 5_000
    config.train.eval_lengths = (30, 40)
    config.eval.lengths = tuple(range(1, 41))
    config.eval.batch_size = 128
    config.wandb.group = "nope_decoder_only"
    return config


def sweep():
    grid = [{"task.name": task, **SPLITS[task], "model.pe.type": scheme}
            for task in TASKS for scheme in SCHEMES]
    return Sweep(grid=grid,
                 seeds=(0, 1, 2), slurm={"gpus_per_job": 1, "time_min": 24 * 60},
                 members_per_program="auto")
