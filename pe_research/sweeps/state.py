"""A sweep directory: the manifest ``sweep.json``, each grid point's plan and state, the logs.

    SWEEP_DIR/
      sweep.json                 the grid, and every run's state (refreshed by each command)
      <point>/<member>/          ordinary run directories (eval, compare, analyze work on them)
      .sweep/point_<i>.json      grid point i: its run directories and full configs
      .sweep/state_<i>.json      what its worker last said (running, done, failed), pid, host
      logs/<point>.log           the worker's output
      slurm/                     submitit's job files (SLURM or submitit-local executors)
      report/                    comparison tables and figures (``pe-research sweep report``)

A run's state is derived from what is on disk, so the manifest never disagrees with the runs:
``done`` when its last checkpoint is at ``train.steps``; ``failed`` when its worker recorded an
error; ``running`` while its worker is alive; ``interrupted`` when the worker died;
otherwise ``pending``.
"""

from __future__ import annotations

import json
import os
import socket
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from pe_research.core.atomic_files import atomic_write_text
from pe_research.core.errors import ConfigError
from pe_research.runs.run_dir import RunDir
from pe_research.sweeps.spec import SweepPlan

MANIFEST = "sweep.json"
STATES = ("pending", "running", "done", "failed", "interrupted")


class SweepDir:
    """The paths of a sweep directory (nothing is created by asking for a path)."""

    def __init__(self, root: str | Path):
        self.root = Path(root).absolute()

    @property
    def manifest(self) -> Path:
        return self.root / MANIFEST

    def point_plan(self, index: int) -> Path:
        return self.root / ".sweep" / f"point_{index}.json"

    def point_state(self, index: int) -> Path:
        return self.root / ".sweep" / f"state_{index}.json"

    def log(self, name: str) -> Path:
        return self.root / "logs" / f"{name}.log"

    @property
    def submitit(self) -> Path:
        return self.root / "slurm"

    @property
    def report(self) -> Path:
        return self.root / "report"

    def exists(self) -> bool:
        return self.manifest.is_file()

    def read_manifest(self) -> dict[str, Any]:
        if not self.exists():
            raise ConfigError("SWEEP_DIR", str(self.root), f"no {MANIFEST} here; start the "
                              "sweep with `pe-research sweep FILE --workdir SWEEP_DIR`")
        return json.loads(self.manifest.read_text())

    def read_point(self, index: int) -> dict[str, Any]:
        """``{"name", "overrides", "runs": [{"dir", "config"}]}`` of grid point ``index``.

        Each ``dir`` is resolved under this root, so a sweep directory that was moved or copied
        (e.g. from a cluster) still finds its runs; plans store them relative to the root.
        """
        point = json.loads(self.point_plan(index).read_text())
        for run in point["runs"]:
            run["dir"] = str(self.root / point["name"] / Path(run["dir"]).name)
        return point

    def read_state(self, index: int) -> dict[str, Any]:
        path = self.point_state(index)
        return json.loads(path.read_text()) if path.is_file() else {}

    def write_state(self, index: int, state: Mapping[str, Any]) -> None:
        atomic_write_text(self.point_state(index), json.dumps(dict(state), indent=1) + "\n")


def write_plan(sweep_dir: SweepDir, plan: SweepPlan, command: str, executor: str) -> None:
    """Write every point's plan and the manifest (job ids of an earlier launch are kept)."""
    previous = sweep_dir.read_manifest() if sweep_dir.exists() else {}
    sweep_dir.point_plan(0).parent.mkdir(parents=True, exist_ok=True)
    for point in plan.points:
        runs = [{"dir": f"{point.name}/{m.name}",
                 "config": with_wandb_names(m.config, sweep_dir.root.name,
                                            f"{point.name}/{m.name}")}
                for m in point.members]
        atomic_write_text(sweep_dir.point_plan(point.index), json.dumps(
            {"name": point.name, "overrides": point.overrides, "runs": runs}, indent=1) + "\n")
    manifest = {
        "sweep_file": str(plan.file), "command": command, "executor": executor,
        "swept_keys": plan.swept_keys, "seeds": plan.seeds,
        "learning_rates": plan.learning_rates,
        "grid": [{"index": p.index, "name": p.name, "overrides": p.overrides,
                  "members": [m.name for m in p.members]} for p in plan.points],
        "jobs": previous.get("jobs", {}), "runs": {},
        "created": previous.get("created", time.strftime("%Y-%m-%dT%H:%M:%S%z")),
    }
    atomic_write_text(sweep_dir.manifest, json.dumps(manifest, indent=1) + "\n")
    refresh(sweep_dir)


def with_wandb_names(config: Mapping[str, Any], group: str, name: str) -> dict[str, Any]:
    """A member's config whose W&B run sits in the sweep's group, named by point and member
    (names set in the sweep file win)."""
    wandb = {**config["wandb"], "group": config["wandb"]["group"] or group,
             "name": config["wandb"]["name"] or name}
    return {**config, "wandb": wandb}


def record_jobs(sweep_dir: SweepDir, jobs: Mapping[int, str]) -> None:
    """Remember which scheduler job runs which grid point (for ``sweep status``)."""
    manifest = sweep_dir.read_manifest()
    manifest["jobs"].update({str(index): job for index, job in jobs.items()})
    atomic_write_text(sweep_dir.manifest, json.dumps(manifest, indent=1) + "\n")


