"""The comparison's sentence follows the numbers: flip the curves and it flips."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from pe_research.evaluation.compare import RunCurve, aggregate
from pe_research.evaluation.finding import comparison_finding, describe_comparison
from pe_research.evaluation.group_summary import summarize_group
from pe_research.model.metrics import METRICS

LENGTHS = np.arange(1, 13)  # trained on 1-6, evaluated to 12
HOLDS = [1.0] * 6 + [0.9, 0.8, 0.6, 0.4, 0.2, 0.1]  # beyond 6: mean 0.5, 0.8 at 8
COLLAPSES = [1.0] * 6 + [0.3, 0.0, 0.0, 0.0, 0.0, 0.0]  # beyond 6: mean 0.05, 0.0 at 8


def sentence(curves: dict[str, list[list[float]]]) -> str:
    """The finding for groups of per-seed curves (fractions at LENGTHS)."""
    runs = [RunCurve(Path(f"{name}_{seed}"), {"data": {"train_lengths": [1, 6]}, "seed": seed},
                     name,
                     LENGTHS.copy(), np.asarray(values, float), "test")
            for name, seeds in curves.items() for seed, values in enumerate(seeds)]
    groups = aggregate(runs)
    summaries = {name: summarize_group(group, 0.9) for name, group in groups.items()}
    return comparison_finding(groups, summaries, METRICS["exact_match"])


@pytest.mark.parametrize("good,bad", [("alibi", "rope"), ("rope", "alibi")])
def test_sentence_names_the_scheme_that_holds_and_flips_with_the_curves(good, bad):
    text = sentence({good: [HOLDS], bad: [COLLAPSES]})
    assert text.startswith("Both groups learned lengths 1-6 (at least 95% decoded exact match "
                           "in distribution, one seed per group)")
    # the widest lead of the holding curve is at length 8 (0.8 vs 0.0)
    assert (f"{good} extrapolates furthest (50% mean decoded exact match over lengths 7-12, "
            f"80% at length 8), while {bad} falls to 5% (0% at length 8)") in text


def test_three_groups_split_at_the_widest_gap():
    middle = [1.0] * 6 + [0.8, 0.7, 0.5, 0.3, 0.1, 0.0]  # beyond 6: mean 0.4
    text = sentence({"rope": [COLLAPSES], "alibi": [HOLDS], "none": [middle]})
    assert "alibi and none extrapolate furthest" in text
    assert "furthest (50% and 40% mean" in text and "while rope falls to 5%" in text


def test_an_undertrained_group_is_said_instead_of_a_ranking():
    weak = [0.9, 0.9, 0.8, 0.8, 0.7, 0.7] + COLLAPSES[6:]  # in distribution 80%
    text = sentence({"alibi": [HOLDS], "rope": [weak]})
    assert text.startswith("rope did not learn the training lengths 1-6 (80% decoded exact "
                           "match in distribution, below 95%)")
    assert "undertrained" in text and "extrapolates furthest" not in text
    assert sentence({"alibi": [weak], "rope": [weak]}).startswith(
        "No group learned the training lengths 1-6 (80% and 80%")


def test_a_group_learned_only_when_every_seed_learned():
    weak = [1.0, 1.0, 0.9, 0.8, 0.7, 0.6] + COLLAPSES[6:]  # in distribution 83%
    # alibi's seeds: 100% and 83% in distribution, 92% pooled: not learned.
    text = sentence({"alibi": [HOLDS, weak], "rope": [COLLAPSES, COLLAPSES]})
    assert text.startswith("alibi did not learn the training lengths 1-6 (83% decoded exact "
                           "match in distribution on the weakest seed, below 95%)")


def test_a_score_just_below_the_bar_is_never_printed_as_the_bar():
    close = [1.0] * 5 + [0.69] + COLLAPSES[6:]  # in distribution 94.83%: "95%" if rounded
    text = sentence({"alibi": [HOLDS, close], "rope": [COLLAPSES, COLLAPSES]})
    assert text.startswith("alibi did not learn the training lengths 1-6 (94.8% decoded exact "
                           "match in distribution on the weakest seed, below 95%)"), text
    far = [1.0] * 5 + [0.64] + COLLAPSES[6:]  # 94%: printed as usual
    assert "(94% decoded exact match" in sentence({"alibi": [HOLDS, far], "rope": [COLLAPSES]})


def test_a_seed_short_at_one_training_length_is_named_after_the_ranking():
    dip = [1.0] * 5 + [0.76] + HOLDS[6:]  # in distribution 96%, 76% at length 6
    text = sentence({"alibi": [HOLDS, dip], "rope": [COLLAPSES, COLLAPSES]})
    assert "alibi extrapolates furthest" in text
    assert text.endswith(" At one training length a model falls short: alibi's seed 1 scores "
                         "76% decoded exact match at length 6.")
    assert "falls short" not in sentence({"alibi": [HOLDS, HOLDS], "rope": [COLLAPSES] * 2})


def test_one_group_is_named_not_counted():
    assert sentence({"alibi": [HOLDS]}) == (
        "alibi learned lengths 1-6 (at least 95% decoded exact match in distribution, one seed "
        "per group); beyond 6, alibi scores 50% on average.")


def test_close_curves_do_not_part_ways():
    near = [1.0] * 6 + [0.9, 0.8, 0.6, 0.4, 0.1, 0.0]  # beyond 6: mean 0.467
    text = sentence({"alibi": [HOLDS], "rope": [near]})
    assert "they are level" in text and "from 47% to 50%" in text and "10 points" in text


def beyond(mean: float) -> list[float]:
    """A curve that learned 1-6 and scores ``mean`` at every length beyond."""
    return [1.0] * 6 + [mean] * 6


@pytest.mark.parametrize("first,second", [("alibi", "rope"), ("rope", "alibi")])
def test_close_curves_whose_seeds_separate_are_not_called_level(first, second):
    """A 5-point gap (under the 10 that parts the curves) with every seed of one above every
    seed of the other: the sentence names that order instead of calling the groups level."""
    text = sentence({first: [beyond(0.50), beyond(0.49), beyond(0.48)],
                     second: [beyond(0.45), beyond(0.44), beyond(0.43)],
                     "none": [beyond(0.49), beyond(0.46), beyond(0.44)]})
    assert "they are level" not in text and "extrapolate" not in text
    assert "beyond 6 they do not part into two sets: mean decoded exact match over the longer " \
        "lengths ranges from 44% to 49%, and no gap between neighbours is wider than 10 " \
        f"points; every seed still puts {first} above {second}." in text, text


@pytest.mark.parametrize("first,second", [("alibi", "rope"), ("rope", "alibi")])
def test_groups_are_ordered_only_where_their_seeds_separate(first, second):
    """Means 38% against 12%, a gap wider than either std: ordered only when every seed of
    one is above every seed of the other, in either direction."""
    overlapping = {first: [beyond(0.5), beyond(0.45), beyond(0.2)],
                   second: [beyond(0.25), beyond(0.05), beyond(0.05)]}
    text = sentence(overlapping)
    assert "3 seeds per group" in text
    assert "they are level" in text and "the seeds' ranges overlap" in text
    assert "extrapolate" not in text
    separated = {first: [beyond(0.5), beyond(0.45), beyond(0.3)],
                 second: [beyond(0.25), beyond(0.05), beyond(0.05)]}
    text = sentence(separated)
    assert f"{first} extrapolates furthest (42% mean" in text and f"while {second} falls to 12%" \
        in text


def test_nothing_beyond_training_is_said_so():
    groups = {"rope": {"lengths": np.arange(1, 7), "mean": np.ones(6)}}
    summaries = {"rope": {"in_dist_mean": 1.0, "ood_mean": float("nan"), "ood_std": 0.0,
                          "runs": 1}}
    assert describe_comparison(groups, summaries, (1, 6)).startswith(
        "No length beyond the training range 1-6 was evaluated")


def test_losses_get_no_sentence():
    runs = [RunCurve(Path("a"), {"data": {"train_lengths": [1, 6]}}, "a", LENGTHS.copy(),
                     np.ones(12), "test")]
    groups = aggregate(runs, "loss")
    summaries = {name: summarize_group(group, 0.9) for name, group in groups.items()}
    assert comparison_finding(groups, summaries, METRICS["loss"]) is None


def perplexity_sentence(curves: dict[str, list[float]]) -> str:
    """The finding for one-seed perplexity curves at lengths 16, 64 (trained), 256, 1024."""
    lengths = np.array([16, 64, 256, 1024])
    runs = [RunCurve(Path(name), {"data": {"train_lengths": [64, 64]}, "seed": 0}, name,
                     lengths, np.asarray(values, float), "test")
            for name, values in curves.items()]
    groups = aggregate(runs, "perplexity")
    summaries = {name: summarize_group(group, 0.9) for name, group in groups.items()}
    return comparison_finding(groups, summaries, METRICS["perplexity"],
                              group_by="model.pe.type")


@pytest.mark.parametrize("flat,rising", [("alibi", "sinusoidal"), ("sinusoidal", "alibi")])
def test_perplexity_sentence_names_who_holds_at_the_longest_window(flat, rising):
    text = perplexity_sentence({flat: [5.0, 4.0, 3.9, 4.2], rising: [5.5, 4.4, 9.0, 44.0]})
    assert text == (f"At the training length 64 the schemes reach perplexity 4-4.4 (mean over 1 "
                    f"seed; {flat} lowest). At length 1024, {flat} stays within 10% of its own "
                    f"(1.05x), while {rising} rises to 44 (10x).")
    both = perplexity_sentence({flat: [5.0, 4.0, 3.9, 4.0], rising: [5.5, 4.4, 4.0, 4.6]})
    assert both.endswith(f"every one stays within 10% of its own: {flat} 1x and {rising} 1.05x.")


def test_names_holding_commas_are_listed_with_semicolons():
    from pe_research.evaluation.finding import name_list

    assert name_list(["rope"]) == "rope"
    assert name_list(["rope", "alibi", "t5"]) == "rope, alibi and t5"
    assert name_list(["pe.type=dape, base=alibi", "pe.type=dape, base=t5", "pe.type=rope"]) == (
        "pe.type=dape, base=alibi; pe.type=dape, base=t5 and pe.type=rope")

