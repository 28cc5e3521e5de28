"""Batches placed on devices: one global array over the mesh's ``data`` axis, or every member's
batch of an ensemble stacked to one width."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import jax
import numpy as np
from jax.sharding import Mesh

from pe_research.data.batches import make_batches, train_examples
from pe_research.runtime import batch_sharded, check_batch_fits
from pe_research.tasks.base import Task


def pad_to(batch: dict[str, np.ndarray], source_width: int, target_width: int,
           joint: int = 0) -> dict[str, np.ndarray]:
    """A batch padded with masked columns to ``[B, source_width]`` / ``[B, target_width]`` /
    ``[B, joint]`` (every ``source*``, ``target*`` and ``joint*`` key)."""
    return {key: value[0] for key, value in
            stack_batches([batch], source_width, target_width, joint).items()}

def stack_batches(batches: Sequence[dict[str, np.ndarray]], source_width: int = 0,
                  target_width: int = 0, joint: int = 0) -> dict[str, np.ndarray]:
    """``[M, B, ...]``: every member's batch padded to the widest member's widths (or to
    ``source_width`` / ``target_width`` / ``joint`` where wider), with masked zeros; a member
    whose task supplies no position IDs of a kind another's does gets zeros there."""
    widths = {"source": max(source_width, *(b["source"].shape[1] for b in batches)),
              "target": max(target_width, *(b["target_input"].shape[1] for b in batches)),
              "joint": max(joint, *(b["joint_mask"].shape[1] for b in batches))}
    stacked: dict[str, np.ndarray] = {}
    for k, batch in enumerate(batches):
        for key, value in batch.items():
            if key not in stacked:
                side = key.split("_")[0]
                shape = (value.shape[0], widths[side]) if side in widths else value.shape
                stacked[key] = np.zeros((len(batches), *shape), value.dtype)
            stacked[key][k][tuple(slice(0, n) for n in value.shape)] = value
    return stacked

def program_batch(tasks: Sequence[Task], data_blocks: Sequence[tuple[Mapping[str, Any], int]],
                  step: int) -> dict[str, np.ndarray]:
    """``[M, B, ...]``: training batch ``step`` of each member of a program, member k's of task
    ``tasks[k]`` from its ``(config.data as a dict, seed)``, all padded to the widest member's
    widths: ``stack_batches`` of their ``train_batch``, written in one pass."""
    members = [train_examples(task, data_cfg, seed, step)
               for task, (data_cfg, seed) in zip(tasks, data_blocks, strict=True)]
    return make_batches([examples for examples, _ in members],
                        *(max(widths[side] for _, widths in members) for side in range(3)))

def global_batch(local_batch: Mapping[str, np.ndarray], mesh: Mesh) -> dict[str, jax.Array]:
    """Each key -> one ``jax.Array`` over all processes, batch axis sharded on mesh axis 'data'."""
    sharding = batch_sharded(mesh)
    rows = next(iter(local_batch.values())).shape[0] * jax.process_count()
    check_batch_fits("data.batch_size", rows, mesh)
    return {key: jax.make_array_from_process_local_data(sharding, np.asarray(value))
            for key, value in local_batch.items()}
