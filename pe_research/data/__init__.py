"""Batches for training and evaluation.

batches    training batches: length sampling, bucket padding, the checks of ``config.data``
eval_sets  frozen evaluation sets and their batches, one shape per source bucket
placement  batches placed on the mesh, and ensemble members' batches stacked
"""

from pe_research.data.batches import (
    BATCH_KEYS,
    Batch,
    bucket_length,
    bucket_shape,
    check_data_block,
    check_data_config,
    covering_buckets,
    joint_width,
    make_batch,
    train_batch,
    train_shapes,
    train_widths,
)
from pe_research.data.eval_sets import (
    eval_batch_rows,
    eval_batches,
    eval_dataset,
    eval_fingerprint,
    eval_lengths_of,
    eval_set_path,
    eval_widths,
    one_shape_per_source_bucket,
)
from pe_research.data.placement import global_batch, pad_to, program_batch, stack_batches

__all__ = [
    "BATCH_KEYS", "Batch", "bucket_length", "bucket_shape", "check_data_block", "check_data_config",
    "covering_buckets", "eval_batch_rows", "eval_batches", "eval_dataset", "eval_fingerprint",
    "eval_lengths_of", "eval_set_path", "eval_widths", "global_batch", "joint_width", "make_batch",
    "one_shape_per_source_bucket", "pad_to", "program_batch", "stack_batches", "train_batch",
    "train_shapes", "train_widths",
]
