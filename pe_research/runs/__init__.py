"""Run directories: their paths, Orbax checkpoints, metric tracking, and restoring a run.

run_dir     RunDir: every path inside a run directory, named in one place
checkpoint  the Orbax CheckpointManager of a run: save, resume, fall back past unreadable steps
tracking    metric writers: JSONL (the source of truth), W&B (offline by default), null
restore     ``load_run``: the one way to restore a run for evaluation, analysis or comparison
provenance  versions, device, git commit and command line of every start of training
export      a run's parameters as safetensors, named by their NNX paths, the config beside them
"""
