"""Averages over lengths: the papers' uniform average, and a sparse grid named as such."""

from __future__ import annotations

import types

import numpy as np
import pytest

from pe_research.evaluation.group_summary import (
    averaging_text,
    is_dense,
    markdown_table,
    summarize_group,
    uniform_mean,
)
from pe_research.model.metrics import METRICS

ACCURACY = METRICS["output_token_accuracy"]


def test_uniform_mean_is_the_written_out_mean_over_every_length():
    # Dense: the plain mean. Sparse 10, 12, 16 -> 0.6, 0.4, 0.0 interpolated to every length
    # 10-16: 0.6, 0.5, 0.4, 0.3, 0.2, 0.1, 0.0 -> 2.1 / 7.
    assert uniform_mean([3, 4, 5], [0.2, 0.4, 0.9]) == pytest.approx(1.5 / 3)
    assert uniform_mean([10, 12, 16], [0.6, 0.4, 0.0]) == pytest.approx(2.1 / 7)
    assert np.isnan(uniform_mean([], []))
    assert is_dense([41, 42, 43]) and not is_dense([10, 12, 16])


def test_averaging_text_names_a_sparse_grid():
    assert averaging_text([41, 42, 43]) == "uniform over every length 41-43"
    assert averaging_text([12]) == "at length 12"
    assert averaging_text([]) == "no evaluated lengths"
    assert averaging_text([10, 12, 16]).startswith(
        "mean over the 3 evaluated lengths 10, 12, 16 (a sparse grid;")


def group(values: list[list[float]], lengths: list[int]) -> dict:
    members = [types.SimpleNamespace(train_lengths=(1, 2), config={"seed": seed})
               for seed in range(len(values))]
    array = np.asarray(values, float)
    return {"metric": ACCURACY, "lengths": np.asarray(lengths), "values": array,
            "members": members, "runs": len(values), "mean": array.mean(0),
            "best": array.max(0)}


def test_a_sparse_group_gets_its_uniform_column_and_a_dense_one_does_not():
    sparse = summarize_group(group([[1.0, 1.0, 0.6, 0.4, 0.0]] * 2, [1, 2, 10, 12, 16]), 0.9)
    assert sparse["ood_mean"] == pytest.approx(1.0 / 3) and not sparse["ood_dense"]
    assert sparse["ood_uniform_mean"] == pytest.approx(2.1 / 7)
    table = markdown_table({"rope": sparse}, "model.pe.type", 0.9, ACCURACY)
    assert "OOD mean ± std (sparse grid)" in table and "OOD uniform (interpolated)" in table
    assert "| rope | 2 | 100.0 ± 0.0 | 100.0 | 33.3 ± 0.0 | 33.3 | 30.0 ± 0.0 | 2 | 2 |" in table
    dense = summarize_group(group([[1.0, 1.0, 0.6, 0.4]], [1, 2, 3, 4]), 0.9)
    assert dense["ood_dense"] and dense["ood_uniform_mean"] == dense["ood_mean"]
    assert "uniform" not in markdown_table({"rope": dense}, "model.pe.type", 0.9, ACCURACY)
