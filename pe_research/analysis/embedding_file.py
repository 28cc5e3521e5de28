"""Position and token embeddings read from a weights file (``.safetensors``, ``.npz``, or a
CTranslate2 ``model.bin``).

This lets ``pe-research analyze --embeddings FILE`` measure a matrix trained elsewhere, e.g.
GPT-2's ``wpe`` (1024 x 768) beside its ``wte``, with no model code and no network.

A CTranslate2 ``model.bin`` is read by ``read_ctranslate2``, written from the layout its
converter writes (OpenNMT/CTranslate2, ``python/ctranslate2/specs/model_spec.py``,
``ModelSpec._serialize``, binary versions 3 to 6): a little-endian ``uint32`` version, the
spec's name, a ``uint32`` revision, a ``uint32`` count of variables, each one a name, a
``uint8`` rank, that many ``uint32`` dimensions, a ``uint8`` type id (float32, int8, int16,
int32, float16, bfloat16), a ``uint32`` byte count and the bytes; then a ``uint32`` count of
aliases, each a name and the variable it stands for. A string is a ``uint16`` length that
counts its closing NUL, the UTF-8 bytes and the NUL.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from pe_research.core.errors import ConfigError

SUFFIXES = (".safetensors", ".npz", ".bin")
CTRANSLATE2_TYPES = ("float32", "int8", "int16", "int32", "float16", "bfloat16")
CTRANSLATE2_VERSIONS = range(3, 7)


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
    if path.suffix == ".bin":
        return read_ctranslate2(path)
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


def read_ctranslate2(path: str | Path) -> dict[str, np.ndarray]:
    """Every variable of a CTranslate2 ``model.bin`` by name (aliases too), as stored; a
    ``ValueError`` for another format or version."""
    data = memoryview(Path(path).read_bytes())
    offset = 0

    def take(fmt: str) -> Any:
        nonlocal offset
        values = struct.unpack_from("<" + fmt, data, offset)
        offset += struct.calcsize("<" + fmt)
        return values if len(values) > 1 else values[0]

    def string() -> str:
        nonlocal offset
        length = take("H")
        text = bytes(data[offset:offset + length - 1]).decode("utf-8")
        offset += length
        return text

    version = take("I")
    if version not in CTRANSLATE2_VERSIONS:
        raise ValueError(f"not a CTranslate2 model of binary version 3-6 (read {version})")
    string()  # the spec's name
    take("I")  # its revision
    arrays: dict[str, np.ndarray] = {}
    for _ in range(take("I")):
        name = string()
        shape = [take("I") for _ in range(take("B"))]
        kind, size = CTRANSLATE2_TYPES[take("B")], take("I")
        raw = bytes(data[offset:offset + size])
        offset += size
        if kind == "bfloat16":  # its float32's upper half
            wide = np.frombuffer(raw, np.uint16).astype(np.uint32) << 16
            arrays[name] = wide.view(np.float32).reshape(shape)
        else:
            arrays[name] = np.frombuffer(raw, kind).reshape(shape)
    for _ in range(take("I")):
        alias = string()
        arrays[alias] = arrays[string()]
    return arrays
