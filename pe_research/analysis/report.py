"""Run every analysis, build its figures, write PNGs + one JSON (+ the raw arrays), log to W&B.

``analysis.json`` holds every number and, under ``measured``, a sentence saying what each one
measures. ``analysis_arrays.npz`` holds the vectors the figures were drawn from, so every figure
can be recomputed from saved data.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import jax.numpy as jnp
import numpy as np
from flax import nnx
from matplotlib.figure import Figure

from pe_research.analysis import figures
from pe_research.analysis.decomposition import UNITS, decompose, term_description
from pe_research.analysis.embedding_file import check_matrix, check_vector, read_arrays
from pe_research.analysis.geometry import DEFAULT_OFFSET, effective_offset, norm_profile
from pe_research.analysis.orthogonality import token_position_orthogonality
from pe_research.analysis.shape import cosine_summary, position_cosines, principal_components
from pe_research.analysis.vectors import (
    first_layer_norms,
    fold_layer_norm_scale,
    position_table,
    token_table,
)
from pe_research.core.atomic_files import atomic_open, atomic_savefig, atomic_write_text
from pe_research.core.errors import ConfigError
from pe_research.model import TokenModel
from pe_research.positional.registry import (
    SCHEMES,
    build_scheme,
    check_pe_config,
    default_pe_config,
)

REPORT_FILE = "analysis.json"
ARRAYS_FILE = "analysis_arrays.npz"
TABLE_FILE = "decomposition.md"

MEASURED = {
    "norms.raw": "L2 norm of the position part of the input: the vector the scheme adds to the "
                 "token part (combine=concat: the position vector through its half of the input "
                 "projection). mean/std (population)/cv=std/mean are over positions offset <= "
                 "p < end, end = the trained positions (see positions).",
    "norms.<stack>_ln_folded": "L2 norm of g * (p - mean_d p), p as in norms.raw and g the scale "
                               "of the first LayerNorm of that stack (pre-LN): the position's "
                               "contribution to what the first attention sees, up to the 1/sigma "
                               "that LayerNorm shares between token and position parts.",
    "orthogonality": "cosine between each token's part of the input (embedding x sqrt(d_model) "
                     "when scale_embedding; combine=concat: through its half of the projection, "
                     "plus the projection bias) and each position's part (as in norms.raw), "
                     "over all (token id, trained position) pairs, padding id included.",
    "shape": "cosines between the position parts (as in norms.raw) of every two trained "
             "positions; PCA of the trained positions' vectors centred on their mean (untrained "
             "positions are projected onto those components for the figure only).",
    "norms.ln_folded": "embeddings mode: L2 norm of g * (p - mean_d p), g the --ln-scale vector "
                       "(as norms.<stack>_ln_folded).",
    "norms.ln_applied": "embeddings mode: L2 norm of LayerNorm(p) = g * (p - mean_d p) / "
                        "sigma_d(p) + b, the position vector alone through the given LayerNorm.",
    "positions": "which positions were trained (from the run's config) and which the summary "
                 "numbers use; positions drawn past the trained range are never summarised.",
    "decomposition": "per encoder/decoder self-attention layer and head, on a batch of examples: "
                     "the additive terms of the attention logits (see decomposition.terms), mean "
                     "|term| over visible (query, key) pairs and its share of the sum of those "
                     "means. Content/position parts follow the residual stream exactly: the "
                     "position part is the position vectors along the residual path (through "
                     "each LayerNorm's affine map, mean and sigma taken from the whole input, "
                     "bias to content); the content part is everything else, so at deeper "
                     "layers it includes earlier sublayers' outputs.",
    "decomposition.sites.attention": "the softmax weights those logits give (masked pairs "
                                     "excluded), per head over the queries that see a key: "
                                     "mean_distance = mean of sum_s w[t, s] |t - s| in tokens, "
                                     "mean_entropy = mean of -sum_s w log w in nats.",
}


@dataclasses.dataclass
class Report:
    """Numbers (JSON-able), the arrays behind the figures, and the figures by file stem."""

    results: dict[str, Any] = dataclasses.field(default_factory=dict)
    arrays: dict[str, np.ndarray] = dataclasses.field(default_factory=dict)
    figures: dict[str, Figure] = dataclasses.field(default_factory=dict)


def vector_report(positions_PxD: Any, *, tokens_VxD: Any = None,
                  folded: Mapping[str, Any] | None = None, offset: int = DEFAULT_OFFSET,
                  trained: int | None = None, trained_source: str = "",
                  extra_curves: Mapping[str, Any] | None = None, title: str = "") -> Report:
    """Norms, orthogonality (when token vectors are given) and shape of the position vectors.

    Every summary number uses only the positions ``p < trained`` (default: all ``P``); rows past
    it are drawn, shaded and labelled, but never summarised. Norm statistics also skip the
    positions below an offset adapted to the trained range (``effective_offset``).
    """
    positions_PxD = np.asarray(positions_PxD, np.float32)
    num_positions = positions_PxD.shape[0]
    trained = num_positions if trained is None else max(1, min(int(trained), num_positions))
    used = effective_offset(offset, trained)
    curves = {"raw": positions_PxD, **{f"{stack}_ln_folded": np.asarray(v, np.float32)
                                       for stack, v in (folded or {}).items()},
              **{name: np.asarray(v, np.float32) for name, v in (extra_curves or {}).items()}}
    norms = {name: norm_profile(v, used, trained) for name, v in curves.items()}
    report = Report(arrays={"position_vectors": positions_PxD})
    report.results["positions"] = {
        "drawn": num_positions, "trained": trained,
        "trained_source": trained_source or "all drawn positions",
        "statistics_over": f"positions 0-{trained - 1} (norm statistics: {used}-{trained - 1})",
        "requested_offset": int(offset), "offset": used}
    report.results["norms"] = {"requested_offset": int(offset), **norms}
    report.figures["norms"] = figures.norm_figure(norms, f"{title}: norm of position vectors")
    if tokens_VxD is not None:
        report.arrays["token_vectors"] = np.asarray(tokens_VxD, np.float32)
        result = token_position_orthogonality(tokens_VxD, positions_PxD[:trained])
        report.results["orthogonality"] = result
        report.figures["orthogonality"] = figures.orthogonality_figure(
            result, f"{title}: token vs position cosines (positions 0-{trained - 1})")
    cos_PxP = position_cosines(positions_PxD)
    pca = principal_components(positions_PxD[:trained], project=positions_PxD)
    report.arrays["pca_coordinates"] = pca["coordinates"]
    report.results["shape"] = {
        "explained_variance_ratio": pca["explained_variance_ratio"],
        "cumulative_explained_variance": pca["cumulative_explained_variance"],
        "mean_cosine_at_distance": cosine_summary(cos_PxP[:trained, :trained]),
    }
    report.figures["position_cosines"] = figures.cosine_heatmap_figure(
        cos_PxP, f"{title}: cosine between positions", trained)
    report.figures["position_pca"] = figures.pca_figure(
        pca["coordinates"], pca["explained_variance_ratio"], f"{title}: position PCA", trained)
    return report


def decomposition_report(sites: list[dict[str, Any]], title: str = "") -> Report:
    """Statistics of every self-attention layer, its heatmaps, the shares figure, the table."""
    report = Report()
    report.results["decomposition"] = {
        "units": UNITS,
        "terms": {name: term_description(name) for s in sites for name in s["terms"]},
        "sites": [{key: s[key] for key in ("name", "stack", "layer", "shown", "note",
                                           "terms", "statistics", "attention")} for s in sites],
    }
    for site in sites:
        stem = "decomposition_" + site["name"].replace("/", "_")
        report.figures[stem] = figures.decomposition_heatmaps(site, f"{title}: {site['name']}")
        for name, values in site["example"].items():
            report.arrays[f"{stem}/{name}"] = values
        report.arrays[f"attention_weights_{site['name'].replace('/', '_')}"] = (
            site["example_weights"])
    if sites:
        report.figures["attention_weights"] = figures.attention_weights_figure(sites, title)
        report.figures["decomposition_shares"] = figures.decomposition_shares_figure(
            sites, f"{title}: share of each logit term")
    return report


def merge(*reports: Report) -> Report:
    """One report holding the results, arrays and figures of all."""
    merged = Report()
    for report in reports:
        merged.results.update(report.results)
        merged.arrays.update(report.arrays)
        merged.figures.update(report.figures)
    return merged


def check_analytic_scheme(scheme: str) -> None:
    """ConfigError unless ``scheme`` adds position vectors (what analytic mode draws)."""
    with_vectors = sorted(n for n, cls in SCHEMES.items() if cls.adds_input_vectors)
    if scheme not in with_vectors:
        raise ConfigError("--scheme", scheme, f"analytic mode needs a scheme with position "
                                              f"vectors: choose one of {with_vectors}")


def analytic_report(scheme: str, dim: int, num_positions: int, *,
                    offset: int = DEFAULT_OFFSET, seed: int = 0,
                    pe_overrides: Mapping[str, Any] | None = None) -> Report:
    """Geometry of a scheme's position vectors alone, no model or run (e.g. sinusoidal)."""
    check_analytic_scheme(scheme)
    if num_positions < 2:
        raise ConfigError("--positions", num_positions, "at least 2 positions")
    pe = {**default_pe_config(scheme), **(pe_overrides or {})}
    check_pe_config(pe, d_model=dim, num_heads=1)
    SCHEMES[scheme].check_positions(pe, num_positions)
    module = build_scheme(pe, d_model=dim, num_heads=1, rngs=nnx.Rngs(seed))
    vectors_PxD = module.input_vectors(jnp.arange(num_positions)[None])[0]
    report = vector_report(vectors_PxD, offset=offset,
                           title=f"{scheme}, dim {dim}, {num_positions} positions",
                           trained_source="analytic mode: every drawn position")
    origin = ("fixed by formula" if not nnx.state(module, nnx.Param) else
              f"the scheme's initialisation (seed {seed}), no training")
    report.results = {"mode": "analytic", "scheme": pe, "dim": dim,
                      "num_positions": num_positions, "vectors": origin, **report.results,
                      "measured": {k: v for k, v in MEASURED.items() if k.split(".")[0]
                                   in ("norms", "shape") and "<stack>" not in k}}
    return report


