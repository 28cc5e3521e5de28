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
member count that holds its shape (an upper bound for it).
"""

from __future__ import annotations

import collections
import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

from pe_research import data
from pe_research.config.stacking import program_key
from pe_research.sweeps.grouping import group_points
from pe_research.sweeps.spec import SweepPlan
from pe_research.tasks import get_task

Widths = tuple[int, int]  # (source width, target width) of a stacked batch


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
    return max(source for source, _ in widths), max(target for _, target in widths)


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


def padded_tokens(programs: Sequence[Program]) -> float:
    """Source plus target width of a member's batch row, averaged over every member-step of the
    sweep: what its training pays for per example, padding included."""
    tokens = member_steps = 0.0
    for program in programs:
        weight = len(program.configs) * int(program.configs[0]["train"]["steps"])
        tokens += weight * sum(share * sum(widths) for widths, share in program.shares.items())
        member_steps += weight
    return tokens / member_steps


def holds(outer: Widths, inner: Widths) -> bool:
    """Whether a batch of shape ``outer`` holds one of shape ``inner``."""
    return outer[0] >= inner[0] and outer[1] >= inner[1]


def chosen_classes(weights: Mapping[StepClass, float], coverage: float) -> list[StepClass]:
    """The classes to time: for each model and member count, the shape that holds all of its
    shapes; then the heaviest others until the chosen ones cover ``coverage`` of the steps."""
    covers = {}
    for step_class in weights:
        group = (step_class.key, step_class.members)
        widths = covers.get(group, step_class.widths)
        covers[group] = (max(widths[0], step_class.widths[0]),
                         max(widths[1], step_class.widths[1]))
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
    return min(holding, key=lambda other: other.widths[0] * other.widths[1])


def timing_program(step_class: StepClass, programs: Sequence[Program]) -> tuple[Program, list[int]]:
    """A program with steps of ``step_class`` (or, for a covering shape no program draws, with
    the widest steps of its model) and those steps: what the class is timed on."""
    candidates = [p for p in programs if (p.key, len(p.configs)) ==
                  (step_class.key, step_class.members)]
    for program in candidates:
        if step_class.widths in program.steps_at:
            return program, program.steps_at[step_class.widths]
    program = max(candidates, key=lambda p: max(w[0] * w[1] for w in p.steps_at))
    widest = max(program.steps_at, key=lambda w: w[0] * w[1])
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
