"""Batches on the mesh: one device in-process, eight simulated CPU devices in a subprocess."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import jax
import numpy as np
import pytest
from conftest import subprocess_env
from jax.sharding import Mesh, PartitionSpec

from pe_research import data
from pe_research.core.errors import ConfigError
from pe_research.tasks import default_task_config, get_task

REPO = Path(__file__).resolve().parents[1]
CFG = {"batch_size": 16, "train_lengths": (2, 9), "length_sampling": "mixed",
       "buckets": (8, 16, 32)}


def test_global_batch_on_one_device():
    task = get_task(default_task_config("odds_first"))
    local = data.train_batch(task, CFG, 0, 0)
    mesh = Mesh(np.array(jax.devices()[:1]), ("data",))
    arrays = data.global_batch(local, mesh)
    assert set(arrays) == set(data.BATCH_KEYS)
    for key, value in arrays.items():
        assert isinstance(value, jax.Array) and value.sharding.spec == PartitionSpec("data")
        np.testing.assert_array_equal(np.asarray(value), local[key])
    with pytest.raises(ConfigError, match="axis named 'data'"):
        data.global_batch(local, Mesh(np.array(jax.devices()[:1]), ("batch",)))


EIGHT_DEVICES = textwrap.dedent("""
    import jax, numpy as np
    from jax.sharding import Mesh
    from pe_research import data
    from pe_research.tasks import default_task_config, get_task

    assert jax.device_count() == 8
    task = get_task(default_task_config("odds_first"))
    cfg = {"batch_size": 16, "train_lengths": (2, 9), "length_sampling": "mixed",
           "buckets": (8, 16, 32)}
    local = data.train_batch(task, cfg, 0, 0)
    for shape, axes in (((8,), ("data",)), ((4, 2), ("data", "model"))):
        mesh = Mesh(np.array(jax.devices()).reshape(shape), axes)
        arrays = data.global_batch(local, mesh)
        for key, value in arrays.items():
            assert value.shape == local[key].shape, key
            rows = 16 // shape[0]
            for shard in value.addressable_shards:
                assert shard.data.shape[0] == rows, (key, shard.data.shape)
                start = shard.index[0].start or 0
                expected = local[key][start:start + rows]
                np.testing.assert_array_equal(np.asarray(shard.data), expected)
        print("ok", axes, len(arrays["source"].addressable_shards))
    try:
        data.global_batch({k: v[:12] for k, v in local.items()},
                          Mesh(np.array(jax.devices()), ("data",)))
    except Exception as error:
        print("refused:", type(error).__name__)
""")


@pytest.mark.slow
def test_global_batch_on_eight_simulated_devices():
    env = subprocess_env(XLA_FLAGS="--xla_force_host_platform_device_count=8",
                         JAX_PLATFORMS="cpu")
    result = subprocess.run([sys.executable, "-c", EIGHT_DEVICES], cwd=REPO, env=env,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.splitlines() == ["ok ('data',) 8", "ok ('data', 'model') 8",
                                          "refused: ConfigError"]
