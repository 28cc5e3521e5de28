"""`analyze --embeddings`: geometry of a matrix from a weights file, checked on a known helix."""

from __future__ import annotations

import json
import math
import struct

import numpy as np
import pytest
from safetensors.numpy import save_file

from pe_research.analysis import embedding_report
from pe_research.analysis.embedding_file import CTRANSLATE2_TYPES, read_ctranslate2
from pe_research.cli import main
from pe_research.core.errors import ConfigError

POSITIONS, WIDTH, VOCAB = 256, 32, 10
R, S = 3.0, 1.0  # radii of the two circles: every row has norm sqrt(R^2 + S^2)
COS_MAX = 0.15   # the one token that is not orthogonal to the positions


def helix_file(tmp_path, suffix: str):
    """A closed helix on a sphere (whole periods of two circles) and orthogonal-ish tokens."""
    t = np.arange(POSITIONS)
    positions = np.zeros((POSITIONS, WIDTH))
    positions[:, 0] = R * np.cos(2 * np.pi * t / POSITIONS)
    positions[:, 1] = R * np.sin(2 * np.pi * t / POSITIONS)
    positions[:, 2] = S * np.cos(2 * np.pi * 8 * t / POSITIONS)
    positions[:, 3] = S * np.sin(2 * np.pi * 8 * t / POSITIONS)
    tokens = np.zeros((VOCAB, WIDTH))
    tokens[np.arange(VOCAB), 4 + np.arange(VOCAB)] = 1.0  # orthogonal to every position
    tokens[0, 0], tokens[0, 4] = COS_MAX, math.sqrt(1 - COS_MAX**2)
    arrays = {"wpe": positions.astype(np.float32), "wte": tokens.astype(np.float32),
              "ln.weight": np.full(WIDTH, 2.0, np.float32),
              "ln.bias": np.zeros(WIDTH, np.float32)}
    path = tmp_path / f"helix{suffix}"
    if suffix == ".npz":
        np.savez(path, **arrays)
    elif suffix == ".bin":
        write_ctranslate2(path, arrays, aliases={"decoder/embeddings": "wte"})
    else:
        save_file(arrays, str(path))
    return path


def ct2_string(text: str) -> bytes:
    """A CTranslate2 string: uint16 length counting the closing NUL, the bytes, the NUL."""
    encoded = text.encode() + b"\0"
    return struct.pack("<H", len(encoded)) + encoded


def write_ctranslate2(path, arrays: dict[str, np.ndarray], aliases: dict[str, str],
                      version: int = 6, bfloat16: tuple[str, ...] = ()) -> None:
    """A ``model.bin`` in CTranslate2's binary layout (``ModelSpec._serialize``)."""
    out = struct.pack("<I", version) + ct2_string("TransformerDecoderSpec")
    out += struct.pack("<II", 1, len(arrays))
    for name, array in arrays.items():
        if name in bfloat16:
            raw = (array.astype(np.float32).view(np.uint32) >> 16).astype(np.uint16).tobytes()
            kind = "bfloat16"
        else:
            raw, kind = array.tobytes(), str(array.dtype)
        out += ct2_string(name) + struct.pack("<B", array.ndim)
        out += struct.pack(f"<{array.ndim}I", *array.shape)
        out += struct.pack("<BI", CTRANSLATE2_TYPES.index(kind), len(raw)) + raw
    out += struct.pack("<I", len(aliases))
    for alias, target in aliases.items():
        out += ct2_string(alias) + ct2_string(target)
    path.write_bytes(out)


@pytest.mark.parametrize("suffix", [".safetensors", ".npz", ".bin"])
def test_helix_norm_pca_and_cosine_match_their_construction(tmp_path, suffix):
    report = embedding_report(helix_file(tmp_path, suffix), "wpe", token_key="wte",
                              ln_scale_key="ln.weight", ln_bias_key="ln.bias")
    results = report.results
    norms = results["norms"]["raw"]
    assert results["positions"]["trained"] == POSITIONS and norms["offset"] == 100
    assert norms["mean"] == pytest.approx(math.hypot(R, S), rel=1e-6)
    assert norms["cv"] == pytest.approx(0.0, abs=1e-6)
    # Centred over whole periods, each circle's two axes hold radius^2 / 2 of variance.
    total = R**2 + S**2
    np.testing.assert_allclose(results["shape"]["explained_variance_ratio"],
                               [R**2 / total / 2, R**2 / total / 2, S**2 / total / 2],
                               atol=1e-6)
    expected_cos = COS_MAX * R / math.hypot(R, S)  # token 0 against position 0
    assert results["orthogonality"]["max_abs_cos"] == pytest.approx(expected_cos, rel=1e-6)
    assert results["orthogonality"]["argmax"] == {**results["orthogonality"]["argmax"],
                                                  "token_id": 0, "position": 0}
    # g = 2 doubles the row-centred vector; LayerNorm with b = 0 gives every row norm 2 sqrt(D).
    positions = report.arrays["position_vectors"].astype(np.float64)
    centred = np.linalg.norm(positions - positions.mean(-1, keepdims=True), axis=-1)
    np.testing.assert_allclose(results["norms"]["ln_folded"]["norms"], 2 * centred, rtol=1e-5)
    np.testing.assert_allclose(results["norms"]["ln_applied"]["norms"],
                               2 * math.sqrt(WIDTH), rtol=1e-4)


