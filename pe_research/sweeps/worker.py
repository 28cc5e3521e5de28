"""One grid point's job: train its unfinished members as one ensemble, record how each ended.

Run by every executor: ``python -m pe_research.sweeps.worker SWEEP_DIR INDEX`` (local), or
``PointJob`` pickled by submitit (SLURM). A failure is recorded as one line per member, never
raised past the worker, so one failing grid point never stops the others.

Preemption (SIGTERM, SIGUSR1, or submitit's time-limit signal SIGUSR2): the members checkpoint
the step they reached and the point is recorded as preempted; under submitit the signal is then
handed to submitit, which requeues the job (``PointJob.checkpoint``) up to the sweep's
``--max-requeues`` time limits; a local worker exits with code 75 and a rerun of the sweep goes
on from the checkpoints.
"""

from __future__ import annotations

import os
import signal
import socket
import sys
import time
import traceback
from pathlib import Path
from typing import Any

from pe_research.sweeps.state import SweepDir, last_step

PREEMPTED_EXIT = 75  # as training.preemption.EXIT_CODE, without importing JAX here


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
    from pe_research.training.preemption import PreemptedError

    runtime.setup()
    paths = SweepDir(sweep_dir)
    plan = paths.read_point(index)
    todo = [run for run in plan["runs"]
            if last_step(run["dir"]) < int(run["config"]["train"]["steps"])]
    previous = paths.read_state(index)
    state: dict[str, Any] = {"state": "running", "pid": os.getpid(), "host": socket.gethostname(),
                             "started": time.time(), "runs": {},
                             "preemptions": int(previous.get("preemptions", 0))}
    paths.write_state(index, state)
    outcome: dict[str, dict[str, Any]] = {}
    preempted = None
    try:
        configs = [from_mapping(run["config"]) for run in todo]
        dirs = [Path(run["dir"]) for run in todo]
        if len(todo) == 1:
            train(configs[0], dirs[0])
        elif todo:
            result = train_ensemble(configs, dirs)
            for run_dir, message in result.diverged.items():
                outcome[str(run_dir)] = {"state": "failed", "error": message}
    except PreemptedError as error:
        print(error, flush=True)
        preempted = error
        state["preemptions"] += 1
        for run in todo:
            outcome[run["dir"]] = {"state": "preempted", "error": None}
    except Exception as error:  # noqa: BLE001 - recorded, and the sweep goes on
        traceback.print_exc()
        for run in todo:
            outcome.setdefault(run["dir"], {"state": "failed", "error": _one_line(error)})
    for run in todo:
        outcome.setdefault(run["dir"], {"state": "done", "error": None})
    state.update(state="preempted" if preempted else "ended", ended=time.time(), runs=outcome)
    paths.write_state(index, state)
    if preempted is not None and under_submitit():
        signal.raise_signal(preempted.signal_number)  # submitit's own handler requeues the job
    return outcome


def under_submitit() -> bool:
    """Whether this process is a submitit job (whose handler of its signal requeues it)."""
    import submitit

    try:
        submitit.JobEnvironment()
    except RuntimeError:
        return False
    return True


class PointJob:
    """Grid point ``index`` of the sweep as a submitit job that can be requeued (submitit calls
    ``checkpoint`` on its signal): the same point again, which resumes from its checkpoints."""

    def __call__(self, sweep_dir: str, index: int) -> dict[str, Any]:
        return run_point(sweep_dir, index)

    def checkpoint(self, sweep_dir: str, index: int) -> Any:
        import submitit

        return submitit.helpers.DelayedSubmission(self, sweep_dir, index)


def main(argv: list[str]) -> int:
    sweep_dir, index = argv
    outcome = run_point(sweep_dir, int(index))
    states = {result["state"] for result in outcome.values()}
    return PREEMPTED_EXIT if "preempted" in states else 1 if "failed" in states else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
