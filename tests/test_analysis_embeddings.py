"""`analyze --embeddings`: geometry of a matrix from a weights file, checked on a known helix."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from safetensors.numpy import save_file

from pe_research.analysis import embedding_report
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
    else:
        save_file(arrays, str(path))
    return path


@pytest.mark.parametrize("suffix", [".safetensors", ".npz"])
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
