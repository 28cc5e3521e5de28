"""One sentence of what perplexity curves show: which groups hold their in-distribution
perplexity at the longest evaluated window and which rise, computed from the numbers.

ALiBi's criterion (Press et al. 2022, fig. 1): a scheme extrapolates when its perplexity on
windows longer than the training ones stays at (or below) its perplexity at the training length.
Each group's ratio is its mean curve at the longest evaluated length over its mean over the
training lengths; a group *holds* when the ratio is at most ``HOLDS``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from pe_research.evaluation.wording import name_list

HOLDS = 1.10


def _values(values: Sequence[float], suffix: str = "") -> str:
    return name_list([f"{v:.3g}{suffix}" for v in values])


def describe_perplexity(groups: Mapping[str, Mapping[str, Any]],
                        summaries: Mapping[str, Mapping[str, Any]],
                        train_lengths: tuple[int, int], *, noun: str = "groups",
                        holds: float = HOLDS) -> str:
    """The sentence for perplexity (or any lower-is-better ratio) curves.

    ``groups[name]`` has ``lengths`` [L] and ``mean`` [L]; ``summaries[name]`` has
    ``in_dist_mean`` (mean over the training lengths) and ``runs``.
    """
    low, high = train_lengths
    span = f"{low}" if low == high else f"{low}-{high}"
    longest = min(int(g["lengths"].max()) for g in groups.values())
    if longest <= high:
        return (f"No length beyond the training range {span} was evaluated, so the figure shows "
                "nothing about extrapolation.")
    trained = {name: float(s["in_dist_mean"]) for name, s in summaries.items()}
    at = {name: float(g["mean"][g["lengths"] == longest][0]) for name, g in groups.items()}
    ratio = {name: at[name] / trained[name] for name in groups}
    order = sorted(groups, key=lambda name: ratio[name])
    held = [name for name in order if ratio[name] <= holds]
    rose = [name for name in order if ratio[name] > holds]
    seeds = sorted({int(s["runs"]) for s in summaries.values()})
    seed_note = f"{seeds[0]} seed{'s' if seeds[0] > 1 else ''}" if len(seeds) == 1 else (
        f"{seeds[0]}-{seeds[-1]} seeds")
    best = min(trained, key=trained.get)
    head = (f"At the training length{'s' if low != high else ''} {span} the {noun} reach "
            f"perplexity {min(trained.values()):.3g}-{max(trained.values()):.3g} (mean over "
            f"{seed_note}; {best} lowest). At length {longest}, ")
    if not rose:
        return head + (f"every one stays within {100 * (holds - 1):.0f}% of its own: "
                       + name_list([f"{n} {ratio[n]:.3g}x" for n in order]) + ".")
    if not held:
        return head + (f"every one rises more than {100 * (holds - 1):.0f}% above it: "
                       f"{name_list(rose)} reach{'es' if len(rose) == 1 else ''} "
                       f"{_values([at[n] for n in rose])} "
                       f"({_values([ratio[n] for n in rose], 'x')}).")
    one = len(held) == 1
    return head + (f"{name_list(held)} stay{'s' if one else ''} within {100 * (holds - 1):.0f}% "
                   f"of {'its' if one else 'their'} own "
                   f"({_values([ratio[n] for n in held], 'x')}), while {name_list(rose)} "
                   f"rise{'s' if len(rose) == 1 else ''} to {_values([at[n] for n in rose])} "
                   f"({_values([ratio[n] for n in rose], 'x')}).")
