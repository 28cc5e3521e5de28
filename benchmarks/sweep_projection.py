"""A sweep's training time projected from the step shapes of every one of its programs.

A stacked program compiles one step per batch shape and pays, at each step, for the shape its
members' batches are padded to (the widest member's widths; with ``data.length_stream=shared``
every member's length is the step's). So its cost is a mix over shapes, and the mix differs
between programs (which tasks they hold, how many members draw lengths). Here each program's mix
is counted from its members' batch widths at evenly spaced steps (``data.train_widths``: lengths
drawn as training draws them, no example made); a step class is a model (``program_key``), a
member count and a shape. Timing every class can take many compiles on a GPU, so the heaviest
are timed, up to a share of the sweep's steps (``--coverage``), together with each model's
widest shape; a class not timed takes the time of the narrowest timed class of its model and
member count that holds its shape (an upper bound for it). Each shape a program draws costs a
compile, and the evaluations during training (``train.eval_every``) are timed through the
trainer's own member evaluators, each model's first program for every program of the model.
``benchmarks/sweep_throughput.py --every-shape`` prints all of it (``every_shape_seconds``).
"""

from __future__ import annotations

import argparse
import collections
import copy
import dataclasses
import math
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import jax
from step_timing import step_seconds

from pe_research import data
from pe_research.config import from_mapping
from pe_research.config.stacking import program_key
from pe_research.runtime import data_mesh, ensemble_mesh, replicated
from pe_research.sweeps.grouping import check_members_per_program, group_points, members_cap
from pe_research.sweeps.spec import SweepPlan
from pe_research.tasks import get_task
from pe_research.training.ensemble import member_evaluators, stacked_steps

Widths = tuple[int, int, int]  # (source, target, joint) widths of a stacked batch


@dataclasses.dataclass(frozen=True)
class StepClass:
    """What a stacked step's time depends on: the program's model, its members, its shape."""

    key: str  # program_key of the members' configs
    members: int
    widths: Widths


@dataclasses.dataclass
class Program:
    """One program of the sweep as it would be grouped: its members' configs (nested dicts) and
    the share of its steps at each stacked shape, with the steps sampled there."""

    configs: list[dict]
    shares: dict[Widths, float]
    steps_at: dict[Widths, list[int]]

    @property
    def key(self) -> str:
        return program_key(self.configs[0])

    def step_class(self, widths: Widths) -> StepClass:
        return StepClass(self.key, len(self.configs), widths)


