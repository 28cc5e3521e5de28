"""Figures of the analysis, each built from exactly the data written to the JSON / arrays file.

Every figure is a ``matplotlib.figure.Figure`` (no pyplot state), titled, with units on its axes.
"""

from __future__ import annotations

import textwrap
from collections.abc import Mapping
from typing import Any

import numpy as np
from matplotlib.figure import Figure

POSITION_AXIS = "position (token index)"


UNTRAINED_STYLE = {"color": "0.5", "alpha": 0.18, "lw": 0}


def fitted(title: str, figure: Figure) -> str:
    """``title`` wrapped to the figure's width (about 11 characters an inch at its size)."""
    return "\n".join(textwrap.fill(line, int(11 * figure.get_size_inches()[0]))
                     for line in title.split("\n"))


def untrained_label(first: int) -> str:
    return f"untrained positions (>= {first}): excluded from every statistic"


def norm_figure(profiles: Mapping[str, Mapping[str, Any]], title: str) -> Figure:
    """Norm against position, one line per measured vector set, with mean/std/CV over the
    trained positions past the offset; untrained positions shaded."""
    figure = Figure(figsize=(8, 4.8), layout="constrained")
    axes = figure.add_subplot()
    first = next(iter(profiles.values()))
    offset, end, drawn = first["offset"], first["end"], first["num_positions"]
    for label, profile in profiles.items():
        norms = np.asarray(profile["norms"])
        line, = axes.plot(np.arange(norms.size), norms, lw=1.2,
                          label=f"{label}: mean {profile['mean']:.4g}, std {profile['std']:.3g}, "
                                f"CV {profile['cv']:.3g} (positions {offset}-{end - 1})")
        axes.hlines(profile["mean"], offset, end - 1, color=line.get_color(), ls=":", lw=1)
    axes.axvline(offset, color="grey", ls="--", lw=1, label=f"offset {offset}")
    if end < drawn:
        axes.axvspan(end - 0.5, drawn - 0.5, **UNTRAINED_STYLE, label=untrained_label(end))
    if any(label.endswith("_ln_folded") for label in profiles):
        axes.plot([], [], " ", label="raw: ||p||; <stack>_ln_folded: ||g * (p - mean_d p)||, "
                                     "g = that stack's first LayerNorm scale")
    axes.set_xlabel(POSITION_AXIS)
    axes.set_ylabel("L2 norm (input-embedding units)")
    axes.set_xlim(-0.5, drawn - 0.5)
    means = [float(profile["mean"]) for profile in profiles.values()]
    if min(means) > 0 and max(means) > 10 * min(means):
        # curves an order of magnitude apart (a LayerNorm's output beside the raw vectors):
        # on a linear axis the small ones would be a flat line at zero
        axes.set_yscale("log")
        axes.set_ylabel("L2 norm (input-embedding units, log scale)")
    else:
        top = max(float(np.max(profile["norms"])) for profile in profiles.values())
        axes.set_ylim(0.0, 1.15 * top if top > 0 else 1.0)
    axes.set_title(fitted(title, figure))
    axes.legend(fontsize=7, loc="lower right")
    return figure


def orthogonality_figure(result: Mapping[str, Any], title: str) -> Figure:
    """Histogram of cos(token, position) over all pairs, the max |cos| marked."""
    figure = Figure(figsize=(7, 4.5), layout="constrained")
    axes = figure.add_subplot()
    edges = np.asarray(result["histogram"]["edges"])
    counts = np.asarray(result["histogram"]["counts"])
    axes.stairs(counts, edges, fill=True, alpha=0.7,
                label=f"{result['num_tokens']} tokens x {result['num_positions']} positions")
    arg = result["argmax"]
    axes.axvline(arg["cos"], color="C3", ls="--",
                 label=f"max |cos| {result['max_abs_cos']:.3f} (token {arg['token_id']}, "
                       f"position {arg['position']})")
    axes.plot([], [], " ", label=f"mean |cos| {result['mean_abs_cos']:.4f} (random vectors: "
                                 f"{result['random_baseline_mean_abs_cos']:.4f})")
    axes.set_xlabel("cosine similarity of token and position vectors (unitless)")
    axes.set_ylabel("number of (token, position) pairs")
    axes.set_title(fitted(title, figure))
    axes.legend(fontsize=8)
    return figure


def cosine_heatmap_figure(cos_PxP: np.ndarray, title: str, trained: int | None = None) -> Figure:
    """Position-by-position cosine similarity; the trained block outlined when there is more."""
    figure = Figure(figsize=(6.5, 5.5), layout="constrained")
    axes = figure.add_subplot()
    image = axes.imshow(cos_PxP, cmap="RdBu_r", vmin=-1.0, vmax=1.0, origin="upper",
                        interpolation="nearest")
    figure.colorbar(image, ax=axes, label="cosine similarity (unitless)")
    if trained is not None and trained < cos_PxP.shape[0]:
        edge = trained - 0.5
        axes.plot([-0.5, edge, edge], [edge, edge, -0.5], color="k", lw=1.2,
                  label=f"trained positions 0-{trained - 1} (summaries use only these)")
        axes.legend(fontsize=7, loc="lower left")
    axes.set_xlabel(POSITION_AXIS)
    axes.set_ylabel(POSITION_AXIS)
    axes.set_title(fitted(title, figure))
    return figure


