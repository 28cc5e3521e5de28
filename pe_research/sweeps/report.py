"""The end of a sweep: evaluate every finished member over ``eval.lengths``, then compare.

Runs are evaluated together (``evaluate_members``: one program, vmapped over members): a grid
point's members, and the grid points that share the model but for the task, seed, optimizer scalars,
dropout rate, wavelength base, RoPE or logit scaling or randomized range (``members_key``), in grid
order, up to the members per program measured for this device (``MEMBERS_PER_PROGRAM``); each run
gets ``RUN_DIR/eval/eval.{json,csv,png}`` as ``pe-research eval`` writes them. Runs are then
compared per task and training range, grouped by the swept keys that split them (mean ± std and max
over seeds): ``SWEEP_DIR/report/<task>/comparison.{md,csv,png}``, and every table in
``SWEEP_DIR/report/summary.md``. A sweep over several tasks also gets the papers' table
(``evaluation/paper_table.py``): ``SWEEP_DIR/report/paper_table.{md,csv,png}``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

from pe_research.config import from_mapping
from pe_research.config.naming import value_name
from pe_research.core.atomic_files import atomic_write_text
from pe_research.evaluation.compare import compare_runs
from pe_research.evaluation.grouping import config_value, has_key
from pe_research.evaluation.members_eval import evaluate_members, members_key
from pe_research.evaluation.paper_table import write_paper_table
from pe_research.evaluation.results import write_results
from pe_research.runs.restore import load_run
from pe_research.runs.run_dir import RunDir, read_run_config
from pe_research.sweeps.grouping import fill_in_order, members_cap
from pe_research.sweeps.state import SweepDir, refresh

T = TypeVar("T")


def needs_eval(run_dir: Path) -> bool:
    """True without ``eval/eval.json``, or when a checkpoint is newer than it."""
    results = RunDir(run_dir).eval_results()
    if not results.is_file():
        return True
    newest = max((p.stat().st_mtime for p in RunDir(run_dir).checkpoints.iterdir()
                  if p.name.isdigit()), default=0.0)
    return results.stat().st_mtime < newest


def evaluate_together(run_dirs: Sequence[Path]) -> None:
    """Evaluate finished runs in one program and write each one's results."""
    runs = [load_run(run_dir) for run_dir in run_dirs]
    for run, result in zip(runs, evaluate_members(runs), strict=True):
        write_results(run, result)


def evaluation_programs(points: Sequence[tuple[str, Sequence[T]]], cap: int) -> list[list[T]]:
    """Grid points' runs to evaluate, ``(members_key, runs)`` per point in grid order, in
    programs: points of one key go together up to ``cap`` runs a program; a point larger than
    the cap keeps a program of its own."""
    groups = fill_in_order([(key, len(runs), runs) for key, runs in points if runs], cap)
    return [[run for runs in group for run in runs] for group in groups]


def comparison_groups(manifest: Mapping[str, Any], root: Path) -> dict[str, list[Path]]:
    """Finished runs partitioned by task and training range (only those compare)."""
    groups: dict[str, list[Path]] = {}
    kinds: dict[str, str] = {}
    for relative, run in manifest["runs"].items():
        if run["state"] != "done":
            continue
        run_dir = root / relative
        config = read_run_config(run_dir)
        kind = json.dumps([config["task"], config["data"]["train_lengths"]], sort_keys=True)
        if kind not in kinds:
            low, high = config["data"]["train_lengths"]
            name = f"{value_name(config['task']['name'])}_{low}-{high}"
            kinds[kind] = name if name not in kinds.values() else f"{name}_{len(kinds)}"
        groups.setdefault(kinds[kind], []).append(run_dir)
    return groups


def varying_keys(run_dirs: Sequence[Path], keys: Sequence[str]) -> list[str]:
    """The keys of ``keys`` whose value differs between the runs; a key some runs' configs
    lack (a scheme's own, such as ``model.pe.max_len``) differs where others have it."""
    configs = [read_run_config(run_dir) for run_dir in run_dirs]
    return [key for key in keys
            if len({json.dumps(config_value(config, key) if has_key(config, key) else None)
                     for config in configs}) > 1]


