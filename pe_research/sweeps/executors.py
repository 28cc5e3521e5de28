"""Where a sweep's grid points run: local processes, or SLURM jobs through submitit.

A job is one program: a grid point, or grid points that stack (``grouping.py``). ``local``: each
job in its own process (``python -m pe_research.sweeps.worker``), ``jobs`` at a time, output in
``logs/<first point>.log``. ``slurm``: one job-array task per job,
submitted by submitit with the partition, GPUs, CPUs, memory, time limit and extra sbatch flags
given. ``submitit-local``: the same submitit path run by submitit's local executor on this
machine (to try a sweep before sending it to a cluster).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from pe_research.core.device_memory import SHARING_ENV
from pe_research.core.errors import ConfigError
from pe_research.sweeps.state import SweepDir, record_jobs
from pe_research.sweeps.worker import PointJob

EXECUTORS = ("local", "slurm", "submitit-local")
POLL_S = 1.0
# Worker output goes to a log file: keep progress bars to a line every few seconds.
WORKER_ENV = {"TQDM_MININTERVAL": "5", "WANDB_SILENT": "true"}


def worker_env(jobs: int) -> dict[str, str]:
    """A local worker's environment: ``WORKER_ENV``, and the number of workers that share this
    host's memory, so that each one's default eval memory budget is its share of it."""
    return {**os.environ, **WORKER_ENV, SHARING_ENV: str(jobs)}


def check_executor(executor: str) -> None:
    """ConfigError for an unknown executor, or SLURM without ``sbatch``; before anything runs."""
    if executor not in EXECUTORS:
        raise ConfigError("--executor", executor, f"choose one of {EXECUTORS}")
    if executor == "slurm" and shutil.which("sbatch") is None:
        raise ConfigError("--executor", executor, "sbatch is not on PATH: run this on a SLURM "
                          "login node, or use --executor local")


def run_local(sweep_dir: SweepDir, groups: Sequence[Sequence[int]], names: Mapping[int, str],
              jobs: int, tick: Callable[[], None]) -> None:
    """Run each group of grid points in a worker process, ``jobs`` at a time; ``tick`` after
    every poll."""
    env = worker_env(jobs)
    queue, running = [list(group) for group in groups], {}
    # SIGTERM (kill, timeout, a batch system) would end this process without the cleanup below
    # and leave its workers training, unseen, into directories a rerun then shares.
    previous = stop_on_sigterm()
    try:
        while queue or running:
            while queue and len(running) < jobs:
                group = queue.pop(0)
                log = sweep_dir.log(names[group[0]])
                log.parent.mkdir(parents=True, exist_ok=True)
                with log.open("a") as handle:
                    running[group[0]] = subprocess.Popen(
                        [sys.executable, "-m", "pe_research.sweeps.worker", str(sweep_dir.root),
                         ",".join(map(str, group))], stdout=handle, stderr=subprocess.STDOUT,
                        env=env)
            time.sleep(POLL_S)
            for index in [i for i, process in running.items() if process.poll() is not None]:
                del running[index]
            tick()
    finally:
        for process in running.values():  # interrupted: the runs resume on the next launch
            process.terminate()
        for process in running.values():
            process.wait()
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)


def stop_on_sigterm() -> signal.Handlers | Callable | int | None:
    """Make SIGTERM raise ``SystemExit(143)`` in this (main) thread; the handler it replaced.

    ``None`` off the main thread, where Python cannot install signal handlers.
    """
    if threading.current_thread() is not threading.main_thread():
        return None

    def exit_on_sigterm(signum: int, frame: Any) -> None:
        raise SystemExit(128 + signum)

    return signal.signal(signal.SIGTERM, exit_on_sigterm)


def slurm_parameters(settings: Mapping[str, Any], cluster: str, jobs: int,
                     name: str) -> dict[str, Any]:
    """submitit ``update_parameters`` arguments from the sweep's ``slurm`` settings."""
    parameters: dict[str, Any] = {"timeout_min": int(settings.get("time_min", 60)),
                                  "name": name}
    if settings.get("gpus_per_job") is not None:
        parameters["gpus_per_node"] = int(settings["gpus_per_job"])
    if settings.get("cpus_per_job") is not None:
        parameters["cpus_per_task"] = int(settings["cpus_per_job"])
    if settings.get("mem_gb") is not None:
        parameters["mem_gb"] = float(settings["mem_gb"])
    if cluster == "slurm":
        if settings.get("partition"):
            parameters["slurm_partition"] = str(settings["partition"])
        parameters["slurm_array_parallelism"] = int(jobs)
        extra = dict(settings.get("sbatch") or {})
        if extra:
            parameters["slurm_additional_parameters"] = extra
    return parameters


def submit(sweep_dir: SweepDir, groups: Sequence[Sequence[int]], settings: Mapping[str, Any],
           executor: str, jobs: int) -> list[Any]:
    """Submit one job per group of grid points through submitit; returns the submitit jobs."""
    import submitit

    cluster = "slurm" if executor == "slurm" else "local"
    # Time limits a job may reach and be requeued after (preemptions requeue without limit).
    requeues = {f"{cluster}_max_num_timeout": int(settings.get("max_requeues", 3))}
    submitter = submitit.AutoExecutor(folder=str(sweep_dir.submitit), cluster=cluster,
                                      **requeues)
    submitter.update_parameters(**slurm_parameters(settings, cluster, jobs,
                                                   f"sweep_{sweep_dir.root.name}"))
    submitted = submitter.map_array(PointJob(), [str(sweep_dir.root)] * len(groups),
                                    [list(group) for group in groups])
    record_jobs(sweep_dir, {index: job.job_id for group, job in
                            zip(groups, submitted, strict=True) for index in group})
    return submitted


def run_submitit(sweep_dir: SweepDir, groups: Sequence[Sequence[int]],
                 settings: Mapping[str, Any], executor: str, jobs: int, wait: bool,
                 tick: Callable[[], None]) -> list[Any]:
    """Submit the groups of grid points; with ``wait``, follow them until every job has ended.

    submitit's local executor starts every job of an array at once, so there the jobs go in
    waves of ``jobs``.
    """
    waves = [list(groups)] if executor == "slurm" else \
        [list(groups[i:i + jobs]) for i in range(0, len(groups), jobs)]
    submitted: list[Any] = []
    for wave in waves:
        batch = submit(sweep_dir, wave, settings, executor, jobs)
        submitted += batch
        while wait or executor != "slurm":
            tick()
            if all(job.done() for job in batch):
                break
            time.sleep(POLL_S)
    tick()
    return submitted


def job_states(sweep_dir: SweepDir, manifest: Mapping[str, Any]) -> dict[str, str]:
    """The scheduler's word on each grid point's job (SLURM only; empty elsewhere)."""
    if manifest.get("executor") != "slurm" or shutil.which("sacct") is None:
        return {}
    import submitit

    return {index: submitit.SlurmJob(folder=str(sweep_dir.submitit), job_id=job).state
            for index, job in manifest.get("jobs", {}).items()}