def embedding_report(path: str | Path, key: str, *, token_key: str = "",
                     ln_scale_key: str = "", ln_bias_key: str = "", num_positions: int = 0,
                     offset: int = DEFAULT_OFFSET) -> Report:
    """Geometry of a position-embedding matrix read from a weights file (every row trained)."""
    if ln_bias_key and not ln_scale_key:
        raise ConfigError("--ln-bias", ln_bias_key, "needs --ln-scale too")
    keys = [key] + [k for k in (token_key, ln_scale_key, ln_bias_key) if k]
    arrays = read_arrays(path, keys)
    positions_PxD = arrays[key]
    check_matrix("--key", key, positions_PxD)
    if num_positions:
        if num_positions > positions_PxD.shape[0]:
            raise ConfigError("--positions", num_positions,
                              f"{key} has only {positions_PxD.shape[0]} rows")
        positions_PxD = positions_PxD[:num_positions]
    rows, width = positions_PxD.shape
    if rows < 2:
        raise ConfigError("--key", key, "needs at least 2 rows (positions)")
    tokens_VxD = arrays.get(token_key)
    if tokens_VxD is not None:
        check_matrix("--token-embeddings", token_key, tokens_VxD, width)
    curves = {}
    if ln_scale_key:
        scale_D = arrays[ln_scale_key]
        check_vector("--ln-scale", ln_scale_key, scale_D, width)
        centred_PxD = positions_PxD - positions_PxD.mean(axis=-1, keepdims=True)
        curves["ln_folded"] = scale_D * centred_PxD
        if ln_bias_key:
            bias_D = arrays[ln_bias_key]
            check_vector("--ln-bias", ln_bias_key, bias_D, width)
            sigma_Px1 = np.sqrt(np.mean(centred_PxD**2, axis=-1, keepdims=True) + 1e-5)
            curves["ln_applied"] = scale_D * centred_PxD / sigma_Px1 + bias_D
    name = Path(path).name
    report = vector_report(positions_PxD, tokens_VxD=tokens_VxD, offset=offset,
                           extra_curves=curves, title=f"{name}: {key}",
                           trained_source=f"{name}:{key}: every row (a trained table)")
    shown = {k: v for k, v in MEASURED.items() if k.split(".")[0] in ("norms", "shape",
             "positions") and "<stack>" not in k}
    if tokens_VxD is not None:
        shown["orthogonality"] = MEASURED["orthogonality"]
    report.results = {"mode": "embeddings", "file": str(path), "key": key,
                      "token_key": token_key or None, "ln_scale_key": ln_scale_key or None,
                      "ln_bias_key": ln_bias_key or None, "num_positions": rows, "width": width,
                      **report.results, "measured": shown}
    return report


