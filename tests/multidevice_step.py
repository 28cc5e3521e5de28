"""Run by tests/test_multidevice.py under 8 simulated CPU devices: one mesh of 8 vs one of 1.

Prints one JSON line: the loss on each mesh, the largest parameter difference, device counts.
"""

from __future__ import annotations

import json
import sys

import jax
import numpy as np

from pe_research import data
from pe_research.config import load_config
from pe_research.runtime import data_mesh
from pe_research.tasks import get_task
from pe_research.training.step import initial_train_state


def run(config, devices, steps: int):
    """Losses and final parameters after ``steps`` train steps on a mesh over ``devices``."""
    mesh = data_mesh(devices)
    task = get_task(config.task.to_dict(), config.data.to_dict())
    step_fns, params, opt_state = initial_train_state(config, task.vocabulary.size, mesh)
    step_fns.train.hold(params, opt_state)
    losses, shards = [], 0
    for step in range(steps):
        batch = data.global_batch(data.train_batch(task, config.data, config.seed, step), mesh)
        shards = len(batch["source"].addressable_shards)
        metrics = step_fns.train([batch], step)
        losses.append(float(metrics["loss"][0]))
    params, _ = step_fns.train.state()
    leaves = [np.asarray(leaf) for leaf in jax.tree.leaves(params)]
    return losses, leaves, shards, len(jax.tree.leaves(params)[0].sharding.device_set)


def main() -> None:
    config = load_config(sys.argv[1], sys.argv[2:])
    assert jax.device_count() == 8, jax.devices()
    losses8, params8, shards8, replicas8 = run(config, jax.devices(), steps=2)
    losses1, params1, shards1, _ = run(config, jax.devices()[:1], steps=2)
    difference = max(float(np.max(np.abs(a - b))) for a, b in zip(params8, params1, strict=True))
    scale = max(float(np.max(np.abs(b))) for b in params1)
    print(json.dumps({"losses8": losses8, "losses1": losses1, "max_param_difference": difference,
                      "param_scale": scale, "batch_shards8": shards8, "batch_shards1": shards1,
                      "param_replicas8": replicas8}))


if __name__ == "__main__":
    main()