def sampled_steps(train_steps: int, samples: int) -> list[int]:
    """``samples`` steps evenly spaced over ``[0, train_steps)`` (all of them when fewer)."""
    if train_steps <= samples:
        return list(range(train_steps))
    return sorted({i * train_steps // samples for i in range(samples)})


def stacked_widths(tasks: Sequence[Any], configs: Sequence[Mapping[str, Any]],
                   step: int) -> Widths:
    """The shape the members' batches of ``step`` stack to: the widest member's widths."""
    widths = [data.train_widths(task, config["data"], int(config["seed"]), step)
              for task, config in zip(tasks, configs, strict=True)]
    return tuple(max(member[side] for member in widths) for side in range(3))


def program_shapes(configs: Sequence[Mapping[str, Any]], samples: int) -> Program:
    """The program of members ``configs``, its shapes counted at ``samples`` evenly spaced steps
    of its training."""
    tasks = [get_task(config["task"], config["data"]) for config in configs]
    steps_at: dict[Widths, list[int]] = collections.defaultdict(list)
    steps = sampled_steps(int(configs[0]["train"]["steps"]), samples)
    for step in steps:
        steps_at[stacked_widths(tasks, configs, step)].append(step)
    return Program(list(configs), {w: len(s) / len(steps) for w, s in steps_at.items()},
                   dict(steps_at))


def sweep_programs(plan: SweepPlan, cap: int, samples: int) -> list[Program]:
    """The sweep's programs as ``pe-research sweep`` groups them at ``cap`` members per program
    (0: one per grid point), each with its shapes (``program_shapes``)."""
    groups = group_points(plan.points, [point.index for point in plan.points], cap)
    return [program_shapes([member.config for index in group
                            for member in plan.points[index].members], samples)
            for group in groups]


def class_weights(programs: Sequence[Program]) -> dict[StepClass, float]:
    """Each step class's share of all the sweep's program-steps (they sum to 1)."""
    weights: dict[StepClass, float] = collections.defaultdict(float)
    for program in programs:
        for widths, share in program.shares.items():
            weights[program.step_class(widths)] += share * int(program.configs[0]["train"]["steps"])
    total = sum(weights.values())
    return {step_class: weight / total for step_class, weight in weights.items()}


def row_tokens(widths: Widths, architecture: str) -> int:
    """The tokens a member's batch row computes over at ``widths``: the joint width for a
    single-stack model (its packed sequence), source plus target for the encoder-decoder."""
    return widths[0] + widths[1] if architecture == "encoder_decoder" else widths[2]


def padded_tokens(programs: Sequence[Program]) -> float:
    """The tokens of a member's batch row (``row_tokens``), averaged over every member-step of
    the sweep: what its training pays for per example, padding included."""
    tokens = member_steps = 0.0
    for program in programs:
        weight = len(program.configs) * int(program.configs[0]["train"]["steps"])
        architecture = program.configs[0]["model"]["architecture"]
        tokens += weight * sum(share * row_tokens(widths, architecture)
                               for widths, share in program.shares.items())
        member_steps += weight
    return tokens / member_steps


def holds(outer: Widths, inner: Widths) -> bool:
    """Whether a batch of shape ``outer`` holds one of shape ``inner``."""
    return all(o >= i for o, i in zip(outer, inner, strict=True))


def chosen_classes(weights: Mapping[StepClass, float], coverage: float) -> list[StepClass]:
    """The classes to time: for each model and member count, the shape that holds all of its
    shapes; then the heaviest others until the chosen ones cover ``coverage`` of the steps."""
    covers = {}
    for step_class in weights:
        group = (step_class.key, step_class.members)
        widths = covers.get(group, step_class.widths)
        covers[group] = tuple(max(pair) for pair in zip(widths, step_class.widths, strict=True))
    chosen = [StepClass(key, members, widths) for (key, members), widths in covers.items()]
    covered = sum(weights.get(step_class, 0.0) for step_class in chosen)
    for step_class in sorted(weights, key=lambda c: -weights[c]):
        if covered >= coverage:
            break
        if step_class not in chosen:
            chosen.append(step_class)
            covered += weights[step_class]
    return chosen


def timed_as(step_class: StepClass, timed: Sequence[StepClass]) -> StepClass:
    """The timed class whose time ``step_class`` takes: itself, else the narrowest timed class
    of its model and member count that holds its shape."""
    if step_class in timed:
        return step_class
    holding = [other for other in timed if (other.key, other.members) ==
               (step_class.key, step_class.members) and holds(other.widths, step_class.widths)]
    return min(holding, key=lambda other: math.prod(other.widths))


def timing_program(step_class: StepClass, programs: Sequence[Program]) -> tuple[Program, list[int]]:
    """A program with steps of ``step_class`` (or, for a covering shape no program draws, with
    the widest steps of its model) and those steps: what the class is timed on."""
    candidates = [p for p in programs if (p.key, len(p.configs)) ==
                  (step_class.key, step_class.members)]
    for program in candidates:
        if step_class.widths in program.steps_at:
            return program, program.steps_at[step_class.widths]
    program = max(candidates, key=lambda p: max(map(math.prod, p.steps_at)))
    widest = max(program.steps_at, key=math.prod)
    return program, program.steps_at[widest]


def projected_training(programs: Sequence[Program], loop_s: Mapping[StepClass, float],
                       compile_s: Mapping[StepClass, float]) -> tuple[float, float]:
    """(training seconds, compile seconds) of every program: its steps at each shape times the
    loop's seconds per step of the class it is timed as, and one compile per shape it draws."""
    timed = list(loop_s)
    training = compiling = 0.0
    for program in programs:
        train_steps = int(program.configs[0]["train"]["steps"])
        for widths, share in program.shares.items():
            step_class = timed_as(program.step_class(widths), timed)
            training += train_steps * share * loop_s[step_class]
            compiling += compile_s[step_class]
    return training, compiling


def hours(seconds: float) -> str:
    """Seconds as hours, three significant digits (a tiny sweep's are fractions of one)."""
    return f"{seconds / 3600:.3g}"


def every_shape_seconds(plan: SweepPlan, args: argparse.Namespace,
                        ) -> tuple[str, int, float | None]:
    """(grouping, programs, training seconds: steps, each shape's compile and the evaluations
    during training; None when a timed shape does not fit or with ``--shapes-only``) of the sweep
    grouped as it groups its runs on this device, each program at the step shapes it draws;
    prints the classes, what was timed and the projection."""
    setting = check_members_per_program(args.members_per_program or plan.members_per_program)
    cap = members_cap(setting, "local", {})
    programs = sweep_programs(plan, cap, args.shape_samples)
    weights = class_weights(programs)
    timed = chosen_classes(weights, args.coverage)
    models = list(dict.fromkeys(step_class.key for step_class in weights))
    first_point = {}  # a model's name: the first grid point that trains it
    for point in plan.points:
        first_point.setdefault(program_key(point.members[0].config), point.name)
    label = ("one per grid point" if cap == 0 else f"up to {cap} members per program") + \
        ", every program's own shapes"
    covered = sum(weights.get(step_class, 0.0) for step_class in timed)
    print(f"\nevery program's step shapes ({label}): {len(programs):,} programs, "
          f"{len(weights)} step classes (model x members x shape) over {args.shape_samples} "
          f"sampled steps each; a member's row pays {padded_tokens(programs):.1f} tokens a step "
          "on average (its joint width for a single-stack model, source + target otherwise), "
          "padding included; "
          + ("shares of the steps only:" if args.shapes_only else
             f"{len(timed)} timed, {covered:.1%} of the steps;") + " models:")
    for number, key in enumerate(models, 1):
        print(f"  model {number}: as grid point {first_point[key]}")
    if args.shapes_only:
        print("| model | members | source x target x joint width | share of steps |")
        print("|---:|---:|---|---:|")
        for step_class in sorted(weights, key=lambda c: -weights[c]):
            print(f"| {models.index(step_class.key) + 1} | {step_class.members} | "
                  f"{' x '.join(map(str, step_class.widths))} | "
                  f"{weights[step_class]:.1%} |")
        return label, len(programs), None
    print("| model | members | source x target x joint width | share of steps | loop ms/step "
          "| compile (s) | step memory (GB) |")
    print("|---:|---:|---|---:|---:|---:|---:|")
    loop_s: dict[StepClass, float] = {}
    compile_s: dict[StepClass, float] = {}
    for step_class in timed:
        program, steps = timing_program(step_class, programs)
        configs = [from_mapping(copy.deepcopy(c)) for c in program.configs]
        row = (f"| {models.index(step_class.key) + 1} | {step_class.members} | "
               f"{' x '.join(map(str, step_class.widths))} | "
               f"{weights.get(step_class, 0.0):.1%} |")
        try:
            compiled, _, loop, needed = step_seconds(configs, args.steps, steps,
                                                     step_class.widths)
        except MemoryError as error:
            print(f"{row} {error} | | |", flush=True)
            return label, len(programs), None
        loop_s[step_class], compile_s[step_class] = loop, compiled
        print(f"{row} {loop * 1e3:.2f} | {compiled:.1f} | "
              f"{'-' if needed is None else f'{needed:.3g}'} |", flush=True)
    training, compiling = projected_training(programs, loop_s, compile_s)
    untimed = [c for c in weights if c not in loop_s]
    print(f"projected training, every program at its own shapes: {hours(training)} h of steps "
          f"+ {hours(compiling)} h of compiles (one per shape a program draws)"
          + (f"; {len(untimed)} untimed classes ({sum(weights[c] for c in untimed):.1%} of the "
             "steps) at the narrowest timed shape that holds them" if untimed else ""),
          flush=True)
    evaluating = in_training_evaluation(programs, models)
    return label, len(programs), training + compiling + evaluating


def in_training_evaluation(programs: Sequence[Any], models: Sequence[str]) -> float:
    """Seconds of every program's evaluations during training (``train.eval_every``): each
    model's first program timed, every program of that model at its cost per member, one
    compile per program; prints what it measured (models numbered as in ``models``)."""
    per_run = evaluations_per_run(programs[0].configs[0]["train"])
    if per_run == 0:
        print("evaluation during training: none (train.eval_every = 0)")
        return 0.0
    first: dict[str, Any] = {}
    for program in programs:
        first.setdefault(program.key, program)
    cost = {}  # model: (first pass seconds, seconds per member after)
    for key, program in first.items():
        first_s, again_s = training_eval_seconds(
            [from_mapping(copy.deepcopy(c)) for c in program.configs])
        cost[key] = (first_s, again_s / len(program.configs))
        print(f"evaluation during training ({per_run} a run, member by member as the loop runs "
              f"it), model {models.index(key) + 1}'s first program of "
              f"{len(program.configs)} members: {first_s:.2f} s the first time (compiles), "
              f"{again_s:.2f} s after", flush=True)
    total = sum(evaluations_per_run(p.configs[0]["train"]) * len(p.configs) * cost[p.key][1]
                + cost[p.key][0] - cost[p.key][1] * len(first[p.key].configs)
                for p in programs)
    print(f"evaluation during training, every program at its model's cost a member: "
          f"{hours(total)} h", flush=True)
    return total


def training_eval_seconds(configs: Sequence[Any]) -> tuple[float, float]:
    """(first, second) wall seconds of one evaluation during training of the untrained members
    ``configs`` of one program, member by member as the training loop runs it (each member's
    ``PeriodicEvaluator``; the first pass compiles), their eval sets made before either."""
    tasks = [get_task(c.task.to_dict(), c.data.to_dict()) for c in configs]
    program = stacked_steps(configs, [task.vocabulary.size for task in tasks],
                            ensemble_mesh(len(configs)))
    eval_mesh = data_mesh(jax.local_devices())
    params = [jax.device_put(own, replicated(eval_mesh)) for _, own, _ in program.split]
    with tempfile.TemporaryDirectory(prefix="sweep_projection_") as root:
        evaluators = member_evaluators(program, configs, tasks, eval_mesh,
                                       [Path(root) / f"member_{k}" for k in range(len(configs))])
        passes = []
        for _ in range(2):
            start = time.perf_counter()
            for evaluator, member_params in zip(evaluators, params, strict=True):
                evaluator(member_params)
            passes.append(time.perf_counter() - start)
    return passes[0], passes[1]


def evaluations_per_run(train_cfg: Any) -> int:
    """Evaluations during one run's training: every ``eval_every`` steps and at its end."""
    total, every = int(train_cfg["steps"]), int(train_cfg["eval_every"])
    return 0 if every <= 0 else total // every + (1 if total % every else 0)
