"""docs/example.py, the notebook-style example, runs as written on two trained runs."""

from __future__ import annotations

import runpy
import sys

import matplotlib.image
from conftest import DEFAULT_CONFIG, REPO, tiny_overrides

from pe_research.config import load_config
from pe_research.training.loop import train


def test_the_example_evaluates_two_runs_and_draws_both(trained_run_dir, tmp_path, monkeypatch,
                                                       capsys):
    other = tmp_path / "alibi"
    train(load_config(DEFAULT_CONFIG, tiny_overrides(**{
        "model.pe.type": "alibi", "train.steps": 10, "train.log_every": 5,
        "train.checkpoint_every": 10, "train.eval_every": 0, "wandb.mode": "disabled"})), other)
    out = tmp_path / "example.png"
    monkeypatch.setattr(sys, "argv", ["example.py", str(trained_run_dir), str(other),
                                      "--lengths", "6", "--out", str(out)])
    namespace = runpy.run_path(str(REPO / "docs" / "example.py"), run_name="__main__")
    printed = [line for line in capsys.readouterr().out.splitlines() if "exact match" in line]
    assert [line.split(" (step")[0] for line in printed[:2]] == [str(trained_run_dir), str(other)]
    assert len(printed[0].split("exact match by length ")[1].split()) == 6
    figure = namespace["figure"]
    assert len(figure.axes) == 2 and all(ax.lines for ax in figure.axes)
    assert all("training length" in " ".join(ax.get_legend_handles_labels()[1])
               for ax in figure.axes)
    assert matplotlib.image.imread(out).shape[1] == 1200
