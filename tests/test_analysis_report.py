"""Analytic mode: sinusoidal norms are sqrt(dim/2); the JSON and arrays are what figures show."""

import json
import math

import numpy as np
import pytest

from pe_research.analysis.report import ARRAYS_FILE, REPORT_FILE, analytic_report, write_report
from pe_research.analysis.shape import position_cosines
from pe_research.cli import main

DIM, POSITIONS, OFFSET = 64, 300, 100


def sinusoid_table(positions: int, dim: int, base: float = 10_000.0) -> np.ndarray:
    """PE(p, 2i) = sin(p / base^(2i/d)), PE(p, 2i+1) = cos(...), written out in float64."""
    table = np.zeros((positions, dim))
    for p in range(positions):
        for i in range(dim // 2):
            table[p, 2 * i] = math.sin(p / base ** (2 * i / dim))
            table[p, 2 * i + 1] = math.cos(p / base ** (2 * i / dim))
    return table


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    out = tmp_path_factory.mktemp("analytic")
    report = analytic_report("sinusoidal", DIM, POSITIONS, offset=OFFSET)
    write_report(report, out)
    results = json.loads((out / REPORT_FILE).read_text())
    with np.load(out / ARRAYS_FILE) as arrays:
        return report, results, dict(arrays), out


def test_norm_is_sqrt_half_dim_at_every_position(written):
    _, results, arrays, _ = written
    norms = np.asarray(results["norms"]["raw"]["norms"])
    assert norms.shape == (POSITIONS,)
    formula = np.linalg.norm(sinusoid_table(POSITIONS, DIM), axis=-1)
    np.testing.assert_allclose(formula, math.sqrt(DIM / 2), rtol=1e-12)
    np.testing.assert_allclose(norms, formula, rtol=2e-6)
    np.testing.assert_allclose(arrays["position_vectors"], sinusoid_table(POSITIONS, DIM),
                               atol=2e-4)  # float32 sin/cos of angles up to 300 rad
    raw = results["norms"]["raw"]
    assert raw["offset"] == OFFSET
    assert raw["mean"] == pytest.approx(math.sqrt(DIM / 2), rel=1e-6)
    assert raw["std"] < 1e-5 and raw["cv"] < 1e-6
    tail = norms[OFFSET:]  # the statistics are recomputable from the saved curve
    assert raw["mean"] == pytest.approx(tail.mean()) and raw["std"] == pytest.approx(tail.std())


def test_norm_figure_shows_the_json_numbers(written):
    report, results, _, _ = written
    axes = report.figures["norms"].axes[0]
    np.testing.assert_array_equal(axes.lines[0].get_ydata(), results["norms"]["raw"]["norms"])
    label = axes.lines[0].get_label()
    raw = results["norms"]["raw"]
    assert f"mean {raw['mean']:.4g}" in label and f"CV {raw['cv']:.3g}" in label
    assert "position" in axes.get_xlabel() and "norm" in axes.get_ylabel()


def test_cosine_heatmap_is_recomputed_from_the_saved_vectors(written):
    report, results, arrays, _ = written
    shown = np.asarray(report.figures["position_cosines"].axes[0].images[0].get_array())
    np.testing.assert_allclose(shown, position_cosines(arrays["position_vectors"]), atol=1e-12)
    # cos(PE(p), PE(p + k)) = mean_i cos(k w_i) for every p: a golden value per distance
    frequencies = 10_000.0 ** (-2 * np.arange(DIM // 2) / DIM)
    for distance, value in results["shape"]["mean_cosine_at_distance"].items():
        expected = np.mean(np.cos(int(distance) * frequencies))
        assert value == pytest.approx(expected, abs=1e-5)


def test_pca_figure_and_ratios_match_the_saved_vectors(written):
    report, results, arrays, _ = written
    vectors = arrays["position_vectors"].astype(np.float64)
    eigenvalues = np.sort(np.linalg.eigvalsh(np.cov(vectors.T, bias=True)))[::-1]
    ratios = results["shape"]["explained_variance_ratio"]
    np.testing.assert_allclose(ratios, eigenvalues[:3] / eigenvalues.sum(), rtol=1e-6)
    axes = report.figures["position_pca"].axes[0]
    xs, ys, zs = axes.collections[0]._offsets3d  # the scatter of PC1..3 coloured by position
    np.testing.assert_allclose(np.stack([xs, ys, zs], -1), arrays["pca_coordinates"])
    assert f"PC1 {ratios[0]:.3f}" in axes.get_title()


def test_cli_analytic_mode_writes_the_same_numbers(written, tmp_path, capsys):
    _, results, _, _ = written
    code = main(["analyze", "--scheme", "sinusoidal", "--dim", str(DIM), "--positions",
                 str(POSITIONS), "--out", str(tmp_path)])
    assert code == 0
    assert json.loads((tmp_path / REPORT_FILE).read_text()) == results
    assert {p.name for p in tmp_path.glob("*.png")} == {
        "norms.png", "position_cosines.png", "position_pca.png"}
    assert f"norm raw: mean {math.sqrt(DIM / 2):.6g}" in capsys.readouterr().out


def test_analytic_mode_takes_the_schemes_own_keys(tmp_path):
    argv = ["analyze", "--scheme", "sinusoidal", "--dim", str(DIM), "--positions", "200",
            "--config.model.pe.max_wavelength=100", "--out", str(tmp_path)]
    assert main(argv) == 0
    results = json.loads((tmp_path / REPORT_FILE).read_text())
    assert results["scheme"]["max_wavelength"] == 100.0
    frequencies = 100.0 ** (-2 * np.arange(DIM // 2) / DIM)
    cosine = results["shape"]["mean_cosine_at_distance"]["16"]
    assert cosine == pytest.approx(np.mean(np.cos(16 * frequencies)), abs=1e-5)


@pytest.mark.parametrize(("argv", "key"), [
    (["--scheme", "sinusoidal", "--config.model.d_model=8"], "model.d_model"),
    (["--scheme", "rope", "--dim", "8", "--positions", "4"], "--scheme"),
    (["--scheme", "learned", "--dim", "8", "--positions", "4000"], "model.pe.max_len"),
    (["--scheme", "sinusoidal", "--dim", "7", "--positions", "10"], "model.d_model"),
    ([], "RUN_DIR/--scheme/--embeddings"),
])
def test_bad_analytic_arguments_are_one_line_config_errors(argv, key, tmp_path, capsys):
    assert main(["analyze", *argv, "--out", str(tmp_path)]) == 2
    error = capsys.readouterr().err.strip()
    assert error.count("\n") == 0 and f"config error: {key}=" in error
    assert not list(tmp_path.iterdir())
