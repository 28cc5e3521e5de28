"""One grid point's job: train its unfinished members as one ensemble, record how each ended.

Run by every executor: ``python -m pe_research.sweeps.worker SWEEP_DIR INDEX`` (local), or
``run_point`` pickled by submitit (SLURM). A failure is recorded as one line per member, never
raised past the worker, so one failing grid point never stops the others.
"""

from __future__ import annotations

import os
import socket
import sys
import time
import traceback
from pathlib import Path
from typing import Any

from pe_research.sweeps.state import SweepDir, last_step


def _one_line(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return f"{type(error).__name__}: {text[0] if text else ''}"[:500]


def run_point(sweep_dir: str | Path, index: int) -> dict[str, Any]:
    """Train grid point ``index`` of the sweep (after ``runtime.setup()``); returns (and
    records) each run's outcome."""
    from pe_research import runtime
    from pe_research.config import from_mapping
    from pe_research.training.ensemble import train_ensemble
    from pe_research.training.loop import train

    runtime.setup()
    paths = SweepDir(sweep_dir)
    plan = paths.read_point(index)
    todo = [run for run in plan["runs"]
            if last_step(run["dir"]) < int(run["config"]["train"]["steps"])]
    state: dict[str, Any] = {"state": "running", "pid": os.getpid(), "host": socket.gethostname(),
                             "started": time.time(), "runs": {}}
    paths.write_state(index, state)
    outcome: dict[str, dict[str, Any]] = {}
    try:
        configs = [from_mapping(run["config"]) for run in todo]
        dirs = [Path(run["dir"]) for run in todo]
        if len(todo) == 1:
            train(configs[0], dirs[0])
        elif todo:
            result = train_ensemble(configs, dirs)
            for run_dir, message in result.diverged.items():
                outcome[str(run_dir)] = {"state": "failed", "error": message}
    except Exception as error:  # noqa: BLE001 - recorded, and the sweep goes on
        traceback.print_exc()
        for run in todo:
            outcome.setdefault(run["dir"], {"state": "failed", "error": _one_line(error)})
    for run in todo:
        outcome.setdefault(run["dir"], {"state": "done", "error": None})
    state.update(state="ended", ended=time.time(), runs=outcome)
    paths.write_state(index, state)
    return outcome


def main(argv: list[str]) -> int:
    sweep_dir, index = argv
    outcome = run_point(sweep_dir, int(index))
    failed = [run for run, result in outcome.items() if result["state"] == "failed"]
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