def pca_figure(coords_Px3: np.ndarray, ratios: list[float], title: str,
               trained: int | None = None) -> Figure:
    """The position vectors' first three principal components as a curve coloured by position;
    untrained positions (projected onto the trained ones' components) in grey."""
    figure = Figure(figsize=(7, 6), layout="constrained")
    positions = np.arange(coords_Px3.shape[0])
    trained = coords_Px3.shape[0] if trained is None else trained
    columns = [coords_Px3[:, i] if i < coords_Px3.shape[1] else np.zeros_like(positions, float)
               for i in range(3)]
    axes = figure.add_subplot(projection="3d")
    head = [c[:trained] for c in columns]
    axes.plot(*head, color="grey", lw=0.5, alpha=0.6)
    points = axes.scatter(*head, c=positions[:trained], cmap="viridis", s=6)
    figure.colorbar(points, ax=axes, shrink=0.6, pad=0.12,
                    label=f"trained {POSITION_AXIS}")
    if trained < coords_Px3.shape[0]:
        axes.scatter(*[c[trained:] for c in columns], color="0.6", s=3, alpha=0.5,
                     label=untrained_label(trained))
        axes.legend(fontsize=7, loc="upper left")
    for i, setter in enumerate((axes.set_xlabel, axes.set_ylabel, axes.set_zlabel)):
        setter(f"PC{i + 1} ({100 * ratios[i]:.1f}%)" if i < len(ratios) else f"PC{i + 1} (none)")
    axes.set_title(f"{title}\nexplained variance ratio (positions 0-{trained - 1}): " +
                   ", ".join(f"PC{i + 1} {r:.3f}" for i, r in enumerate(ratios)) +
                   "\n(coordinates in embedding units)", fontsize=10)
    return figure


def decomposition_heatmaps(site: Mapping[str, Any], title: str) -> Figure:
    """Each term (columns) and their sum for every head (rows) on one example, one colour scale."""
    terms = {**site["example"], "sum": sum(site["example"].values())}
    mask = np.asarray(site["example_mask"])
    heads = next(iter(terms.values())).shape[0]
    limit = max(float(np.max(np.abs(np.where(mask, t, 0.0)))) for t in terms.values()) or 1.0
    figure = Figure(figsize=(2.6 * len(terms) + 1, 2.4 * heads + 0.8), layout="constrained")
    grid = figure.subplots(heads, len(terms), squeeze=False)
    for head in range(heads):
        for column, (name, values) in enumerate(terms.items()):
            axes = grid[head, column]
            image = axes.imshow(np.where(mask, values[head], np.nan), cmap="RdBu_r",
                                vmin=-limit, vmax=limit, interpolation="nearest")
            axes.set_title(f"head {head}: {name}", fontsize=8)
            axes.set_xlabel("key position (token index)", fontsize=7)
            axes.set_ylabel("query position (token index)", fontsize=7)
            axes.tick_params(labelsize=6)
    figure.colorbar(image, ax=grid, shrink=0.6,
                    label="logit term, unscaled q.k units (masked pairs blank)")
    figure.suptitle(f"{title}: {site['shown']}", fontsize=9)
    return figure


def attention_weights_figure(sites: list[Mapping[str, Any]], title: str) -> Figure:
    """Every layer's (rows) and head's (columns) softmax weights on one example, scale 0-1."""
    heads = max(site["example_weights"].shape[0] for site in sites)
    figure = Figure(figsize=(2.4 * heads + 1, 2.3 * len(sites) + 0.8), layout="constrained")
    grid = figure.subplots(len(sites), heads, squeeze=False)
    for row, site in enumerate(sites):
        mask = np.asarray(site["example_mask"])
        for head in range(heads):
            axes = grid[row, head]
            if head >= site["example_weights"].shape[0]:
                axes.set_axis_off()
                continue
            image = axes.imshow(np.where(mask, site["example_weights"][head], np.nan),
                                cmap="viridis", vmin=0.0, vmax=1.0, interpolation="nearest")
            distance = site["attention"]["mean_distance"][head]
            axes.set_title(f"{site['name']} head {head}\nmean distance {distance:.1f}",
                           fontsize=7)
            axes.set_xlabel("key position (token index)", fontsize=7)
            axes.set_ylabel("query position (token index)", fontsize=7)
            axes.tick_params(labelsize=6)
    figure.colorbar(image, ax=grid, shrink=0.6,
                    label="attention weight (each row sums to 1; masked pairs blank)")
    figure.suptitle(f"{title}: attention weights of one example (mean distance over the batch, "
                    "in tokens)", fontsize=9)
    return figure


def decomposition_shares_figure(sites: list[Mapping[str, Any]], title: str) -> Figure:
    """Stacked share of mean |term| for every layer and head."""
    names = list(dict.fromkeys(name for site in sites for name in site["terms"]))
    rows = [(f"{site['name']} head {h}",
             {name: share[h] for name, share in site["statistics"]["share"].items()})
            for site in sites for h in range(len(site["statistics"]["mean_abs_logits"]))]
    figure = Figure(figsize=(8, 0.3 * len(rows) + 1.6), layout="constrained")
    axes = figure.add_subplot()
    left = np.zeros(len(rows))
    for index, name in enumerate(names):
        widths = np.array([shares.get(name, 0.0) for _, shares in rows])
        axes.barh(np.arange(len(rows)), widths, left=left, color=f"C{index}", label=name)
        left += widths
    axes.set_yticks(np.arange(len(rows)), [label for label, _ in rows], fontsize=7)
    axes.invert_yaxis()
    axes.set_xlim(0, 1)
    axes.set_xlabel("share of mean |term| over visible (query, key) pairs (fraction)")
    axes.set_ylabel("attention layer and head")
    axes.set_title(fitted(title, figure))
    axes.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    return figure
