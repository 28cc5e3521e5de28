"""Position and token embeddings read from a weights file (``.safetensors`` or ``.npz``).

This lets ``pe-research analyze --embeddings FILE`` measure a matrix trained elsewhere, e.g.
GPT-2's ``wpe`` (1024 x 768) beside its ``wte``, with no model code and no network.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from pe_research.core.errors import ConfigError

SUFFIXES = (".safetensors", ".npz")


def read_arrays(path: str | Path, keys: Sequence[str]) -> dict[str, np.ndarray]:
    """The arrays named ``keys`` from the file, as float64; ConfigError naming what is missing."""
    path = Path(path)
    if path.suffix not in SUFFIXES:
        raise ConfigError("--embeddings", str(path), f"a {' or '.join(SUFFIXES)} file")
    if not path.is_file():
        raise ConfigError("--embeddings", str(path), "no such file")
    try:
        stored = _load(path)
    except Exception as error:  # noqa: BLE001 - any unreadable file is one line
        raise ConfigError("--embeddings", str(path), f"cannot be read ({type(error).__name__}: "
                          f"{str(error).splitlines()[0] if str(error) else ''})") from None
    missing = [key for key in keys if key not in stored]
    if missing:
        names = sorted(stored)
        shown = ", ".join(names[:20]) + (f", ... ({len(names)} in all)" if len(names) > 20 else "")
        raise ConfigError("--key" if missing[0] == keys[0] else "key", missing[0],
                          f"not in {path.name}; it holds {shown}")
    return {key: np.asarray(stored[key], np.float64) for key in keys}


def _load(path: Path) -> Mapping[str, np.ndarray]:
    if path.suffix == ".npz":
        with np.load(path, allow_pickle=False) as archive:
            return {key: archive[key] for key in archive.files}
    from safetensors.numpy import load_file

    return load_file(str(path))


def check_matrix(name: str, key: str, array: np.ndarray, width: int | None = None) -> None:
    """ConfigError unless ``array`` is ``[N, D]`` (with ``D == width`` when given)."""
    if array.ndim != 2:
        raise ConfigError(name, key, f"must name a 2-D [rows, width] matrix, not shape "
                                     f"{tuple(array.shape)}")
    if width is not None and array.shape[1] != width:
        raise ConfigError(name, key, f"has width {array.shape[1]}, the position embeddings "
                                     f"{width}")


def check_vector(name: str, key: str, array: np.ndarray, width: int) -> None:
    """ConfigError unless ``array`` is ``[width]`` (a LayerNorm scale or bias)."""
    if array.shape != (width,):
        raise ConfigError(name, key, f"must be a vector of width {width}, not shape "
                                     f"{tuple(array.shape)}")
