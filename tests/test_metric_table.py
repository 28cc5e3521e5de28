"""A metric added through the metric table alone reaches eval.json, eval.csv and compare."""

from __future__ import annotations

import csv
import json
import shutil

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from pe_research.cli.eval import format_table
from pe_research.evaluation.compare import compare_runs
from pe_research.evaluation.results import evaluate_and_write
from pe_research.model.metrics import (
    METRICS,
    Metric,
    Outputs,
    batch_values,
    register,
    summarize,
    unregister,
)

LENGTHS = (4, 8, 12)  # the tiny run trains on 1-8


@pytest.fixture
def target_length_metric():
    """Real target tokens per example (EOS included): n + 1 for reverse_string at length n."""
    metric = register(Metric("target_tokens", lambda o: jnp.sum(o.mask, axis=-1), "sequences",
                             "target tokens per example", "tokens"))
    yield metric
    unregister(metric.name)
    assert metric.name not in METRICS


def test_new_metric_reaches_results_and_comparison(trained_run_dir, tmp_path,
                                                   target_length_metric):
    run_dir = tmp_path / "run"
    shutil.copytree(trained_run_dir, run_dir)
    _, result, paths = evaluate_and_write(run_dir, checkpoint="latest", lengths=LENGTHS,
                                          overrides=["--config.wandb.mode=disabled"])
    assert [row.target_tokens for row in result.rows] == [n + 1.0 for n in LENGTHS]
    header, *lines = format_table(result).splitlines()  # what `pe-research eval` prints
    assert header.split()[:4] == ["length", "samples", "exact_match", "%"]
    assert "target_tokens" in header.split() and "stopped_early" in header.split()
    end = header.index("target_tokens") + len("target_tokens")  # cells are right-aligned
    assert [line[:end].split()[-1] for line in lines] == ["5", "9", "13"]

    rows = json.loads(paths["json"].read_text())["rows"]
    assert [row["target_tokens"] for row in rows] == [n + 1.0 for n in LENGTHS]
    with paths["csv"].open() as handle:
        csv_rows = list(csv.DictReader(handle))
    assert [float(row["target_tokens"]) for row in csv_rows] == [n + 1.0 for n in LENGTHS]

    out = compare_runs([run_dir], tmp_path / "comparison", metric="target_tokens").paths
    table = {row["group"]: row for row in csv.DictReader(out["csv"].open())}
    assert float(table["rope"]["in_dist_mean"]) == pytest.approx(np.mean([5, 9]))  # n = 4, 8
    assert float(table["rope"]["ood_mean"]) == pytest.approx(13)  # n = 12
    assert "target tokens per example (tokens)" in out["markdown"].read_text()


def test_table_values_follow_their_definitions():
    """Golden values: 2 examples (one padding row) of 3 target positions, V = 4."""
    targets = jnp.asarray([[1, 2, 3], [3, 0, 0], [0, 0, 0]])
    mask = jnp.asarray([[True, True, True], [True, False, False], [False, False, False]])
    forced = jnp.asarray([[1, 2, 0], [3, 1, 1], [0, 0, 0]])  # argmax of the logits
    logits = jax.nn.one_hot(forced, 4) * 10.0
    decoded = jnp.asarray([[1, 2, 3], [2, 0, 0], [0, 0, 0]])
    outputs = Outputs(logits, targets, mask, decoded)
    values = batch_values(outputs, list(METRICS.values()))
    assert float(values["token_accuracy"]) == pytest.approx(3 / 4)
    assert float(values["sequence_accuracy"]) == pytest.approx(1 / 2)
    assert float(values["decoded_token_accuracy"]) == pytest.approx(3 / 4)
    assert float(values["exact_match"]) == pytest.approx(1 / 2)
    right, wrong = -jax.nn.log_softmax(jnp.asarray([10.0, 0, 0, 0]))[0:2]
    assert float(values["loss"]) == pytest.approx(float(3 * right + wrong) / 4, rel=1e-5)
    summary = summarize({"exact_match": 1.0, "sequences": 2.0}, [METRICS["exact_match"]])
    assert summary["exact_match"] == 0.5
    assert summary["exact_match_low"] < 0.5 < summary["exact_match_high"]


def test_output_token_accuracy_counts_output_tokens_only():
    """Hand-made batch: the EOS slot and everything after it are excluded."""
    import jax.numpy as jnp

    from pe_research.model.metrics import METRICS, Outputs, example_sums
    from pe_research.tasks.vocabulary import EOS_ID

    targets = jnp.asarray([[5, 6, 7, EOS_ID, 0], [8, EOS_ID, 0, 0, 0]])
    mask = jnp.asarray([[1, 1, 1, 1, 0], [1, 1, 0, 0, 0]], bool)
    # Row 0: 2 of 3 output tokens right, EOS wrong (ignored); row 1: its one token right, then
    # garbage after EOS (ignored).
    decoded = jnp.asarray([[5, 9, 7, 4, 4], [8, 3, 3, 3, 3]])
    outputs = Outputs(jnp.zeros((2, 5, 12)), targets, mask, decoded)
    sums = example_sums(outputs, [METRICS["output_token_accuracy"]])
    assert sums["output_token_accuracy"].tolist() == [2.0, 1.0]
    assert sums["output_tokens"].tolist() == [3.0, 1.0]
    assert METRICS["output_token_accuracy"].value(
        {k: float(v.sum()) for k, v in sums.items()}) == 0.75
