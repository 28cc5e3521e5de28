"""``pe-research sweep``: run a grid of configs, follow it, and compare what it trained.

    pe-research sweep configs/sweeps/copy_schemes_cpu.py --workdir runs/sweep_demo
    pe-research sweep FILE --workdir DIR --jobs 2                  # two jobs at a time
    pe-research sweep FILE --workdir DIR --members-per-program auto  # stack grid points
    pe-research sweep FILE --workdir DIR --executor slurm --partition gpu --gpus-per-job 1 \\
        --time-min 120 --sbatch account=my_lab                     # one SLURM array task per point
    pe-research sweep status DIR                                    # every run's state
    pe-research sweep report DIR                                    # evaluate and compare

Running the same command again skips finished runs and resumes interrupted ones. Every grid
point is validated before anything starts; ``--config.KEY=VALUE`` changes every point's base.
"""

from __future__ import annotations

import argparse
import shlex
import sys

from tqdm import tqdm

from pe_research.core.errors import ConfigError
from pe_research.runs.lock import RunDirLock
from pe_research.sweeps.executors import (
    EXECUTORS,
    check_executor,
    job_states,
    run_local,
    run_submitit,
)
from pe_research.sweeps.grouping import check_members_per_program, group_points, members_cap
from pe_research.sweeps.report import report
from pe_research.sweeps.spec import load_sweep
from pe_research.sweeps.state import (
    SweepDir,
    counts,
    refresh,
    runs_left,
    status_table,
    write_plan,
)

ACTIONS = ("status", "report")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("target", nargs="+", metavar="FILE | status DIR | report DIR",
                        help="a sweep file (configs/sweeps/*.py) to run, or 'status DIR' / "
                             "'report DIR' for a sweep directory")
    parser.add_argument("--workdir", default=None, metavar="SWEEP_DIR",
                        help="where the sweep's runs go (needed to run a sweep file)")
    parser.add_argument("--executor", default="local", choices=EXECUTORS,
                        help="local processes (default), SLURM through submitit, or "
                             "submitit's local executor (the SLURM path on this machine)")
    parser.add_argument("--jobs", type=int, default=1,
                        help="jobs (programs) running at once (SLURM: array parallelism)")
    parser.add_argument("--members-per-program", default=None, metavar="N | auto | point",
                        help="train grid points that differ only in what members of a "
                             "program may differ in (config/stacking.py: task and lengths, seed, "
                             "optimizer scalars, end-token scoring, dropout, the scheme's "
                             "scalars such as the wavelength base or RoPE scaling, keys that only "
                             "draw initial parameters, the run a member starts from, randomized "
                             "range) stacked in one program of up to N members; 'auto': the cap "
                             "measured for the device; 'point': one program per grid point "
                             "(default: the sweep file's, else 'point')")
    parser.add_argument("--partition", default=None, help="SLURM partition")
    parser.add_argument("--gpus-per-job", type=int, default=None, help="GPUs per SLURM job")
    parser.add_argument("--cpus-per-job", type=int, default=None, help="CPUs per SLURM job")
    parser.add_argument("--mem-gb", type=float, default=None, help="memory per SLURM job")
    parser.add_argument("--time-min", type=int, default=None, help="SLURM time limit, minutes")
    parser.add_argument("--max-requeues", type=int, default=None,
                        help="submitit: time limits a job may reach and be requeued after, "
                             "each time from its checkpoints (default 3)")
    parser.add_argument("--sbatch", action="append", default=[], metavar="KEY=VALUE",
                        help="an extra sbatch flag, e.g. --sbatch account=lab (repeatable)")
    parser.add_argument("--wait", action="store_true",
                        help="SLURM: follow the jobs until they end, then report")
    parser.add_argument("--no-report", action="store_true",
                        help="do not evaluate and compare when every run is done")
    parser.add_argument("--reevaluate", action="store_true",
                        help="report: evaluate runs again even if their results are current")


def slurm_settings(args: argparse.Namespace, defaults: dict) -> dict:
    """The sweep file's SLURM settings with the command line's on top."""
    settings = dict(defaults)
    for key in ("partition", "gpus_per_job", "cpus_per_job", "mem_gb", "time_min",
                "max_requeues"):
        if getattr(args, key) is not None:
            settings[key] = getattr(args, key)
    extra = dict(settings.get("sbatch") or {})
    for flag in args.sbatch:
        key, sep, value = flag.partition("=")
        if not sep or not key:
            raise ConfigError("--sbatch", flag, "KEY=VALUE, e.g. --sbatch account=my_lab")
        extra[key] = value
    settings["sbatch"] = extra
    return settings


FILE_REDRAW_S = 60.0


