"""The papers' table: cells are the best seed and mean ± std over test lengths, rows by class."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from pe_research.config import base_config, to_dict
from pe_research.evaluation.paper_table import (
    Cell,
    chomsky_class,
    heatmap_title,
    versus_plain,
    write_paper_table,
)

METRIC = "output_token_accuracy"


def fake_run(root: Path, name: str, task: str, scheme: str, randomized: int,
             beyond: list[float], test_lengths: tuple[int, ...] = (5, 6, 7)) -> Path:
    """A run directory with config.json and eval/eval.json: 0.99 at lengths 1-4 (trained),
    ``beyond`` at ``test_lengths``."""
    config = to_dict(base_config(task=task, pe=scheme))
    config["data"]["train_lengths"] = [1, 4]
    config["model"]["pe"]["randomize"]["max_position"] = randomized
    run_dir = root / name
    (run_dir / "eval").mkdir(parents=True)
    (run_dir / "config.json").write_text(json.dumps(config))
    rows = [{"length": n, "samples": 8, METRIC: 0.99} for n in range(1, 5)]
    rows += [{"length": n, "samples": 8, METRIC: v}
             for n, v in zip(test_lengths, beyond, strict=True)]
    (run_dir / "eval" / "eval.json").write_text(json.dumps({"rows": rows}))
    return run_dir


def test_cells_are_max_and_mean_over_seeds_of_the_test_lengths(tmp_path):
    runs = [fake_run(tmp_path, "a0", "reverse_string", "rope", 0, [0.5, 0.4, 0.3]),
            fake_run(tmp_path, "a1", "reverse_string", "rope", 0, [0.8, 0.7, 0.6]),
            fake_run(tmp_path, "b0", "reverse_string", "rope", 64, [1.0, 1.0, 0.7]),
            fake_run(tmp_path, "c0", "parity_check", "rope", 0, [0.2, 0.2, 0.2])]
    paths = write_paper_table(runs, tmp_path / "out")
    rows = list(np.genfromtxt(paths["csv"], delimiter=",", dtype=None, names=True,
                              encoding=None))
    cells = {(r["task"], r["column"]): r for r in rows}
    plain = cells[("reverse_string", "rope")]
    assert plain["max"] == pytest.approx(0.7)  # seed 1: mean of 0.8, 0.7, 0.6
    assert plain["mean"] == pytest.approx(0.55)
    assert plain["std"] == pytest.approx(np.std([0.4, 0.7], ddof=1))
    assert plain["seeds"] == 2
    assert cells[("reverse_string", "rope randomized")]["max"] == pytest.approx(0.9)
    assert cells[("parity_check", "rope")]["class"] == "R"
    table = paths["markdown"].read_text()
    # Regular tasks come before deterministic context-free ones; plain before randomized.
    assert table.index("| R | parity_check") < table.index("| DCF | reverse_string")
    assert "| class | task | rope | rope randomized |" in table
    assert "**70.0** (55.0 ± 21.2, n=2; in-dist 99.0)" in table
    assert plain["per_seed"] == "0.4 0.7" and plain["vs_plain"] == ""
    # One randomized seed at 0.9 is above both plain seeds (0.4, 0.7): every seed separates.
    assert cells[("reverse_string", "rope randomized")]["vs_plain"] == "above"
    assert "**90.0** (90.0 ± n/a, n=1; in-dist 99.0) above |" in table
    assert "uniform over every test length (5-7), as the papers average" in table
    assert plain["dense_grid"] and plain["uniform_mean"] == pytest.approx(0.55)
    assert paths["png"].stat().st_size > 0


def test_one_test_length_is_named_as_such(tmp_path):
    runs = [fake_run(tmp_path, f"a{seed}", "reverse_string", "rope", 0, [value], (6,))
            for seed, value in enumerate((0.5, 0.7))]
    paths = write_paper_table(runs, tmp_path / "out")
    assert "Averaging over lengths: none, one test length (6)." in paths["markdown"].read_text()


def test_chomsky_classes():
    assert [chomsky_class(t) for t in ("parity_check", "reverse_string", "duplicate_string",
                                       "copy")] == ["R", "DCF", "CS", "other"]


def test_a_sparse_test_grid_is_named_and_given_its_uniform_average(tmp_path):
    # Lengths 5, 7, 11 hold 0.9, 0.5, 0.1: linear between them, every length 5-11 weighs
    # equally: 0.9, 0.7, 0.5, 0.4, 0.3, 0.2, 0.1 -> 3.1 / 7; the plain mean is 0.5.
    runs = [fake_run(tmp_path, f"s{seed}", "reverse_string", "rope", 0, [0.9, 0.5, 0.1],
                     test_lengths=(5, 7, 11)) for seed in range(2)]
    paths = write_paper_table(runs, tmp_path / "out")
    row = next(iter(np.genfromtxt(paths["csv"], delimiter=",", dtype=None, names=True,
                                  encoding=None, ndmin=1)))
    assert row["mean"] == pytest.approx(0.5) and not row["dense_grid"]
    assert row["uniform_mean"] == pytest.approx(3.1 / 7)
    table = paths["markdown"].read_text()
    assert "a sparse grid (5, 7, 11), not the papers' uniform average" in table
    assert "**50.0** (50.0 ± 0.0, n=2; uniform 44.3; in-dist 99.0)" in table


def test_a_randomized_cell_is_ordered_against_its_plain_one_only_where_every_seed_separates():
    def cell(*values):
        return Cell(values, max(values), float(np.mean(values)), 0.0, 0.0, 1.0, True)

    plain = cell(0.4, 0.6)
    for randomized, verdict in (((0.61, 0.9), "above"), ((0.1, 0.39), "below"),
                                ((0.5, 0.9), "level"), ((0.3, 0.45), "level")):
        cells = {("t", "rope"): plain, ("t", "rope randomized"): cell(*randomized)}
        assert versus_plain(cells, "t", "rope randomized") == verdict
        flipped = {"above": "below", "below": "above", "level": "level"}[verdict]
        assert versus_plain(cells, "t", "rope randomized", higher_is_better=False) == flipped
    assert versus_plain(cells, "t", "rope") == ""  # a plain cell has nothing to be against
    assert versus_plain({("t", "rope randomized"): plain}, "t", "rope randomized") == ""


def test_the_heatmap_title_names_the_metric_the_test_and_the_training_lengths():
    from pe_research.model.metrics import get_metric

    title = heatmap_title(get_metric("output_token_accuracy"), ["11-30", "12-30"], ["1-10"])
    assert title.endswith("mean over the test lengths 11-30; 12-30 (trained on 1-10); best of "
                          "the seeds")
    assert title.startswith(get_metric("output_token_accuracy").label)
    one = heatmap_title(get_metric("output_token_accuracy"), ["12"], ["1-8"])
    assert one.endswith(", at test length 12 (trained on 1-8); best of the seeds")
    assert heatmap_title(get_metric("output_token_accuracy"), ["12, 16"], ["1-8"]).endswith(
        ", mean over the test lengths 12, 16 (trained on 1-8); best of the seeds")
