"""Training: the loop, its one compiled step, the optimizer, and evaluation while training.

loop           ``train(config, workdir)``: check, resume, train, and the run directory it writes
ensemble       ``train_ensemble``: M runs stacked in one program, each its own run directory
step_loop      the loop shared by both: calls, metric windows, logging, checkpoints, NaN stops
step           ``CompiledStep``: jit, keys as arguments, state between calls, K steps per call
optimizer      optax schedule and AdamW with clipping
periodic_eval  teacher-forced metrics in distribution and at ``train.eval_lengths``
"""
