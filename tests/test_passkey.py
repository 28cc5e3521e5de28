"""Passkey retrieval: the key where its depth puts it, the authors' prompt, one-line errors."""

import numpy as np
import pytest

from pe_research.core.errors import ConfigError
from pe_research.tasks import get_task
from pe_research.tasks.passkey import DESCRIPTION, FILLER, QUESTION


def texts(task, examples):
    symbols = task.vocabulary.decode
    return [("".join(symbols(s)), "".join(symbols(t)))
            for s, t in zip(examples.source, examples.target, strict=True)]


@pytest.mark.parametrize(("depth", "n", "cut"), [(0.0, 30, 0), (0.5, 30, 15), (1.0, 30, 30),
                                                 (0.25, 10, 2)])
def test_the_key_sits_at_its_depth_and_is_the_target(depth, n, cut):
    task = get_task({"name": "passkey", "depth_min": depth, "depth_max": depth})
    examples = task.eval_examples([n], 4, seed=0)
    filler = " ".join([FILLER] * 2)
    for source, target in texts(task, examples):
        assert len(source) == n + 8 and len(target) == 5 and target.isdigit()
        assert source == f"{filler[:cut]}|{target}|{filler[:n - cut]}?"
    assert len({t for _, t in texts(task, examples)}) == 4  # keys differ between examples


def test_training_depths_spread_over_the_range():
    task = get_task({"name": "passkey", "depth_min": 0.2, "depth_max": 0.6})
    examples = task.make_examples(np.full(400, 50), np.random.default_rng(0))
    cuts = np.asarray([source.index("|") for source, _ in texts(task, examples)])
    assert cuts.min() == 10 and cuts.max() == 30  # round(0.2 * 50) .. round(0.6 * 50)
    assert 15 < np.median(cuts) < 25


def test_paper_format_is_the_authors_prompt():
    """``generate_prompt`` of epfml/landmark-attention llama/run_test.py, with its cut and key."""
    task = get_task({"name": "passkey", "format": "paper", "depth_min": 0.3, "depth_max": 0.3})
    n = 200
    garbage_inf = " ".join([FILLER] * 2000)
    for source, target in texts(task, task.eval_examples([n], 3, seed=1)):
        key = int(target)
        assert target == f" {key}" and 10_000 <= key <= 50_000
        lines = [DESCRIPTION, garbage_inf[:60],
                 f"The pass key is {key}. Remember it. {key} is the pass key.",
                 garbage_inf[:n - 60], QUESTION]
        assert source == "\n".join(lines)
        assert len(source) == task.source_length(n)


@pytest.mark.parametrize(("config", "message"), [
    ({"depth_min": 0.8, "depth_max": 0.2}, "depth_min <= depth_max"),
    ({"depth_max": 1.5}, "depth_min <= depth_max <= 1"),
    ({"format": "needle"}, "choose one of"),
    ({"format": "paper", "key_digits": 3}, "5 with format='paper'"),
    ({"key_digits": 0}, "an integer >= 1"),
])
def test_bad_settings_are_one_line_errors(config, message):
    with pytest.raises(ConfigError, match=message):
        get_task({"name": "passkey", **config})
