r"""pe-research train --config configs/randomized_pe_benchmark.py --workdir runs/rpe_duplicate

The protocol of "Randomized Positional Encodings Boost Length Generalization of Transformers"
(Ruoss et al., ACL 2023) on our encoder-decoder: train on task lengths 1-40 (uniform), batch 128,
Adam at 1e-3 with global-norm clipping 1.0, dropout 0.1, d_model 64 with 8 heads; test up to
length 500. As in the example script of the paper's code, positions are randomized over
[0, 2048) on the relative (Transformer-XL) encoding. Other schemes and tasks:

    pe-research train --config configs/randomized_pe_benchmark.py --workdir runs/rpe_rope \
        --config.model.pe.type=rope --config.task.name=reverse_string

and --config.model.pe.randomize.max_position=0 for the same scheme without randomization.

Model size, a choice: the paper's model is a 5-block encoder reading input and output slots at
once. Here an encoder-decoder decodes autoregressively, and each side gets the paper's 5 blocks
(5 encoder + 5 decoder layers, d_ff 256 = 4 x d_model), so each stack matches its depth.
The longest sequence is the target of duplicate_string at length 500 (1000 tokens + EOS), hence
buckets up to 1024. Sized for one accelerator; on a CPU, lower train.steps and eval.lengths.
"""

from pe_research.config import base_config


def get_config():
    config = base_config(task="duplicate_string", pe="transformer_xl")
    config.seed = 0
    config.data.train_lengths = (1, 40)
    config.data.length_sampling = "per_batch"  # one length per batch, uniform over 1-40
    config.data.batch_size = 128
    config.data.buckets = (16, 32, 64, 128, 256, 512, 1024)
    config.data.eval_samples = 512  # examples per evaluated length
    config.model.d_model = 64
    config.model.num_heads = 8
    config.model.num_encoder_layers = 5
    config.model.num_decoder_layers = 5
    config.model.d_ff = 256
    config.model.dropout_rate = 0.1
    config.model.pe.randomize.max_position = 2048
    config.train.steps = 100_000
    config.train.learning_rate = 1e-3
    config.train.warmup_steps = 0
    config.train.schedule = "constant"
    config.train.weight_decay = 0.0  # Adam
    config.train.clip_norm = 1.0
    config.train.log_every = 500
    config.train.eval_every = 5_000
    config.train.checkpoint_every = 10_000
    config.train.keep_checkpoints = 2
    config.train.eval_lengths = (50, 100, 200)
    config.train.best_metric = "eval/sequence_accuracy"
    config.eval.lengths = tuple(range(5, 41, 5)) + tuple(range(50, 501, 25))
    config.eval.batch_size = 128
    config.wandb.group = "randomized_pe_benchmark"
    return config