def last_step(run_dir: str | Path) -> int:
    """The newest finalized checkpoint step of a run (0 without one).

    Orbax writes a step into a temporary directory and renames it to ``<step>`` when it is
    complete, so listing the names is enough (and far cheaper than opening a manager).
    """
    directory = RunDir(run_dir).checkpoints
    if not directory.is_dir():
        return 0
    return max((int(p.name) for p in directory.iterdir() if p.name.isdigit()), default=0)


def logged_step(run_dir: str | Path) -> int:
    """The step of the last record in a run's ``metrics.jsonl`` (0 without one): how far a
    running run has got between checkpoints."""
    path = RunDir(run_dir).metrics
    if not path.is_file():
        return 0
    with path.open("rb") as handle:
        handle.seek(max(path.stat().st_size - 8192, 0))
        lines = handle.read().decode(errors="replace").splitlines()
    for line in reversed(lines[1:] if len(lines) > 1 else lines):
        try:
            return int(json.loads(line)["step"])
        except (ValueError, KeyError, TypeError):
            continue
    return 0


def worker_alive(state: Mapping[str, Any]) -> bool:
    """True when the worker that wrote ``state`` still runs (checked on its own host only)."""
    if state.get("state") != "running":
        return False
    if state.get("host") != socket.gethostname():
        return True  # another node: trust the worker (and the scheduler, for SLURM jobs)
    try:
        os.kill(int(state["pid"]), 0)
    except (ProcessLookupError, ValueError, KeyError):
        return False
    except PermissionError:
        return True
    return True


def run_states(sweep_dir: SweepDir, index: int,
               state: Mapping[str, Any] | None = None) -> list[dict[str, Any]]:
    """``[{"dir", "state", "step", "steps", "error"}]`` for each run of grid point ``index``
    (``state``: the point's recorded state, when already read)."""
    plan = sweep_dir.read_point(index)
    state = sweep_dir.read_state(index) if state is None else state
    alive = worker_alive(state)
    rows = []
    for run in plan["runs"]:
        steps = int(run["config"]["train"]["steps"])
        step = last_step(run["dir"])
        recorded = state.get("runs", {}).get(run["dir"], {})
        if step >= steps:
            name, error = "done", None
        elif alive:
            name, error = "running", None
        elif recorded.get("state") == "failed":
            name, error = "failed", recorded.get("error")
        elif state.get("state") == "running" or step > 0:
            name, error = "interrupted", None
        else:
            name, error = "pending", None
        progress = steps if name == "done" else max(step, logged_step(run["dir"])
                                                    if name == "running" else step)
        rows.append({"dir": run["dir"], "state": name, "step": step, "steps": steps,
                     "progress": progress, "error": error,
                     "preemptions": int(state.get("preemptions", 0))})
    return rows


def refresh(sweep_dir: SweepDir) -> dict[str, Any]:
    """Re-derive every run's state into the manifest, and the notes its workers left (``{note:
    [grid point names]}``: a program split to fit its device); returns the manifest."""
    manifest = sweep_dir.read_manifest()
    manifest["runs"], manifest["notes"] = {}, {}
    for point in manifest["grid"]:
        state = sweep_dir.read_state(point["index"])
        for row in run_states(sweep_dir, point["index"], state):
            relative = os.path.relpath(row.pop("dir"), sweep_dir.root)
            manifest["runs"][relative] = {"point": point["index"], **row}
        if state.get("note"):
            manifest["notes"].setdefault(state["note"], []).append(point["name"])
    manifest["updated"] = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    atomic_write_text(sweep_dir.manifest, json.dumps(manifest, indent=1) + "\n")
    return manifest


def counts(manifest: Mapping[str, Any]) -> dict[str, int]:
    """How many runs are in each state."""
    totals = dict.fromkeys(STATES, 0)
    for run in manifest["runs"].values():
        totals[run["state"]] += 1
    return totals


def status_table(manifest: Mapping[str, Any], *, unfinished_only: bool = False) -> str:
    """The manifest as a text table: run, state, step, error (only the runs that are not done
    with ``unfinished_only``), then the counts."""
    rows = [("run", "state", "step", "error")]
    for name, run in manifest["runs"].items():
        if unfinished_only and run["state"] == "done":
            continue
        preempted = run.get("preemptions", 0)
        label = run["state"] + (f" (preempted {preempted}x)" if preempted else "")
        rows.append((name, label, f"{run['step']}/{run['steps']}", run["error"] or ""))
    widths = [max(len(row[i]) for row in rows) for i in range(3)]
    lines = ["  ".join(cell.ljust(width) for cell, width in zip(row[:3], widths, strict=True))
             + ("  " + row[3] if row[3] else "") for row in rows] if len(rows) > 1 else []
    total = counts(manifest)
    lines.append(", ".join(f"{count} {state}" for state, count in total.items() if count)
                 + f" (of {len(manifest['runs'])} runs)")
    return "\n".join(lines)


def runs_left(sweep_dir: SweepDir, indices: Sequence[int]) -> dict[int, int]:
    """``{index: runs not done}`` of the grid points ``indices`` that have any (finished runs
    are never trained again), in order."""
    left = {i: sum(r["state"] != "done" for r in run_states(sweep_dir, i)) for i in indices}
    return {i: count for i, count in left.items() if count}
