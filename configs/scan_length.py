"""pe-research train --config configs/scan_length.py --workdir runs/scan_length

SCAN length split (Lake & Baroni, 2018): commands whose action sequences have 1-22 actions for
training, 24-48 for testing; the task length is the number of output actions. Needs the official
files first (once):

    pe-research data scan --to data/scan

A 3+3 layer encoder-decoder, d_model 128, 8 heads, dropout 0.1, Adam 1e-3 with clipping.
"""

from pe_research.config import base_config


def get_config():
    config = base_config(task="scan", pe="rope")
    config.seed = 0
    config.data.scan_dir = "data/scan"
    config.data.train_lengths = (1, 22)
    config.data.length_sampling = "mixed"
    config.data.batch_size = 128
    config.data.buckets = (16, 32, 64)
    config.data.eval_samples = 256
    config.model.d_model = 128
    config.model.num_heads = 8
    config.model.num_encoder_layers = 3
    config.model.num_decoder_layers = 3
    config.model.d_ff = 512
    config.model.dropout_rate = 0.1
    config.train.steps = 20_000
    config.train.learning_rate = 1e-3
    config.train.warmup_steps = 500
    config.train.schedule = "cosine"
    config.train.clip_norm = 1.0
    config.train.log_every = 100
    config.train.eval_every = 1_000
    config.train.checkpoint_every = 2_000
    config.train.eval_lengths = (24, 32, 40, 48)  # lengths of the test split
    config.train.best_metric = "eval/sequence_accuracy"
    config.eval.lengths = (24, 25, 26, 27, 28, 30, 32, 33, 36, 40, 48)
    config.eval.batch_size = 128
    config.wandb.group = "scan_length"
    return config