def model_report(model: TokenModel, batch: Mapping[str, Any] | None, *,
                 num_positions: int, offset: int = DEFAULT_OFFSET, title: str = "",
                 positions: tuple[Any, Any] = (None, None), trained: int | None = None,
                 trained_source: str = "") -> Report:
    """Geometry (if the scheme adds position vectors) and decomposition (if a batch is given).

    ``trained``: positions below it were trained; only they enter the geometry's summaries.
    """
    parts = []
    positions_PxD = position_table(model, num_positions)
    if positions_PxD is not None:
        folded = {stack: fold_layer_norm_scale(positions_PxD, norm)
                  for stack, norm in first_layer_norms(model).items()}
        parts.append(vector_report(positions_PxD, tokens_VxD=token_table(model), folded=folded,
                                   offset=offset, trained=trained,
                                   trained_source=trained_source, title=title))
    if batch is not None:
        sites = decompose(model, dict(batch), source_positions_BxS=positions[0],
                          target_positions_BxT=positions[1])
        parts.append(decomposition_report(sites, title))
    report = merge(*parts)
    geometry = ("not computed: the scheme adds no position vectors" if positions_PxD is None
                else f"{num_positions} positions")
    report.results = {"mode": "model", "geometry": geometry, **report.results,
                      "measured": MEASURED}
    return report


