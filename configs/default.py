"""pe-research train --config configs/default.py --workdir runs/default

CPU-sized default: copy a string over 10 symbols with a small encoder-decoder (d_model 64, 2+2
layers), trained on lengths 1-16 and evaluated during training at 24, 32 and 48. The base of the
sweep files and of `make demo` (configs/sweeps/demo.py, which makes it decoder-only):

    pe-research train --config configs/default.py --config.model.pe.type=rope --workdir runs/rope

ALiBi's bias depends on |i - j| only: this model's bidirectional encoder then gives a string and
its reverse the same set of states, so copy cannot be learned with it (pe_research/positional/
alibi.py, docs/results.md); use ALiBi decoder-only.
"""

from pe_research.config import base_config


def get_config():
    config = base_config(task="copy", pe="rope")
    config.seed = 0
    config.data.train_lengths = (1, 16)
    config.data.batch_size = 32
    config.data.buckets = (16, 24, 32, 48, 64, 128, 256, 512)
    config.data.eval_samples = 64
    config.model.d_model = 64
    config.model.num_heads = 4
    config.model.num_encoder_layers = 2
    config.model.num_decoder_layers = 2
    config.model.d_ff = 128
    config.train.steps = 1000
    config.train.learning_rate = 3e-3
    config.train.warmup_steps = 100
    config.train.log_every = 50
    config.train.eval_every = 250
    config.train.checkpoint_every = 500
    config.train.eval_lengths = (24, 32, 48)
    config.eval.lengths = (2, 4, 6, 8, 10, 12, 14, 16, 20, 24, 28, 32, 40, 48, 64)
    config.wandb.group = "default"
    return config