def separating_keys(run_dirs: Sequence[Path], keys: Sequence[str]) -> tuple[list[str],
                                                                            list[str]]:
    """The varying keys split into those that group the runs and those that follow them.

    A key follows when dropping it leaves the groups as they are: each group has one value of
    it (a learned table's ``model.pe.max_len``, or ``train.steps`` set per scheme). Keys are
    dropped from the last, so the sweep's first keys name the groups.
    """
    configs = [read_run_config(run_dir) for run_dir in run_dirs]

    def groups(chosen: Sequence[str]) -> set[tuple[int, ...]]:
        labels = [json.dumps([config_value(c, k) if has_key(c, k) else None for k in chosen])
                  for c in configs]
        return {tuple(i for i, label in enumerate(labels) if label == name)
                for name in set(labels)}

    grouping = varying_keys(run_dirs, keys)
    following = []
    for key in reversed(list(grouping)):
        rest = [k for k in grouping if k != key]
        if rest and groups(rest) == groups(grouping):
            grouping, following = rest, [key, *following]
    return grouping, following


def report(sweep_dir: SweepDir, *, reevaluate: bool = False) -> dict[str, Path]:
    """Evaluate what is unevaluated, write the comparisons; ``{task: comparison.md}`` and the
    summary under ``'summary'``."""
    manifest = refresh(sweep_dir)
    todo = []
    for point in manifest["grid"]:
        run_dirs = [sweep_dir.root / relative for relative, run in manifest["runs"].items()
                    if run["point"] == point["index"] and run["state"] == "done"
                    and (reevaluate or needs_eval(sweep_dir.root / relative))]
        if run_dirs:
            todo.append((members_key(from_mapping(read_run_config(run_dirs[0]))), run_dirs))
    for run_dirs in evaluation_programs(todo, members_cap("auto", "local", {})):
        evaluate_together(run_dirs)
    keys = list(manifest["swept_keys"]) + (["train.learning_rate"]
                                           if manifest["learning_rates"] else [])
    written: dict[str, Path] = {}
    sections = [f"# Sweep {sweep_dir.root.name}", "",
                f"From `{manifest['command']}`. Per task and training range, runs are grouped "
                "by the swept keys that vary there; seeds are aggregated (mean ± std, and the "
                "best seed: max, or min for losses and perplexity).", ""]
    for name, run_dirs in comparison_groups(manifest, sweep_dir.root).items():
        grouping, following = separating_keys(run_dirs, keys)
        paths = compare_runs(run_dirs, sweep_dir.report / name,
                             group_by=",".join(grouping) or "model.pe.type").paths
        written[name] = paths["markdown"]
        body = paths["markdown"].read_text().replace("# ", "## ", 1)
        sections += [body.replace("Figure: ", f"Figure: {name}/"), ""]
        if following:
            sections += ["Also differing between groups, with one value within each (so they "
                         "split no group): " + ", ".join(f"`{key}`" for key in following)
                         + ".", ""]
    finished = [run_dir for run_dirs in comparison_groups(manifest, sweep_dir.root).values()
                for run_dir in run_dirs]
    if len({read_run_config(d)["task"]["name"] for d in finished}) > 1:
        table = write_paper_table(finished, sweep_dir.report)
        written["paper_table"] = table["markdown"]
        sections += [table["markdown"].read_text().replace("# ", "## ", 1),
                     f"Figure: {table['png'].name}", ""]
    unfinished = [relative for relative, run in manifest["runs"].items()
                  if run["state"] != "done"]
    if unfinished:
        sections += [f"Not included ({len(unfinished)} runs not finished): "
                     + ", ".join(unfinished), ""]
    sweep_dir.report.mkdir(parents=True, exist_ok=True)
    written["summary"] = atomic_write_text(sweep_dir.report / "summary.md",
                                           "\n".join(sections))
    return written
