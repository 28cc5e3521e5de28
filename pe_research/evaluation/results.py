"""Evaluation results on disk and in W&B: ``RUN_DIR/eval/<name>.{json,csv,png}`` and a table.

The JSON file is the complete record (rows, checkpoint step, overrides, compile count) that
``pe-research compare`` reads; the CSV holds the same rows; the PNG is the labelled curve.
"""

from __future__ import annotations

import csv
import json
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import jax
import numpy as np

from pe_research.config import to_dict
from pe_research.core.atomic_files import atomic_open, atomic_write_text
from pe_research.evaluation.plots import curve_figure, save_figure
from pe_research.evaluation.range_eval import EvalResult, evaluate_run, row_fields
from pe_research.model.metrics import METRICS, headline_for
from pe_research.runs import provenance
from pe_research.runs.restore import LoadedRun, load_run
from pe_research.runs.run_dir import DEFAULT_EVAL_NAME, RunDir, check_eval_name
from pe_research.runs.tracking import wandb_writer


def results_path(run_dir: str | Path, name: str = DEFAULT_EVAL_NAME) -> Path:
    """``RUN_DIR/eval/<name>.json``."""
    return RunDir(run_dir).eval_results(name)


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
        "headline": headline_for(config["task"]["name"]),
        "compilations": result.compilations,
        "compiled_shapes": [list(shape) for shape in result.compiled_shapes],
        "seconds": result.seconds,
        "rows": [row.as_dict() for row in result.rows],
        "environment": provenance.environment(),
    }


def write_results(run: LoadedRun, result: EvalResult, name: str = DEFAULT_EVAL_NAME,
                  overrides: Sequence[str] = ()) -> dict[str, Path]:
    """Write ``eval/<name>.json``, ``.csv`` and ``.png`` (process 0 only); return the paths."""
    json_path = results_path(run.run_dir, name)
    paths = {"json": json_path, "csv": json_path.with_suffix(".csv"),
             "png": json_path.with_suffix(".png")}
    if jax.process_index() != 0:
        return paths
    record = results_record(run, result, name, overrides)
    json_path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(json_path, json.dumps(record, indent=1) + "\n")
    with atomic_open(paths["csv"], newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=row_fields(result.rows))
        writer.writeheader()
        writer.writerows(record["rows"])
    save_figure(curve_figure(record["rows"], record["headline"], record["train_lengths"],
                             result_title(record)), paths["png"])
    return paths


def result_title(record: Mapping[str, Any]) -> str:
    """The figure title of an evaluation record: task, scheme, test-time setting, step,
    samples."""
    pe = record["pe"]
    scaling = pe.get("scaling", {}).get("type", "none")
    settings = [f"scaling {scaling}"] if scaling != "none" else []
    settings += [name for name, key in (("self_extend", "group_size"),
                                        ("attention_sinks", "window"))
                 if pe.get(name, {}).get(key)]
    shown = ", ".join(settings)
    return (f"{record['task']['name']}, pe={pe['type']}"
            f"{f' ({shown})' if shown else ''}, step {record['step']}, "
            f"{_samples(record['rows'])} samples/length")


def _samples(rows: Sequence[Mapping[str, Any]]) -> str:
    """'64', or '32-2048' when the lengths hold different numbers of examples."""
    counts = [int(row["samples"]) for row in rows] or [0]
    return f"{min(counts)}" if min(counts) == max(counts) else f"{min(counts)}-{max(counts)}"


def read_results(path: str | Path) -> dict[str, Any]:
    """A results record written by ``write_results``."""
    return json.loads(Path(path).read_text())


def log_to_wandb(run: LoadedRun, result: EvalResult, name: str,
                 wandb_cfg: Mapping[str, Any]) -> str | None:
    """The rows as a W&B table plus a line plot of the task's headline metric, in the run's W&B
    run (resumed).

    Returns the local W&B run directory, or None when W&B is disabled or unavailable.
    """
    resumed = RunDir(run.run_dir).wandb_id.exists()  # keeps the config it was trained with
    writer = wandb_writer(wandb_cfg, run.run_dir, process_index=jax.process_index(),
                          config=None if resumed else to_dict(run.config))
    if writer is None:
        return None
    try:
        import wandb

        columns = row_fields(result.rows)
        table = wandb.Table(columns=columns,
                            data=[[row.as_dict()[c] for c in columns] for row in result.rows])
        headline = headline_for(run.config.task.name)
        plot = wandb.plot.line(table, "length", headline,
                               title=f"{name}: {METRICS[headline].label} vs length (step "
                                     f"{run.step})")
        writer.run.log({f"eval_{name}/table": table, f"eval_{name}/{headline}": plot})
    except Exception as error:  # noqa: BLE001 - a W&B failure must not lose the results
        warnings.warn(f"W&B table not logged ({type(error).__name__}: {error}); the results "
                      f"are in {results_path(run.run_dir, name)}", stacklevel=2)
    path = writer.run_path
    writer.finish()
    return path


