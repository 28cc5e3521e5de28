"""pe-research train --config configs/language_model.py --workdir runs/lm

Character-level language modelling, ALiBi's setting ("Train Short, Test Long", Press et al.
2022): a decoder-only model trained on windows of 64 characters and scored by perplexity on
held-out windows of up to 1,024 (`pe-research eval RUN`). The corpus is a plain-text file;
`pe-research data stdlib --to data/python_stdlib.txt` writes one from the Python standard
library of the interpreter at hand (every machine has one; nothing is downloaded). Any text file,
folder or hub dataset works: --config.task.path=... (and --config.task.column for tables).

Buckets hold a window of n tokens plus BOS: n + 1 positions, hence 65, 129, ...
"""

from pe_research.config import base_config


def get_config():
    config = base_config(task="language_model", pe="alibi")
    config.seed = 0
    config.task.path = "data/python_stdlib.txt"
    config.task.tokenizer = "char"
    config.data.train_lengths = (64, 64)
    config.data.batch_size = 32
    config.data.buckets = (33, 65, 129, 257, 513, 1025)
    config.data.eval_samples = 32
    config.model.architecture = "decoder_only"
    config.model.d_model = 128
    config.model.num_heads = 4
    config.model.num_decoder_layers = 2  # the decoder-only stack (num_encoder_layers is unused)
    config.model.d_ff = 512
    config.train.steps = 2000
    config.train.learning_rate = 1e-3
    config.train.warmup_steps = 200
    config.train.schedule = "cosine"
    config.train.predict_eos = False
    config.train.log_every = 100
    config.train.eval_every = 500
    config.train.checkpoint_every = 500
    config.train.best_metric = "eval/loss"
    config.train.eval_lengths = (128, 256)
    config.eval.lengths = (16, 32, 64, 96, 128, 192, 256, 384, 512, 768, 1024)
    config.eval.checkpoint = "latest"
    config.wandb.group = "language_model"
    return config
