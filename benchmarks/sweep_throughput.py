"""Sweep throughput: model-steps/s at M members per program, and a sweep's projected wall time.

    python benchmarks/sweep_throughput.py configs/sweeps/randomized_pe_table.py
    python benchmarks/sweep_throughput.py FILE --members 1,8,32,128 --steps 10
    python benchmarks/sweep_throughput.py FILE --point 'task.name=parity_check,...'  # another point
    python benchmarks/sweep_throughput.py FILE --config.model.d_model=16   # any config override
    python benchmarks/sweep_throughput.py FILE --stack points   # members of several tasks
    python benchmarks/sweep_throughput.py FILE --every-shape    # every program's own shapes

For one grid point of a sweep file (the first, or ``--point``): the ensemble train step at each
member count M, timed over ``--steps`` steps after warm-up at the widest shape its batches are
padded to; the host's time to draw the M members' batches for a step; and both as the training loop
runs them (each step's batches drawn while the previous step runs, its metrics read one step late):
model-steps/s is M over that loop's time per step. A count whose compiled step needs more memory
than the device has is skipped (both sizes in its row), and so is every larger one; the projection
uses the counts that fit. The training projection is printed before the evaluation is timed, so a
run cut at a time limit keeps it. Then the evaluation at the point's eval lengths, compilation
included, of one member and of the first program the sweep's report evaluates (the point's members
and those of the grid points that share its model, up to this device's members per program:
``sweeps/report.py``; an untrained model decodes to the longest length, so this bounds a trained
model's time from above). Members differ in seed (``--stack seeds``: one grid point's members, as
``pe-research sweep`` stacks them by default), or are drawn in turn from every grid point that
stacks with the measured one (``--stack points``: tasks of several vocabularies, as
``--members-per-program`` stacks them).

Projected for the whole sweep on this device: training (``train.steps`` per run) and evaluation
(one program per run: runs x one member's; grouped: the report's evaluation programs x the first
one's). Training counts the step and its batches as the loop runs them; checkpoints come on top
(benchmarks/RESULTS.md compares projections with a sweep's measured time). The first three
groupings take every grid point to cost what the measured one does at its widest shape, each
bucket's compile and the evaluations during training left out; the fourth does not:

- one program per run (M = 1);
- as ``pe-research sweep`` groups runs: one program per grid point, of its members;
- stacked at the measured M with the most model-steps/s: as ``--members-per-program M``
  groups the sweep's grid points (``sweeps/grouping.py``), each program timed at the measured
  member count nearest its size (with ``--stack points``, on members of several tasks);
- with ``--every-shape``, as the sweep groups its runs on this device (its
  ``members_per_program``), each program at the step shapes it draws, the heaviest timed and
  each shape's compile counted (``sweep_projection.py``), so the mix of tasks, their sequence
  lengths and ``data.length_stream=shared`` count as they run; and the evaluations during
  training (``train.eval_every``), member by member as the loop runs them, each program's at
  the first program's cost per member.
"""

from __future__ import annotations

import argparse
import copy
import math
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import jax
from flax import nnx
from step_timing import (
    batch_drawer,
    draw_seconds,
    memory_gb,
    run,
    step_seconds,
)
from sweep_projection import every_shape_seconds, hours

from pe_research.config import collect_overrides, from_mapping
from pe_research.config.stacking import program_key
from pe_research.core.errors import UsageError
from pe_research.evaluation.members_eval import evaluate_members, members_key
from pe_research.evaluation.range_eval import default_lengths
from pe_research.model import build_model
from pe_research.runs.restore import LoadedRun
from pe_research.runtime import data_mesh, replicated
from pe_research.sweeps.grouping import (
    check_members_per_program,
    group_points,
    in_width_order,
    members_cap,
)
from pe_research.sweeps.report import evaluation_programs
from pe_research.sweeps.spec import Point, SweepPlan, load_sweep
from pe_research.tasks import get_task


def chosen_point(points: Sequence[Point], name: str | None) -> Point:
    """The grid point named ``name``, or the first; a one-line error lists a few names."""
    if name is None:
        return points[0]
    for point in points:
        if point.name == name:
            return point
    shown = ", ".join(point.name for point in points[:5])
    raise UsageError(f"--point {name}: no such grid point; the sweep has {len(points)}, "
                     f"e.g. {shown}")


def member_counts(text: str) -> list[int]:
    """``"1,8,32"`` -> ``[1, 8, 32]``; one line for anything but positive counts."""
    try:
        counts = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        counts = []
    if not counts or min(counts) < 1:
        raise UsageError(f"--members {text}: give positive counts, e.g. 1,8,32")
    return sorted(set(counts))