def evaluate_and_write(run_dir: str | Path, *, checkpoint: str | int | None = None,
                       lengths: Sequence[int] | None = None, name: str = DEFAULT_EVAL_NAME,
                       overrides: Sequence[str] = ()) -> tuple[LoadedRun, EvalResult,
                                                               dict[str, Path]]:
    """What ``pe-research eval`` does: restore, evaluate, write the files, log to W&B."""
    check_eval_name(name)
    run = load_run(run_dir, checkpoint, overrides, lengths=lengths)
    result = evaluate_run(run, lengths)
    paths = write_results(run, result, name, overrides)
    wandb_path = log_to_wandb(run, result, name, run.config.wandb)
    if wandb_path:
        paths["wandb"] = Path(wandb_path)
    return run, result, paths


# Eval overrides that change how a run is scored, not what it is tested on.
BOOKKEEPING_KEYS = ("eval", "wandb", "data.buckets", "data.eval_samples", "data.eval_cache_dir")


def eval_settings(overrides: Sequence[str]) -> tuple[str, ...]:
    """The ``KEY=VALUE`` overrides of an evaluation that change what is tested (RoPE scaling,
    a task's test-time key ...), without the bookkeeping ones (batch size, buckets, W&B)."""
    settings = []
    for text in overrides:
        setting = text.removeprefix("--config.")
        key = setting.split("=", 1)[0]
        if not any(key == k or key.startswith(k + ".") for k in BOOKKEEPING_KEYS):
            settings.append(setting)
    return tuple(settings)


def _without_buckets(overrides: Sequence[str]) -> set[str]:
    """Overrides that change results (bucket widths only pad, and padding is masked)."""
    return {o for o in overrides if not o.startswith("data.buckets=")}


def cached_rows(run_dir: str | Path, name: str, lengths: Sequence[int],
                overrides: Sequence[str] = (), step: int | None = None,
                ) -> list[dict[str, float]]:
    """The rows at ``lengths``: read from ``eval/<name>.json`` when it holds every length under
    the same overrides (and checkpoint ``step``, when given), else evaluated (as ``pe-research
    eval``, at ``step`` or the config's ``eval.checkpoint``) and written."""
    cached = read_rows(run_dir, name, lengths, overrides, step)
    if cached is not None:
        return cached
    evaluate_and_write(run_dir, checkpoint=step, lengths=lengths, name=name, overrides=overrides)
    return read_rows(run_dir, name, lengths, overrides, step)


def cached_exact_match(run_dir: str | Path, name: str, lengths: Sequence[int],
                       overrides: Sequence[str] = ()) -> np.ndarray:
    """Decoded exact match ``[L]`` at ``lengths`` (``cached_rows``)."""
    return np.array([row["exact_match"] for row in cached_rows(run_dir, name, lengths,
                                                               overrides)])


def read_rows(run_dir: str | Path, name: str, lengths: Sequence[int],
              overrides: Sequence[str] = (), step: int | None = None,
              ) -> list[dict[str, float]] | None:
    """The rows at ``lengths`` of ``eval/<name>.json`` when it holds every one under the same
    overrides (bucket widths aside) and, when given, of checkpoint ``step``; else None."""
    path = results_path(run_dir, name)
    if not path.exists():
        return None
    record = read_results(path)
    if step is not None and record["step"] != step:
        return None
    rows = {row["length"]: row for row in record["rows"]}
    if (all(n in rows for n in lengths)
            and _without_buckets(record["overrides"]) == _without_buckets(overrides)):
        return [rows[n] for n in lengths]
    return None


def read_exact_match(run_dir: str | Path, name: str, lengths: Sequence[int],
                     overrides: Sequence[str] = ()) -> np.ndarray | None:
    """Decoded exact match ``[L]`` from ``eval/<name>.json`` when it holds every length under the
    same overrides (bucket widths aside), else None."""
    rows = read_rows(run_dir, name, lengths, overrides)
    return None if rows is None else np.array([row["exact_match"] for row in rows])
