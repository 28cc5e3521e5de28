"""The same train step on 8 (simulated CPU) devices and on 1 gives the same loss and parameters."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import jax
import numpy as np
import pytest
from conftest import DEFAULT_CONFIG, REPO, cli_command, subprocess_env, tiny_overrides
from flax import nnx

from pe_research import data
from pe_research.config import load_config
from pe_research.runs.restore import load_run
from pe_research.runs.tracking import read_metrics
from pe_research.runtime import data_mesh
from pe_research.tasks import get_task
from pe_research.training.step import initial_train_state


@pytest.mark.slow
def test_eight_devices_match_one_device():
    env = subprocess_env(XLA_FLAGS="--xla_force_host_platform_device_count=8")
    overrides = tiny_overrides(**{"model.dropout_rate": 0.1, "data.length_sampling": "mixed"})
    result = subprocess.run(
        [sys.executable, str(REPO / "tests" / "multidevice_step.py"), str(DEFAULT_CONFIG),
         *overrides], capture_output=True, text=True, env=env, cwd=REPO, timeout=300)
    assert result.returncode == 0, result.stderr[-4000:]
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report["batch_shards8"] == 8 and report["batch_shards1"] == 1
    assert report["param_replicas8"] == 8
    np.testing.assert_allclose(report["losses8"], report["losses1"], rtol=1e-5)
    assert report["losses8"][1] != report["losses8"][0]  # the first step changed the params
    assert report["max_param_difference"] <= 1e-5 * max(report["param_scale"], 1.0)


def _replay_on_one_device(config, processes: int) -> tuple[list[float], list[np.ndarray]]:
    """The steps of a run whose global batches were assembled from ``processes`` slices."""
    mesh = data_mesh(jax.devices()[:1])
    task = get_task(config.task.to_dict(), config.data.to_dict())
    steps, params, opt_state = initial_train_state(config, task.vocabulary.size, mesh)
    steps.train.hold(params, opt_state)
    losses = []
    for step in range(config.train.steps):
        parts = [data.train_batch(task, config.data, config.seed, step, index, processes)
                 for index in range(processes)]
        batch = {key: np.concatenate([part[key] for part in parts]) for key in parts[0]}
        metrics = steps.train([data.global_batch(batch, mesh)], step)
        losses.append(float(metrics["loss"][0]))
    return losses, [np.asarray(leaf) for leaf in jax.tree.leaves(steps.train.state()[0])]


@pytest.mark.slow
def test_two_processes_train_together(tmp_path):
    """2 processes x 2 CPU devices (jax.distributed, gloo) train one model on their slices."""
    overrides = tiny_overrides(**{"train.steps": 6, "train.log_every": 3,
                                  "train.eval_every": 3, "train.checkpoint_every": 3,
                                  "wandb.mode": "disabled"})
    port = 20000 + os.getpid() % 20000
    command = [*cli_command(), "train", "--config", str(DEFAULT_CONFIG), *overrides,
               "--workdir", str(tmp_path), "--config.distributed=true"]
    processes = []
    for index in range(2):
        env = subprocess_env(
            XLA_FLAGS="--xla_force_host_platform_device_count=2",
            JAX_COORDINATOR_ADDRESS=f"localhost:{port}", JAX_NUM_PROCESSES="2",
            JAX_PROCESS_ID=str(index), JAX_CPU_COLLECTIVES_IMPLEMENTATION="gloo")
        processes.append(subprocess.Popen(command, env=env, cwd=REPO, stdout=subprocess.PIPE,
                                          stderr=subprocess.PIPE, text=True))
    outputs = [process.communicate(timeout=300) for process in processes]
    for process, (_, stderr) in zip(processes, outputs, strict=True):
        assert process.returncode == 0, stderr[-4000:]
    assert "run directory:" in outputs[0][0]

    config = load_config(DEFAULT_CONFIG, overrides)
    losses, expected = _replay_on_one_device(config, processes=2)
    records = read_metrics(tmp_path)  # written by process 0 only: each step once
    assert [r["step"] for r in records] == [3, 6]
    np.testing.assert_allclose([r["train/loss"] for r in records],
                               [np.mean(losses[:3]), np.mean(losses[3:])], rtol=1e-5)
    restored = load_run(tmp_path, "latest")
    assert restored.step == 6
    trained = jax.tree.leaves(nnx.state(restored.model, nnx.Param))
    for a, b in zip(trained, expected, strict=True):
        np.testing.assert_allclose(np.asarray(a), b, rtol=1e-4, atol=1e-6)
