"""A run's parameters as one safetensors file: what a user hands to another codebase.

Each tensor is named by its NNX path, parts joined by dots (``decoder_layers.0.attention.query.
kernel``); the file's metadata holds the run's full config (JSON), the step and the package
version, so ``read_export`` can rebuild the model without the run directory.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import ml_collections
import numpy as np
from flax import nnx
from safetensors.numpy import load_file, save_file

from pe_research.config import from_mapping, to_dict
from pe_research.core.errors import UsageError
from pe_research.runs.provenance import package_versions
from pe_research.runs.restore import load_run

FORMAT = "pe_research.params.v1"


def tensor_name(path: tuple[Any, ...]) -> str:
    """``("decoder_layers", 0, "attention", "query", "kernel")`` -> ``decoder_layers.0...``."""
    return ".".join(str(part) for part in path)


def flat_params(params: nnx.State) -> dict[str, np.ndarray]:
    """Every parameter as a host array, by ``tensor_name`` of its path."""
    flat = nnx.traversals.flatten_mapping(params.to_pure_dict())
    return {tensor_name(path): np.asarray(value) for path, value in flat.items()}


def export_run(run_dir: str | Path, to: str | Path, checkpoint: str | int = "best") -> Path:
    """Write the parameters of ``run_dir``'s ``checkpoint`` to the safetensors file ``to``,
    whole (a temporary file moved into place); returns its path."""
    to = Path(to)
    if to.suffix != ".safetensors":
        raise UsageError(f"--to {to}: give a file name ending in .safetensors")
    run = load_run(run_dir, checkpoint)
    metadata = {"format": FORMAT, "config": json.dumps(to_dict(run.config)),
                "step": str(run.step), "vocab_size": str(run.task.vocabulary.size),
                "pe_research": str(package_versions()["pe_research"])}
    to.parent.mkdir(parents=True, exist_ok=True)
    partial = to.with_name(f".{to.name}.{os.getpid()}.partial")
    save_file(flat_params(run.params), str(partial), metadata=metadata)
    partial.chmod(0o644)  # safetensors creates it readable by its owner alone
    partial.replace(to)
    return to


def read_export(path: str | Path) -> tuple[ml_collections.ConfigDict, dict[str, np.ndarray],
                                           dict[str, str]]:
    """(config, tensors by name, metadata) of a file ``export_run`` wrote."""
    from safetensors import safe_open

    with safe_open(str(path), framework="numpy") as handle:
        metadata = dict(handle.metadata() or {})
    if metadata.get("format") != FORMAT:
        raise UsageError(f"{path}: not a pe_research export (no '{FORMAT}' in its metadata)")
    return from_mapping(json.loads(metadata["config"])), load_file(str(path)), metadata


def restore_params(params: nnx.State, tensors: dict[str, np.ndarray]) -> nnx.State:
    """``params`` (a model's ``nnx.Param`` state) with every value taken from ``tensors``; a
    one-line error names the parameters missing from the file."""
    flat = nnx.traversals.flatten_mapping(params.to_pure_dict())
    missing = sorted(tensor_name(path) for path in flat if tensor_name(path) not in tensors)
    if missing:
        raise UsageError(f"the file has no tensor for {len(missing)} parameters, e.g. "
                         f"{missing[0]}; it holds {sorted(tensors)[:3]} ...")
    pure = nnx.traversals.unflatten_mapping(
        {path: tensors[tensor_name(path)] for path in flat})
    params.replace_by_pure_dict(pure)
    return params
