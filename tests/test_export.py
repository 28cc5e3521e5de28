"""`pe-research export`: a run's parameters in safetensors, named by their NNX paths with the
config beside them, restore into a model that gives the run's own logits."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from safetensors.numpy import load_file, save_file

from pe_research import cli
from pe_research.core.errors import UsageError
from pe_research.model import build_model
from pe_research.model.inputs import forward
from pe_research.runs.export import read_export, restore_params, tensor_name
from pe_research.runs.restore import load_run


def test_an_exported_run_restores_to_identical_logits(trained_run_dir, tmp_path, capsys):
    path = tmp_path / "out" / "tiny.safetensors"
    assert cli.main(["export", str(trained_run_dir), "--to", str(path), "--step", "latest"]) == 0
    assert capsys.readouterr().out.startswith(f"{path}: ")
    assert (path.stat().st_mode & 0o777) == 0o644  # as every file of a run: others may read it
    tensors = load_file(str(path))  # the plain safetensors reader: nothing of ours needed
    run = load_run(trained_run_dir, "latest")
    flat = nnx.traversals.flatten_mapping(run.params.to_pure_dict())
    assert set(tensors) == {tensor_name(key) for key in flat}
    assert "decoder_layers.0.self_attention.query.kernel" in tensors

    config, read, metadata = read_export(path)
    assert metadata["step"] == str(run.step) and config.to_dict() == run.config.to_dict()
    model = build_model(config, int(metadata["vocab_size"]))  # fresh weights from the seed
    graphdef, params, rest = nnx.split(model, nnx.Param, ...)
    params = jax.tree.map(jnp.zeros_like, params)  # nothing survives but what the file holds
    restored = nnx.merge(graphdef, restore_params(params, read), rest)
    batch = {"source": np.array([[3, 4, 3, 0]], np.int32),
             "source_mask": np.array([[1, 1, 1, 0]], bool),
             "target_input": np.array([[1, 3, 4, 3]], np.int32),
             "target_output": np.array([[3, 4, 3, 2]], np.int32),
             "target_mask": np.ones((1, 4), bool), "lengths": np.array([3], np.int32)}
    key = jax.random.key(0)
    np.testing.assert_array_equal(forward(restored, batch, key, training=False),
                                  forward(run.model, batch, key, training=False))


def test_a_file_missing_a_parameter_is_one_line_naming_it(trained_run_dir, tmp_path):
    run = load_run(trained_run_dir)
    flat = {tensor_name(k): np.asarray(v) for k, v in
            nnx.traversals.flatten_mapping(run.params.to_pure_dict()).items()}
    dropped = sorted(flat)[0]
    del flat[dropped]
    save_file(flat, str(tmp_path / "partial.safetensors"))
    with pytest.raises(UsageError, match=dropped.replace(".", r"\.")) as error:
        restore_params(run.params, flat)
    assert "\n" not in str(error.value)
    with pytest.raises(UsageError, match="not a pe_research export"):
        read_export(tmp_path / "partial.safetensors")


def test_export_refuses_another_suffix(trained_run_dir, tmp_path, capsys):
    assert cli.main(["export", str(trained_run_dir), "--to", str(tmp_path / "w.bin")]) == 2
    assert capsys.readouterr().err.strip().endswith("give a file name ending in .safetensors")
