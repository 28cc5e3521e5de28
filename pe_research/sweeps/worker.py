"""One job: train the unfinished members of its grid points as one ensemble, record how each
ended (a job is one grid point, or several that stack: ``grouping.py``). Members that need more
memory together than the device has (``training/program_memory.py``) train as several programs
in turn, each of as many as fit.

Run by every executor: ``python -m pe_research.sweeps.worker SWEEP_DIR INDEX[,INDEX...]``
(local), or ``PointJob`` pickled by submitit (SLURM). A failure is recorded as one line per
member, never raised past the worker, so one failing job never stops the others.

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
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pe_research.core.console import own_warnings_on_one_line
from pe_research.sweeps.state import SweepDir, last_step

PREEMPTED_EXIT = 75  # as training.preemption.EXIT_CODE, without importing JAX here


def _one_line(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return f"{type(error).__name__}: {text[0] if text else ''}"[:500]


def run_point(sweep_dir: str | Path, index: int | Sequence[int]) -> dict[str, Any]:
    """Train grid point ``index`` of the sweep, or the points of a list in one program (after
    ``runtime.setup()``); returns (and records in each point's state) each run's outcome."""
    from pe_research import runtime
    from pe_research.config import from_mapping
    from pe_research.training.ensemble import train_ensemble
    from pe_research.training.loop import train
    from pe_research.training.preemption import PreemptedError
    from pe_research.training.program_memory import ProgramMemoryError, gb

    runtime.setup()
    paths = SweepDir(sweep_dir)
    indices = [index] if isinstance(index, int) else [int(i) for i in index]
    plans = {i: paths.read_point(i) for i in indices}
    todo = [run for i in indices for run in plans[i]["runs"]
            if last_step(run["dir"]) < int(run["config"]["train"]["steps"])]
    states: dict[int, dict[str, Any]] = {}
    for i in indices:
        states[i] = {"state": "running", "pid": os.getpid(), "host": socket.gethostname(),
                     "started": time.time(), "runs": {},
                     "preemptions": int(paths.read_state(i).get("preemptions", 0))}
        paths.write_state(i, states[i])
    outcome: dict[str, dict[str, Any]] = {}
    preempted = None
    try:
        programs = [todo] if todo else []
        while programs:  # in turn; a program too large for the device is split first
            runs = programs.pop(0)
            configs = [from_mapping(run["config"]) for run in runs]
            dirs = [Path(run["dir"]) for run in runs]
            try:
                if len(runs) == 1:
                    train(configs[0], dirs[0])
                else:
                    result = train_ensemble(configs, dirs)
                    for run_dir, message in result.diverged.items():
                        outcome[str(run_dir)] = {"state": "failed", "error": message}
            except ProgramMemoryError as error:
                programs[:0] = [runs[i:i + error.fit] for i in range(0, len(runs), error.fit)]
                note = (f"{len(runs)} members need {gb(error.needed)} GB in one program, above "
                        f"the {gb(error.budget)} GB budget (train.memory_budget_gb): training "
                        f"them as {-(-len(runs) // error.fit)} programs of up to {error.fit}")
                print(note, flush=True)
                for i, state in states.items():  # the driver's console shows it too
                    state["note"] = note
                    paths.write_state(i, state)
                continue
            for run in runs:
                outcome.setdefault(run["dir"], {"state": "done", "error": None})
    except PreemptedError as error:
        print(error, flush=True)
        preempted = error
        for state in states.values():
            state["preemptions"] += 1
        for run in todo:  # the programs already done stay done
            outcome.setdefault(run["dir"], {"state": "preempted", "error": None})
    except Exception as error:  # noqa: BLE001 - recorded, and the sweep goes on
        traceback.print_exc()
        for run in todo:
            outcome.setdefault(run["dir"], {"state": "failed", "error": _one_line(error)})
    for run in todo:
        outcome.setdefault(run["dir"], {"state": "done", "error": None})
    for i, state in states.items():
        own = {run["dir"] for run in plans[i]["runs"]}
        state.update(state="preempted" if preempted else "ended", ended=time.time(),
                     runs={d: result for d, result in outcome.items() if d in own})
        paths.write_state(i, state)
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
    """Grid point ``index`` (or a list of points in one program) as a submitit job that can be
    requeued (submitit calls ``checkpoint`` on its signal): the same points again, which resume
    from their checkpoints."""

    def __call__(self, sweep_dir: str, index: int | list[int]) -> dict[str, Any]:
        with own_warnings_on_one_line():
            return run_point(sweep_dir, index)

    def checkpoint(self, sweep_dir: str, index: int | list[int]) -> Any:
        import submitit

        return submitit.helpers.DelayedSubmission(self, sweep_dir, index)


def main(argv: list[str]) -> int:
    sweep_dir, indices = argv
    with own_warnings_on_one_line():  # the program's log reads as a command's console
        outcome = run_point(sweep_dir, [int(i) for i in indices.split(",")])
    states = {result["state"] for result in outcome.values()}
    return PREEMPTED_EXIT if "preempted" in states else 1 if "failed" in states else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
