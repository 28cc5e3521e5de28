"""Resume: 2N steps straight == N steps, process killed, rerun of the same command."""

from __future__ import annotations

import signal
import subprocess
import time

import jax
import numpy as np
import pytest
from conftest import DEFAULT_CONFIG, REPO, cli_command, subprocess_env, tiny_overrides, train_here
from flax import nnx

from pe_research.runs.checkpoint import Checkpointer
from pe_research.runs.restore import load_run
from pe_research.runs.tracking import read_metrics

TOTAL = 200
EVERY = 20
# Dropout on, so the explicit per-step dropout keys are part of what must line up. Logging every
# 30 steps and saving every 20 puts a resume in the middle of a metric window, so the first
# average logged after it needs the window saved in the checkpoint.
OVERRIDES = tiny_overrides(**{
    "train.steps": TOTAL, "train.checkpoint_every": EVERY, "train.log_every": 30,
    "train.eval_every": 0, "model.dropout_rate": 0.1,
    "data.length_sampling": "mixed", "wandb.mode": "disabled"})


def _params(run_dir) -> list[np.ndarray]:
    model = load_run(run_dir, "latest").model
    return [np.asarray(leaf) for leaf in jax.tree.leaves(nnx.state(model, nnx.Param))]


def _kill_after_first_checkpoint(run_dir) -> int:
    """Start training, SIGKILL it once a checkpoint exists; the step it was killed after."""
    command = [*cli_command(), "train", "--config", str(DEFAULT_CONFIG), "--workdir",
               str(run_dir), *OVERRIDES]
    process = subprocess.Popen(command, env=subprocess_env(), cwd=REPO,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    checkpoints = run_dir / "checkpoints"
    deadline = time.monotonic() + 240
    try:
        while time.monotonic() < deadline and process.poll() is None:
            if checkpoints.exists() and any(p.name.isdigit() for p in checkpoints.iterdir()):
                break
            time.sleep(0.02)
        process.send_signal(signal.SIGKILL)
    finally:
        process.wait()
    assert process.returncode == -signal.SIGKILL, "the run ended before it could be killed"
    steps = Checkpointer(checkpoints, read_only=True).steps()
    assert steps and steps[-1] < TOTAL
    return steps[-1]


@pytest.mark.slow
def test_killed_and_resumed_run_is_bit_identical(tmp_path):
    straight, resumed = tmp_path / "straight", tmp_path / "resumed"
    train_here(straight, OVERRIDES)
    killed_at = _kill_after_first_checkpoint(resumed)
    # The same command again: resumes from the latest checkpoint.
    output = train_here(resumed, OVERRIDES).stdout
    assert f"resuming {resumed} from step {killed_at} (of {TOTAL})" in output.splitlines()

    assert killed_at < TOTAL
    for a, b in zip(_params(straight), _params(resumed), strict=True):
        np.testing.assert_array_equal(a, b)
    straight_losses = {r["step"]: r["train/loss"] for r in read_metrics(straight)
                       if "train/loss" in r}
    resumed_records = read_metrics(resumed)
    resumed_losses = {r["step"]: r["train/loss"] for r in resumed_records if "train/loss" in r}
    assert resumed_losses == straight_losses  # every logged window, including after the resume
    assert [r["step"] for r in resumed_records] == sorted({r["step"] for r in resumed_records})
    assert killed_at % 30, "killed on a log step: the test would not cover a half-full window"