def decomposition_table(results: Mapping[str, Any]) -> str:
    """A markdown table: layer, head, then mean |term| (share) for each term."""
    sites = results["decomposition"]["sites"]
    names = list(dict.fromkeys(name for site in sites for name in site["terms"]))
    lines = ["| layer | head | " + " | ".join(names) + " |",
             "|---|---|" + "---|" * len(names)]
    for site in sites:
        stats = site["statistics"]
        for head in range(len(stats["mean_abs_logits"])):
            cells = [f"{stats['mean_abs'][n][head]:.4g} ({stats['share'][n][head]:.1%})"
                     if n in stats["mean_abs"] else "-" for n in names]
            lines.append(f"| {site['name']} | {head} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def write_report(report: Report, out_dir: str | Path, dpi: int = 110) -> dict[str, Path]:
    """Write ``analysis.json``, ``analysis_arrays.npz``, one PNG per figure (+ the table)."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = {"json": out / REPORT_FILE, "arrays": out / ARRAYS_FILE}
    atomic_write_text(paths["json"], json.dumps(report.results, indent=1))
    with atomic_open(paths["arrays"], "wb") as handle:
        np.savez_compressed(handle, **report.arrays)
    if "decomposition" in report.results:
        paths["table"] = out / TABLE_FILE
        atomic_write_text(paths["table"], decomposition_table(report.results))
    for stem, figure in report.figures.items():
        paths[stem] = out / f"{stem}.png"
        atomic_savefig(figure, paths[stem], dpi=dpi)
    return paths
