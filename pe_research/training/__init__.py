"""Training: the loop, its jitted steps, the optimizer, and evaluation while training.

loop           ``train(config, workdir)``: resume, step, log, evaluate, checkpoint
steps          the jitted train and eval steps over the device mesh
optimizer      optax schedule and AdamW with clipping
periodic_eval  teacher-forced metrics in distribution and at ``train.eval_lengths``
"""
