"""The length x depth grid of a passkey run: each cell is the evaluation at that depth."""

import json

import numpy as np
from conftest import tiny_overrides, train_here

from pe_research.evaluation.depth_grid import depth_grid, plot_depth_grids
from pe_research.evaluation.results import cached_rows

LENGTHS, DEPTHS = (4, 12), (0.0, 1.0)


def test_grid_cells_are_evaluations_at_each_depth_and_the_heatmap_is_drawn(tmp_path):
    run_dir = tmp_path / "passkey"
    train_here(run_dir, tiny_overrides(**{"task.name": "passkey", "train.steps": 4,
                                          "train.eval_every": 4, "train.checkpoint_every": 4,
                                          "data.buckets": "(16, 32)", "task.key_digits": 2}))
    grid = depth_grid(run_dir, LENGTHS, DEPTHS, name="grid", metric="token_accuracy")
    assert grid.shape == (2, 2) and np.all((grid >= 0) & (grid <= 1))
    saved = json.loads((run_dir / "eval" / "grid_d1.json").read_text())
    assert "task.depth_min=1.0" in saved["overrides"]
    # The same cell through the general path: an evaluation with the depth set.
    direct = cached_rows(run_dir, "direct", LENGTHS, ("task.depth_min=1.0",
                                                       "task.depth_max=1.0"))
    np.testing.assert_allclose(grid[1], [r["token_accuracy"] for r in direct])
    # The key first or last: two different test sets.
    first = cached_rows(run_dir, "grid_d0", LENGTHS, ("task.depth_min=0.0", "task.depth_max=0.0"))
    assert [r["loss"] for r in first] != [r["loss"] for r in direct]
    figure = plot_depth_grids({"a": grid, "b": 1 - grid}, LENGTHS, DEPTHS, train_length=8,
                              title="t", path=tmp_path / "grid.png")
    assert len(figure.axes) == 3 and (tmp_path / "grid.png").stat().st_size > 5_000