class Progress:
    """A live line: training steps done over all runs (so an ETA), and run counts by state;
    above it, once, each note a worker leaves (a program split to fit its device).

    Written to a file (nohup, a batch job), the line is redrawn once a minute and whenever a
    run changes state, rather than on every poll.
    """

    def __init__(self, sweep_dir: SweepDir):
        self.sweep_dir = sweep_dir
        # position=0: the sweep's line stays its own line even when another bar of this process
        # is alive (tqdm would place it below that one and add cursor moves to every redraw).
        self.bar = tqdm(desc="sweep", unit="step", dynamic_ncols=True, smoothing=0.0,
                        mininterval=1.0 if sys.stderr.isatty() else FILE_REDRAW_S, position=0)
        self.base: int | None = None
        self.shown = ""
        self.noted: set[tuple[str, ...]] = set()

    def tick(self) -> None:
        manifest = refresh(self.sweep_dir)
        runs = manifest["runs"].values()
        done = sum(run["progress"] for run in runs)
        notes = {(note, *names) for note, names in manifest["notes"].items()}
        if self.base is None:  # steps trained before this launch do not count towards speed
            # From where each run resumes (its checkpoint), not its logged step: a killed
            # worker may still read as alive here, and the steps it logged after its last
            # checkpoint are trained again.
            self.base = sum(min(run["step"], run["steps"]) for run in runs)
            self.bar.reset(total=sum(run["steps"] for run in runs) - self.base)
            self.noted = notes  # a note of an earlier launch is not news
        for note, *names in sorted(notes - self.noted):
            more = f" (+{counted(len(names) - 1, 'grid point')})" if len(names) > 1 else ""
            self.bar.write(f"{names[0]}{more}: {note}")
        self.noted |= notes
        # A broken checkpoint falls back to an earlier one: the bar never runs backwards.
        self.bar.n = min(max(done - self.base, self.bar.n), self.bar.total)
        state = counts(manifest)
        runs_line = (f"runs: {state['done']} done, {state['running']} running, "
                     f"{state['failed']} failed, {state['pending'] + state['interrupted']} waiting")
        self.bar.set_postfix_str(runs_line, refresh=False)
        if runs_line != self.shown:
            self.shown = runs_line
            self.bar.refresh()
        else:
            self.bar.update(0)  # redraws only once mininterval has passed

    def close(self) -> None:
        self.bar.close()


def run_sweep(args: argparse.Namespace, file: str) -> int:
    if not args.workdir:
        raise ConfigError("--workdir", None, "give the sweep directory: "
                          f"pe-research sweep {file} --workdir runs/NAME")
    if args.jobs < 1:
        raise ConfigError("--jobs", args.jobs, "a positive number of grid points at once")
    check_executor(args.executor)
    stacking = (check_members_per_program(args.members_per_program)
                if args.members_per_program is not None else None)
    plan = load_sweep(file, args.config_overrides)
    stacking = check_members_per_program(stacking or plan.members_per_program)
    settings = slurm_settings(args, plan.slurm)
    sweep_dir = SweepDir(args.workdir)
    if sweep_dir.root.exists() and not sweep_dir.root.is_dir():
        raise ConfigError("--workdir", args.workdir, "is a file, not a directory")
    command = shlex.join(["pe-research", "sweep", *sys.argv[2:]]) if sys.argv[1:2] == \
        ["sweep"] else f"pe-research sweep {file} --workdir {args.workdir}"
    with RunDirLock(sweep_dir.root, "run"):  # one driver per sweep directory
        return _run_locked(args, plan, settings, sweep_dir, command,
                           members_cap(stacking, args.executor, settings))


def counted(number: int, noun: str) -> str:
    """``"1 grid point"``, ``"3 grid points"``."""
    return f"{number:,} {noun}{'' if number == 1 else 's'}"


def _run_locked(args: argparse.Namespace, plan, settings: dict, sweep_dir: SweepDir,
                command: str, cap: int) -> int:
    write_plan(sweep_dir, plan, command, args.executor)
    left = runs_left(sweep_dir, [p.index for p in plan.points])
    indices = list(left)
    groups = group_points(plan.points, indices, cap, left)
    names = {p.index: p.name for p in plan.points}
    members = len(plan.points[0].members)
    programs = f" in {counted(len(groups), 'program')} of up to {cap} members" if cap else ""
    print(f"sweep {sweep_dir.root}: {counted(len(plan.points), 'grid point')} x "
          f"{counted(members, 'member')} = {counted(plan.runs, 'run')}; "
          f"{counted(len(indices), 'grid point')} to run{programs} ({args.executor}, "
          f"{args.jobs} at a time)", flush=True)
    if indices:
        progress = Progress(sweep_dir)
        try:
            if args.executor == "local":
                run_local(sweep_dir, groups, names, args.jobs, progress.tick)
            else:
                run_submitit(sweep_dir, groups, settings, args.executor, args.jobs,
                             args.wait, progress.tick)
        finally:
            progress.close()
    manifest = refresh(sweep_dir)
    state = counts(manifest)
    if args.executor == "slurm" and not args.wait and state["done"] < plan.runs:
        print(f"submitted {len(indices)} jobs; follow them with `pe-research sweep status "
              f"{args.workdir}`, then `pe-research sweep report {args.workdir}`")
        return 0
    print(status_table(manifest, unfinished_only=True))
    if state["done"] and not args.no_report:
        show_report(sweep_dir, args.reevaluate)
    return 0 if state["done"] == plan.runs else 1


def show_report(sweep_dir: SweepDir, reevaluate: bool) -> None:
    paths = report(sweep_dir, reevaluate=reevaluate)
    print(paths["summary"].read_text())
    print(f"report: {paths['summary']}")


def run(args: argparse.Namespace) -> int:
    action, *rest = args.target
    if action not in ACTIONS:
        if rest:
            raise ConfigError("FILE", " ".join(args.target), "give one sweep file, or "
                              "'status DIR' / 'report DIR'")
        return run_sweep(args, action)
    if len(rest) != 1:
        raise ConfigError(action, " ".join(rest) or None,
                          f"give one sweep directory: pe-research sweep {action} DIR")
    sweep_dir = SweepDir(rest[0])
    manifest = refresh(sweep_dir)
    if action == "report":
        show_report(sweep_dir, args.reevaluate)
        return 0
    print(status_table(manifest))
    for index, job_state in job_states(sweep_dir, manifest).items():
        print(f"job {manifest['jobs'][index]} (grid point {index}): {job_state}")
    return 0