def test_cli_writes_the_report_and_refuses_bad_keys(tmp_path, capsys):
    path = helix_file(tmp_path, ".safetensors")
    out = tmp_path / "out"
    assert main(["analyze", "--embeddings", str(path), "--key", "wpe", "--token-embeddings",
                 "wte", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "over positions 100-255" in printed and "max 0.1423" in printed
    written = json.loads((out / "analysis.json").read_text())
    assert written["mode"] == "embeddings" and written["key"] == "wpe"
    assert {"norms.png", "orthogonality.png", "position_pca.png"} <= {p.name for p in
                                                                     out.iterdir()}
    assert main(["analyze", "--embeddings", str(path), "--key", "wpf"]) == 2
    err = capsys.readouterr().err
    assert "--key='wpf' is invalid: not in helix.safetensors; it holds ln.bias, ln.weight, " \
        "wpe, wte" in err
    assert main(["analyze", "--embeddings", str(path)]) == 2
    assert "--key" in capsys.readouterr().err
    with pytest.raises(ConfigError, match="width 32"):
        embedding_report(path, "wpe", ln_scale_key="wte")


def test_ctranslate2_reader_returns_names_shapes_values_aliases_and_bfloat16(tmp_path):
    rng = np.random.default_rng(0)
    arrays = {"positions": rng.normal(size=(5, 3)).astype(np.float32),
              "counts": np.arange(4, dtype=np.int32),
              "scale": rng.normal(size=(2, 2)).astype(np.float16),
              "wide": np.array([[1.0, -2.5], [3.140625, 1e-3]], np.float32)}
    path = tmp_path / "model.bin"
    write_ctranslate2(path, arrays, aliases={"alias/positions": "positions"},
                      bfloat16=("wide",))
    read = read_ctranslate2(path)
    assert sorted(read) == ["alias/positions", "counts", "positions", "scale", "wide"]
    for name in ("positions", "counts", "scale"):
        assert read[name].dtype == arrays[name].dtype
        np.testing.assert_array_equal(read[name], arrays[name])
    np.testing.assert_array_equal(read["alias/positions"], arrays["positions"])
    # bfloat16 keeps a float32's upper 16 bits: exact for these, truncated for 1e-3.
    assert read["wide"].dtype == np.float32 and read["wide"].shape == (2, 2)
    np.testing.assert_array_equal(read["wide"][0], [1.0, -2.5])
    assert read["wide"][1, 0] == 3.140625
    assert read["wide"][1, 1] == pytest.approx(1e-3, rel=2**-7) and read["wide"][1, 1] != 1e-3


def test_an_unreadable_or_foreign_bin_is_one_config_error(tmp_path):
    path = tmp_path / "model.bin"
    write_ctranslate2(path, {"wpe": np.zeros((2, 2), np.float32)}, aliases={}, version=9)
    with pytest.raises(ConfigError, match=r"cannot be read \(ValueError: not a CTranslate2 "
                                          r"model of binary version 3-6 \(read 9\)\)"):
        embedding_report(path, "wpe")
    path.write_bytes(b"\x06\x00")
    with pytest.raises(ConfigError, match="cannot be read") as raised:
        embedding_report(path, "wpe")
    assert "\n" not in str(raised.value)


def test_pretrained_positions_script_reads_both_formats_from_its_cache(tmp_path, monkeypatch,
                                                                       capsys):
    """The study's script on a cache that already holds both files: no download, every number."""
    from conftest import load_experiment

    script = load_experiment("pretrained_positions")
    helix = np.load(helix_file(tmp_path, ".npz"))
    for spec in script.MODELS.values():
        arrays = {spec["key"]: helix["wpe"], spec["tokens"]: helix["wte"],
                  spec["ln_scale"]: helix["ln.weight"], spec["ln_bias"]: helix["ln.bias"]}
        target = tmp_path / "cache" / spec["file"]
        target.parent.mkdir(parents=True)
        if target.suffix == ".bin":
            write_ctranslate2(target, arrays, aliases={}, bfloat16=(spec["tokens"],))
        else:
            save_file(arrays, str(target))
    monkeypatch.setattr("sys.argv", ["pretrained_positions.py", "--cache", str(tmp_path / "cache"),
                                     "--out", str(tmp_path / "out")])
    script.main()
    numbers = json.loads((tmp_path / "out" / "pretrained_positions.json").read_text())
    assert sorted(numbers) == sorted(script.MODELS)
    for name, summary in numbers.items():
        assert (summary["rows"], summary["width"]) == (POSITIONS, WIDTH)
        assert summary["norms"]["raw"]["mean"] == pytest.approx(math.hypot(R, S), rel=1e-6)
        assert summary["pca_explained_variance"] == pytest.approx(
            [R**2 / (R**2 + S**2) / 2] * 2 + [S**2 / (R**2 + S**2) / 2], abs=1e-6)
        assert (tmp_path / "out" / name / "norms.png").is_file()
    assert "raw CV 0.000" in capsys.readouterr().out
