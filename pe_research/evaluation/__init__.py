"""Evaluation: the metric table, range evaluation, results on disk, comparison, figures.

metrics     the metric table: each metric's per-example value, aggregation, label, direction
range_eval  a restored run over a grid of lengths, compiled once per bucket
memory      eval batches sized to a memory budget, estimated from the traced program
results     ``RUN_DIR/eval/<name>.{json,csv,png}`` and the run's W&B table
compare     curves of many runs grouped by a config key, aggregated over seeds
plots       every curve figure, with the training range marked
"""
