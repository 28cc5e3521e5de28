"""Log a written analysis (figures and numbers) to the run's W&B run, through its tracking writer.

The numbers go in as ``analysis/...`` scalars on their own x-axis (``analysis/checkpoint_step``),
so analysing an early checkpoint after training never collides with W&B's monotonic step; the
figures as images; ``analysis.json`` and the decomposition table as files of the run.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import jax

from pe_research.core.atomic_files import atomic_write_text
from pe_research.runs.tracking import wandb_writer

STEP_KEY = "analysis/checkpoint_step"


def summary_scalars(results: Mapping[str, Any]) -> dict[str, float]:
    """The headline numbers of a report as flat ``analysis/...`` keys."""
    scalars: dict[str, float] = {}
    for name, profile in results.get("norms", {}).items():
        if isinstance(profile, Mapping):
            for stat in ("mean", "std", "cv"):
                scalars[f"analysis/norms/{name}/{stat}"] = profile[stat]
    if "orthogonality" in results:
        for stat in ("max_abs_cos", "mean_abs_cos"):
            scalars[f"analysis/orthogonality/{stat}"] = results["orthogonality"][stat]
    for i, ratio in enumerate(results.get("shape", {}).get("explained_variance_ratio", [])):
        scalars[f"analysis/shape/explained_variance_pc{i + 1}"] = ratio
    for site in results.get("decomposition", {}).get("sites", []):
        for term, share in site["statistics"]["share_all_heads"].items():
            scalars[f"analysis/decomposition/{site['name']}/share_{term}"] = share
    return scalars


def log_to_wandb(paths: Mapping[str, Path], results: Mapping[str, Any], run_dir: str | Path,
                 wandb_cfg: Mapping[str, Any], step: int) -> str | None:
    """Resume the run's W&B run, log numbers, figures and files; its local dir, or None if off."""
    writer = wandb_writer(wandb_cfg, run_dir, process_index=jax.process_index())
    if writer is None:
        return None
    import wandb

    run = writer.run
    try:
        run.define_metric(STEP_KEY)
        run.define_metric("analysis/*", step_metric=STEP_KEY)
        images = {f"analysis/figures/{stem}": wandb.Image(str(path))
                  for stem, path in paths.items() if path.suffix == ".png"}
        run.log({STEP_KEY: step, **summary_scalars(results), **images})
        for key in ("json", "table"):
            if key in paths:
                # A copy in the run's own files folder is published as it is: W&B neither
                # links the analysis folder nor warns on the console that it did.
                copy = Path(run.dir) / paths[key].parent.name / paths[key].name
                copy.parent.mkdir(parents=True, exist_ok=True)
                atomic_write_text(copy, paths[key].read_text())
                run.save(str(copy), base_path=run.dir, policy="now")
    except Exception as error:  # noqa: BLE001 - the files on disk are the result; W&B is a copy
        warnings.warn(f"analysis not logged to W&B ({type(error).__name__}: {error}); it is "
                      f"in {paths['json'].parent}", stacklevel=2)
    location = writer.run_path
    writer.finish()
    return location
