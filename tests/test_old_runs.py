"""A run directory written before the consolidation (commit acdeb41, flat optimizer layout)
still evaluates and resumes, with the numbers that code gave.

``fixtures/run_acdeb41``: ``pe-research train`` at acdeb41 of configs/default.py with the tiny
model (reverse_string 1-8, d_model 16, 1+1 layers), 12 steps, one checkpoint at step 12. The
golden values below are what acdeb41's ``pe-research eval`` and its resume to 24 steps printed.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from pe_research.config import load_config
from pe_research.evaluation.range_eval import evaluate_run
from pe_research.runs.restore import load_run
from pe_research.runs.tracking import read_metrics
from pe_research.training.loop import train

FIXTURE = Path(__file__).parent / "fixtures" / "run_acdeb41"
# acdeb41's `pe-research eval` of the fixture: length -> (loss, decoded token accuracy).
EVAL = {4: (1.0805489122867584, 0.5375), 8: (1.0352138545778062, 5 / 9),
        12: (1.0306620047642634, 0.5769230769230769)}
# acdeb41's resume of the fixture to 24 steps: logged training loss at steps 18 and 24.
RESUMED = {18: 1.0635607639948528, 24: 1.0848812858263652}


@pytest.fixture
def old_run(tmp_path) -> Path:
    return Path(shutil.copytree(FIXTURE, tmp_path / "run"))


def test_an_old_run_evaluates_to_the_numbers_its_code_gave(old_run):
    result = evaluate_run(load_run(old_run, "latest"), lengths=sorted(EVAL))
    for row in result.rows:
        loss, accuracy = EVAL[row.length]
        assert row.values["loss"] == pytest.approx(loss, rel=1e-5)
        assert row.values["decoded_token_accuracy"] == pytest.approx(accuracy)
        assert row.values["exact_match"] == 0.0


@pytest.mark.slow
def test_an_old_run_resumes_from_its_config_json_as_its_code_resumed_it(old_run):
    config = load_config(old_run / "config.json", ["train.steps=24"])
    train(config, old_run)
    losses = {r["step"]: r["train/loss"] for r in read_metrics(old_run) if "train/loss" in r}
    for step, loss in RESUMED.items():
        assert losses[step] == pytest.approx(loss, rel=1e-5)