def member_configs(plan: SweepPlan, point: Point, members: int, stack: str) -> list[Any]:
    """``members`` configs of one program: ``point``'s config with seeds 0..M-1 (``seeds``), or
    (``points``) the members of every grid point that stacks with ``point``, in turn from
    ``point`` on: the program that holds it, as the sweep's grouping fills programs (in the order
    of their widest training batch, ``in_width_order``)."""
    if stack == "seeds":
        configs = [from_mapping(copy.deepcopy(point.members[0].config)) for _ in range(members)]
        for seed, config in enumerate(configs):
            config.seed = seed
        return configs
    key = program_key(point.members[0].config)
    stacking = [plan.points[index] for index in in_width_order(plan.points, [
        other.index for other in plan.points if program_key(other.members[0].config) == key])]
    start = [other.index for other in stacking].index(point.index)
    pool = [member.config for other in stacking[start:] + stacking[:start]
            for member in other.members]
    configs = [from_mapping(copy.deepcopy(pool[k % len(pool)])) for k in range(members)]
    for k, config in enumerate(configs):  # beyond the pool, further seeds of the same runs
        config.seed = int(config.seed) + 1_000 * (k // len(pool))
    return configs


def data_seconds(configs: Sequence[Any], steps: int) -> float:
    """Host seconds per step to draw and stack the members' training batches, as the training
    loop does before each step (``draw_seconds``)."""
    return draw_seconds(batch_drawer(configs), steps)


def evaluation_programs_of(plan: SweepPlan) -> list[list[Any]]:
    """The configs of every run in the programs the sweep's report evaluates, on this device."""
    points = [(members_key(from_mapping(copy.deepcopy(p.members[0].config))),
               [member.config for member in p.members]) for p in plan.points]
    return evaluation_programs(points, members_cap("auto", "local", {}))


def eval_seconds(configs: Sequence[Any]) -> float:
    """Wall seconds of the evaluation of untrained members ``configs`` at their eval lengths,
    in one program as the sweep's report evaluates them, compile included."""
    mesh = data_mesh()
    with tempfile.TemporaryDirectory(prefix="sweep_throughput_") as root:
        runs = []
        for k, config in enumerate(configs):
            task = get_task(config.task.to_dict(), config.data.to_dict())
            graphdef, params, rest = nnx.split(build_model(config, task.vocabulary.size),
                                               nnx.Param, ...)
            runs.append(LoadedRun(Path(root) / f"member_{k}", config, task, 0, graphdef,
                                  jax.device_put(params, replicated(mesh)), rest, mesh))
        start = time.perf_counter()
        evaluate_members(runs)
        return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("sweep_file", help="a sweep file, e.g. configs/sweeps/demo.py")
    parser.add_argument("--members", default="1,8,32", help="member counts, comma-separated")
    parser.add_argument("--steps", type=int, default=10, help="timed steps per block")
    parser.add_argument("--point", default=None, help="the grid point to measure (its name)")
    parser.add_argument("--every-shape", action="store_true",
                        help="also project from the step shapes of every program of the sweep "
                             "as it groups its runs on this device (benchmarks/"
                             "sweep_projection.py)")
    parser.add_argument("--coverage", type=float, default=0.9,
                        help="with --every-shape: the share of the sweep's steps whose step "
                             "shapes are timed (the rest take a wider timed shape's time)")
    parser.add_argument("--members-per-program", default=None,
                        help="with --every-shape: group as `pe-research sweep "
                             "--members-per-program` would (default: the sweep file's setting "
                             "on this device)")
    parser.add_argument("--shapes-only", action="store_true",
                        help="print the step shapes of every program (as --every-shape groups "
                             "them) and their padded tokens; time nothing")
    parser.add_argument("--shape-samples", type=int, default=200,
                        help="with --every-shape: steps per program at which shapes are counted")
    parser.add_argument("--stack", default="seeds", choices=("seeds", "points"),
                        help="members differ in seed (one grid point's), or come from every "
                             "grid point that stacks with it (several tasks)")
    overrides, rest = collect_overrides(sys.argv[1:])
    args = parser.parse_args(rest)
    counts = member_counts(args.members)
    if args.members_per_program is not None:  # before anything compiles
        check_members_per_program(args.members_per_program)
    if args.shapes_only:
        every_shape_seconds(load_sweep(args.sweep_file, overrides), args)
        return
    if not 0 < args.coverage <= 1 or args.shape_samples < 1:
        raise UsageError(f"--coverage {args.coverage} --shape-samples {args.shape_samples}: "
                         "give a coverage in (0, 1] and at least one sample, e.g. 0.9 and 200")
    plan = load_sweep(args.sweep_file, overrides)
    point = chosen_point(plan.points, args.point)
    config = from_mapping(copy.deepcopy(point.members[0].config))
    grouped = len(point.members)
    device = jax.devices()[0]
    train_steps = int(config.train.steps)
    stackable = [p for p in plan.points if program_key(p.members[0].config)
                 == program_key(point.members[0].config)]
    tasks = sorted({p.members[0].config["task"]["name"] for p in stackable})
    print(f"device: {device.device_kind} x{jax.device_count()} ({jax.default_backend()}); "
          f"sweep {args.sweep_file}: {len(plan.points)} grid points, {plan.runs} runs of "
          f"{train_steps:,} steps; measured point {point.name} ({grouped} members); members "
          + ("differ in seed" if args.stack == "seeds" else
             f"from the {len(stackable)} grid points that stack with it ({len(tasks)} tasks)"))

    rate = {}
    print("| members per program | ms/step | data ms/step | loop ms/step | model-steps/s "
          "| compile (s) | step memory (GB) | peak mem (GB) |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|")
    too_many = None  # the smallest count that did not fit: more members need more memory
    for members in sorted({*counts, grouped}):
        if too_many is not None:
            print(f"| {members} | skipped: more members than {too_many} | | | | | | |")
            continue
        configs = member_configs(plan, point, members, args.stack)
        try:
            compile_s, step_s, loop_s, needed = step_seconds(configs, args.steps)
        except MemoryError as error:
            print(f"| {members} | {error} | | | | | | |", flush=True)
            too_many = members
            continue
        batches_s = data_seconds(configs, args.steps)
        rate[members] = members / loop_s
        peak = memory_gb(device)
        print(f"| {members} | {step_s * 1e3:.2f} | {batches_s * 1e3:.2f} | {loop_s * 1e3:.2f} | "
              f"{rate[members]:,.1f} | "
              f"{compile_s:.1f} | {'-' if needed is None else f'{needed:.3g}'} | "
              f"{'-' if peak is None else f'{peak:.2f}'} |", flush=True)
    if not rate:
        print("\nno member count fits this device's memory; nothing to project")
        return
    model_steps = plan.runs * train_steps
    groupings = training_seconds(plan, rate, grouped)
    # Printed before the evaluation is timed: a run cut at a time limit keeps it.
    print(f"\nprojected training for the whole sweep ({model_steps:,} model-steps), hours on "
          "this device (steps and their batches as the training loop runs them, a lower bound):")
    print("| grouping | programs | training |")
    print("|---|---:|---:|")
    attempted = {*counts, grouped}
    missing = {count: "does not fit" if count in attempted else "not measured"
               for count in (1, grouped)}
    for label, programs, count, training in groupings:
        print(f"| {label} | {programs:,} | "
              f"{missing[count] if training is None else hours(training)} |", flush=True)

    every_shape = every_shape_seconds(plan, args) if args.every_shape else None

    alone = eval_seconds([config])
    programs = evaluation_programs_of(plan)
    first = next(p for p in programs if point.members[0].config in p)
    together = alone if len(first) == 1 else eval_seconds(
        [from_mapping(copy.deepcopy(member)) for member in first])
    tasks_in_first = len({member["task"]["name"] for member in first})
    print(f"\nevaluation at {len(default_lengths(config))} lengths (untrained, compile included): "
          f"one member {alone:.1f} s" + ("" if len(first) == 1 else
                                         f"; the report's {len(programs):,} programs, the "
                                         f"first of {len(first)} runs ({tasks_in_first} tasks) "
                                         f"{together:.1f} s"))
    # One program per run is evaluated run by run; a sweep's report evaluates its runs in
    # programs of grid points that share a model, however their training was grouped.
    evaluations = (plan.runs * alone, len(programs) * together, len(programs) * together)
    print("\nprojected for the whole sweep, hours on this device (training and evaluation):")
    print("| grouping | programs | training | evaluation | total |")
    print("|---|---:|---:|---:|---:|")
    for (label, programs, count, training), evaluation in zip(groupings, evaluations,
                                                               strict=True):
        if training is None:  # its program's step was skipped or not asked for above
            print(f"| {label} | {programs:,} | {missing[count]} | {hours(evaluation)} | - |")
            continue
        print(f"| {label} | {programs:,} | {hours(training)} | {hours(evaluation)} | "
              f"{hours(training + evaluation)} |")
    if every_shape is not None:
        label, programs, training = every_shape
        evaluation = evaluations[1]
        print(f"| {label} | {programs:,} | "
              + (f"{hours(training)} | {hours(evaluation)} | {hours(training + evaluation)} |"
                 if training is not None else f"does not fit | {hours(evaluation)} | - |"))


def training_seconds(plan: SweepPlan, rate: dict[int, float],
                     grouped: int) -> list[tuple[str, int, int, float | None]]:
    """(grouping, programs, members per program, training seconds or None where that count has
    no rate) of the whole sweep: one program per run, one per grid point (``grouped`` members),
    and at the measured member count with the most model-steps/s (``rate``: model-steps/s by
    members per program)."""
    train_steps = int(plan.points[0].members[0].config["train"]["steps"])
    model_steps = plan.runs * train_steps
    best = max(rate, key=rate.get)
    stacked = group_points(plan.points, [p.index for p in plan.points], best)
    return [("one program per run", plan.runs, 1, model_steps / rate[1] if 1 in rate else None),
            ("one per grid point (pe-research sweep)", len(plan.points), grouped,
             model_steps / rate[grouped] if grouped in rate else None),
            (f"--members-per-program {best}", len(stacked), best,
             sum(train_steps * size / nearest_rate(rate, size)
                 for size in (sum(len(plan.points[i].members) for i in group)
                              for group in stacked)))]


def nearest_rate(rate: dict[int, float], members: int) -> float:
    """The model-steps/s measured at the member count nearest ``members`` (by ratio)."""
    return rate[min(rate, key=lambda m: abs(math.log(m / members)))]

if __name__ == "__main__":
    run(main)
