"""pe-research train --config configs/default.py --workdir runs/default

CPU-sized default: copy a string over 10 symbols, trained on lengths 1-16 and evaluated during
training at 24, 32 and 48. A small encoder-decoder (d_model 64, 2+2 layers) learns it in about a
minute on 2 CPU cores, enough to see positional schemes part ways beyond the training lengths
(`make demo` trains rope, alibi and sinusoidal):

    pe-research train --config configs/default.py --config.model.pe.type=alibi --workdir runs/alibi
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
