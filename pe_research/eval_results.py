"""Evaluation results on disk and in W&B: ``RUN_DIR/eval/<name>.{json,csv,png}`` and a table.

The JSON file is the complete record (rows, checkpoint step, overrides, compile count) that
``pe-research compare`` reads; the CSV holds the same rows; the PNG is the labelled curve.
"""

from __future__ import annotations

import csv
import dataclasses
import json
import re
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import jax

from pe_research.config import to_dict
from pe_research.errors import ConfigError
from pe_research.evaluate import ROW_FIELDS, EvalResult, LoadedRun, evaluate_run, load_run
from pe_research.plots import plot_eval_curve
from pe_research.tracking import WANDB_ID_FILE, wandb_writer

EVAL_DIR = "eval"
DEFAULT_NAME = "eval"
NAME_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")


def check_name(name: str) -> str:
    """A results name usable as a file name."""
    if not NAME_PATTERN.match(name):
        raise ConfigError("--name", name, "letters, digits, '_', '.', '-' (a file name)")
    return name


def results_path(run_dir: str | Path, name: str = DEFAULT_NAME) -> Path:
    return Path(run_dir) / EVAL_DIR / f"{check_name(name)}.json"


def results_record(run: LoadedRun, result: EvalResult, name: str,
                   overrides: Sequence[str] = ()) -> dict[str, Any]:
    """Everything needed to read the curve later without the checkpoint."""
    config = to_dict(run.config)
    return {
        "name": name,
        "run_dir": str(run.run_dir),
        "step": run.step,
        "overrides": list(overrides),
        "task": config["task"],
        "train_lengths": config["data"]["train_lengths"],
        "pe": config["model"]["pe"],
        "seed": config["seed"],
        "devices": run.mesh.size,
        "backend": jax.default_backend(),
        "headline": "exact_match",
        "compilations": result.compilations,
        "compiled_shapes": [list(shape) for shape in result.compiled_shapes],
        "seconds": result.seconds,
        "rows": [dataclasses.asdict(row) for row in result.rows],
    }


def write_results(run: LoadedRun, result: EvalResult, name: str = DEFAULT_NAME,
                  overrides: Sequence[str] = ()) -> dict[str, Path]:
    """Write ``eval/<name>.json``, ``.csv`` and ``.png`` (process 0 only); return the paths."""
    json_path = results_path(run.run_dir, name)
    paths = {"json": json_path, "csv": json_path.with_suffix(".csv"),
             "png": json_path.with_suffix(".png")}
    if jax.process_index() != 0:
        return paths
    record = results_record(run, result, name, overrides)
    json_path.parent.mkdir(parents=True, exist_ok=True)
    json_path.write_text(json.dumps(record, indent=1) + "\n")
    with paths["csv"].open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=ROW_FIELDS)
        writer.writeheader()
        writer.writerows(record["rows"])
    rows = record["rows"]
    lengths = [row["length"] for row in rows]
    curves = {metric: [row[metric] for row in rows]
              for metric in ("exact_match", "decoded_token_accuracy", "token_accuracy")}
    interval = ([row["exact_match_low"] for row in rows], [row["exact_match_high"] for row in rows])
    scaling = record["pe"].get("scaling", {}).get("type", "none")
    title = (f"{record['task']['name']}, pe={record['pe']['type']}"
             f"{'' if scaling == 'none' else f' (scaling {scaling})'}, step {run.step}, "
             f"{rows[0]['samples'] if rows else 0} samples/length")
    plot_eval_curve(lengths, curves, interval, record["train_lengths"], title, paths["png"])
    return paths


def read_results(path: str | Path) -> dict[str, Any]:
    """A results record written by ``write_results``."""
    return json.loads(Path(path).read_text())


def log_to_wandb(run: LoadedRun, result: EvalResult, name: str,
                 wandb_cfg: Mapping[str, Any]) -> str | None:
    """The rows as a W&B table plus a line plot of exact match, in the run's W&B run (resumed).

    Returns the local W&B run directory, or None when W&B is disabled or unavailable.
    """
    resumed = (run.run_dir / WANDB_ID_FILE).exists()  # keeps the config it was trained with
    writer = wandb_writer(wandb_cfg, run.run_dir, process_index=jax.process_index(),
                          config=None if resumed else to_dict(run.config))
    if writer is None:
        return None
    try:
        import wandb

        table = wandb.Table(columns=list(ROW_FIELDS),
                            data=[[getattr(row, f) for f in ROW_FIELDS] for row in result.rows])
        plot = wandb.plot.line(table, "length", "exact_match",
                               title=f"{name}: decoded exact match vs length (step {run.step})")
        writer.run.log({f"eval_{name}/table": table, f"eval_{name}/exact_match": plot})
    except Exception as error:  # noqa: BLE001 - a W&B failure must not lose the results
        warnings.warn(f"W&B table not logged ({type(error).__name__}: {error}); the results "
                      f"are in {results_path(run.run_dir, name)}", stacklevel=2)
    path = writer.run_path
    writer.finish()
    return path


def evaluate_and_write(run_dir: str | Path, *, checkpoint: str | int | None = None,
                       lengths: Sequence[int] | None = None, name: str = DEFAULT_NAME,
                       overrides: Sequence[str] = ()) -> tuple[LoadedRun, EvalResult,
                                                               dict[str, Path]]:
    """What ``pe-research eval`` does: restore, evaluate, write the files, log to W&B."""
    check_name(name)
    run = load_run(run_dir, checkpoint, overrides)
    result = evaluate_run(run, lengths)
    paths = write_results(run, result, name, overrides)
    wandb_path = log_to_wandb(run, result, name, run.config.wandb)
    if wandb_path:
        paths["wandb"] = Path(wandb_path)
    return run, result, paths
