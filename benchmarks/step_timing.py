"""What the benchmark scripts share: compiling and timing a train step, device peaks, memory,
and ending on bad input with one line."""

from __future__ import annotations

import copy
import dataclasses
import functools
import math
import multiprocessing
import re
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp

from pe_research import data, runtime
from pe_research.config.validate import steps_per_call
from pe_research.core.device_memory import device_memory_bytes
from pe_research.core.errors import UsageError
from pe_research.model.padded_vocab import pad_to
from pe_research.runtime import data_mesh, ensemble_mesh, member_batch_sharded, member_sharded
from pe_research.tasks import get_task
from pe_research.training.ensemble import stack, stacked_steps
from pe_research.training.program_memory import compiled_bytes
from pe_research.training.step import initial_train_state

# Dense bf16 peak FLOP/s of known accelerators (for MFU); CPUs report FLOP/s only.
PEAK_FLOPS = {"H100": 989e12, "H200": 989e12, "A100": 312e12}


def run(main: Callable[[], None]) -> None:
    """Run a benchmark's ``main`` after ``runtime.setup()`` (no compilation cache: compile
    times are measured); a bad config or argument ends it with one line and exit 2."""
    runtime.setup(compilation_cache=False)
    try:
        main()
    except UsageError as error:  # ConfigError is one: it names the key and what would work
        print(f"error: {error}", file=sys.stderr)
        sys.exit(2)


def peak_flops(device: jax.Device) -> float | None:
    """The device's dense bf16 peak from ``PEAK_FLOPS``, or None when unknown (CPUs)."""
    kind = getattr(device, "device_kind", "")
    return next((peak for name, peak in PEAK_FLOPS.items() if name in kind), None)


def program_flops(lowered: Any) -> float | None:
    """FLOPs of one call from XLA's cost analysis of the lowered, not yet optimised program, or,
    where the backend has none (GPU plugins), of its matrix products alone (``matmul_flops``).

    Not the compiled program's analysis: after GPU compilation matrix products are library calls
    that it does not count (it gave a tenth of the FLOPs on an H200). A loop's body is counted
    once, so a K-step program reports one step.
    """
    cost = lowered.cost_analysis()
    cost = cost[0] if isinstance(cost, list | tuple) else cost
    if cost and "flops" in cost:
        return float(cost["flops"])
    return matmul_flops(lowered.as_text()) or None


_NAME = r'@("[^"]+"|[\w.$]+)'  # a function's name, quoted when it is no identifier
_FUNCTION = re.compile(r"func\.func \w+ " + _NAME)
_CALL = re.compile(r"\bcall " + _NAME)
_DOT = re.compile(r"stablehlo\.dot_general .*?contracting_dims = \[([\d, ]*)\] x .*?"
                  r": \(tensor<((?:\d+x)*)\w+>.*?-> tensor<((?:\d+x)*)\w+>")


def matmul_flops(stablehlo: str) -> float:
    """2 x output size x contracted size, summed over every ``dot_general`` of a StableHLO
    module's text, each function's as often as it is called from ``main`` (loop bodies once)."""
    own: dict[str, float] = {}
    calls: dict[str, list[str]] = {}
    name = ""
    for line in stablehlo.splitlines():
        if function := _FUNCTION.search(line):
            name = function.group(1)
            own[name], calls[name] = 0.0, []
        elif dot := _DOT.search(line):
            lhs = [int(d) for d in dot.group(2).split("x") if d]
            out = [int(d) for d in dot.group(3).split("x") if d]
            contracted = [lhs[int(i)] for i in dot.group(1).split(",") if i.strip()]
            own[name] += 2.0 * math.prod(out) * math.prod(contracted)
        calls.setdefault(name, []).extend(_CALL.findall(line))

    @functools.cache
    def total(function: str) -> float:
        return own.get(function, 0.0) + sum(total(callee) for callee in calls.get(function, []))

    return total("main")


def memory_gb(device: jax.Device) -> float | None:
    """Peak device memory in use so far (GiB), where the backend reports it."""
    stats = device.memory_stats() if hasattr(device, "memory_stats") else None
    return stats["peak_bytes_in_use"] / 2**30 if stats and "peak_bytes_in_use" in stats else None


def step_memory_gb(compiled: Any) -> float | None:
    """The compiled step's memory in GiB, as a program's check reads it (``compiled_bytes``)."""
    size = compiled_bytes(compiled)
    return None if size is None else size / 2**30


def check_fits(compiled: Any) -> float | None:
    """The compiled step's memory (GiB, ``step_memory_gb``); MemoryError, worded as a table's
    row (``skipped: ...``), when it needs more than the device has: running it would fail, or
    swap for hours on a host."""
    needed, limit = step_memory_gb(compiled), device_memory_bytes(jax.devices()[0]) / 2**30
    if needed and needed > limit:
        raise MemoryError(f"skipped: its step needs {needed:.1f} GB, the device has {limit:.1f}")
    return needed


def median_seconds(function: Callable[[], object], repeats: int = 10, blocks: int = 5) -> float:
    """Median over ``blocks`` of the mean wall time of ``repeats`` calls (after 3 warm-ups)."""
    for _ in range(3):
        jax.block_until_ready(function())
    times = []
    for _ in range(blocks):
        start = time.perf_counter()
        for _ in range(repeats):
            out = function()
        jax.block_until_ready(out)
        times.append((time.perf_counter() - start) / repeats)
    return statistics.median(times)


def timed(call: Callable, state: Any, inputs: Sequence[Any], steps: int, blocks: int = 3,
          per_call: int = 1) -> tuple[float, float]:
    """(compile + first call seconds, median seconds per step over ``blocks`` blocks of about
    ``steps`` steps); ``call(state, inputs[i], step) -> (state, metrics)`` runs ``per_call``
    steps on one entry of ``inputs`` (a list of ``per_call`` batches), the state being the
    leaves of (params, opt_state) as the trainer's ``CompiledStep`` holds them."""
    start = time.perf_counter()
    state, metrics = call(state, inputs[0], 0)
    jax.block_until_ready(metrics)
    compile_s = time.perf_counter() - start
    for i in range(1, 1 + max(1, 2 // per_call)):  # warm-up: 2 steps, or one longer call
        state, metrics = call(state, inputs[i % len(inputs)], i)
    jax.block_until_ready(metrics)
    calls = max(1, steps // per_call)
    per_step = []
    for block in range(blocks):
        start = time.perf_counter()
        for i in range(calls):
            state, metrics = call(state, inputs[(block * calls + i) % len(inputs)], i)
        jax.block_until_ready(metrics)
        per_step.append((time.perf_counter() - start) / (calls * per_call))
    return compile_s, statistics.median(per_step)


def timed_loop(call: Callable, state: Any, inputs: Sequence[Any], draw: Callable[[int], Any],
               steps: int, blocks: int = 3, per_call: int = 1) -> float:
    """Median seconds per step over ``blocks`` blocks of about ``steps`` steps, run as the
    training loop runs them: each call's ``per_call`` batches drawn on the host (``draw(step)``)
    before it is dispatched, the previous call's metrics read after, so the host's drawing
    overlaps the device's step. The drawn batches are not fed: each call runs on ``inputs[i]``,
    the shape its program was compiled for (``timed``'s arguments)."""
    def run_calls(state: Any, first: int, calls: int) -> Any:
        pending = None
        for i in range(first, first + calls):
            for step in range(i * per_call, (i + 1) * per_call):
                draw(step)
            state, metrics = call(state, inputs[i % len(inputs)], i)
            if pending is not None:
                jax.device_get(pending)
            pending = metrics
        jax.device_get(pending)
        return state

    state = run_calls(state, 0, max(1, 2 // per_call))  # warm-up, as ``timed``'s
    calls = max(1, steps // per_call)
    per_step = []
    for block in range(blocks):
        start = time.perf_counter()
        state = run_calls(state, block * calls, calls)
        per_step.append((time.perf_counter() - start) / (calls * per_call))
    return statistics.median(per_step)


def as_called(step: Any, program: Callable | None = None) -> Callable:
    """``(state, batches, first_step) -> (state, metrics)``: ``step``'s program (or a compiled
    form of it) called as the ``CompiledStep`` calls it, with the run's keys as arguments."""
    program = program or step.program
    return lambda state, batches, first_step: program(state, list(batches), first_step,
                                                      *step.trailing)


def groups(batches: Sequence[Any], per_call: int) -> list[list[Any]]:
    """What each call takes: consecutive lists of ``per_call`` batches."""
    return [list(batches[i:i + per_call]) for i in range(0, len(batches) - per_call + 1,
                                                         per_call)]


def widest_calls(inputs: Sequence[list[dict]]) -> list[list[dict]]:
    """The calls of ``inputs`` whose batches have the widest shapes among them.

    Training compiles one program per length bucket; timing one (a GPU compile takes seconds)
    at the widest is what a program of many members nearly always pads to, and bounds a single
    run's step, whose batches are often narrower, from above."""
    def shapes(call: list[dict]) -> tuple:
        return tuple(leaf.shape for leaf in jax.tree.leaves(call))

    widest = shapes(max(inputs, key=lambda call: sum(leaf.size
                                                     for leaf in jax.tree.leaves(call))))
    return [call for call in inputs if shapes(call) == widest]


@dataclasses.dataclass
class TimedStep:
    """One config's train step (``per_call`` steps per call), compiled ahead of time as the
    trainer runs it, with what it runs on."""

    steps: Any  # the ``make_steps`` bundle (its ``train`` is the ``CompiledStep``)
    compiled: Callable  # (state, inputs[i], step) -> (state, metrics)
    executable: Any  # the compiled program (memory and cost analysis, HLO text)
    state: list  # the leaves of (params, opt_state); a call donates them
    batches: list[dict]
    compile_s: float
    per_call: int = 1
    flops: float | None = None  # one step's, from the lowered program (``program_flops``)

    @property
    def inputs(self) -> list[list[dict]]:
        """What each call of ``compiled`` takes (``groups`` of ``batches``)."""
        return groups(self.batches, self.per_call)


def seed_members(config: Any, members: int) -> list[Any]:
    """``members`` copies of ``config`` with seeds 0..M-1."""
    configs = []
    for seed in range(members):
        member = copy.deepcopy(config)
        member.seed = seed
        configs.append(member)
    return configs


def ensemble_train_state(config, members: int, batch_count: int, configs=None,
                         batch_steps: Sequence[int] | None = None,
                         widths: tuple[int, int, int] | None = None):
    """``members`` copies of ``config`` with seeds 0..M-1 (or the members ``configs``, e.g. of
    several tasks) in one program, as ``pe-research sweep`` trains them: (ensemble steps holding
    the ``[M, ...]`` state, member-stacked batches, each member's own, sharded over the members'
    mesh). The program is training's own (``stacked_steps``): members of narrower vocabularies
    padded to the widest, each member's settings, positions, dropout rate and wavelength base
    its own. The batches are those of steps ``batch_steps`` (default: the first
    ``batch_count``), padded to ``widths`` (source, target, joint) where given."""
    if configs is None:
        configs = seed_members(config, members)
    tasks = [get_task(c.task.to_dict(), c.data.to_dict()) for c in configs]
    vocabs = [task.vocabulary.size for task in tasks]
    mesh = ensemble_mesh(len(configs))
    program = stacked_steps(configs, vocabs, mesh)
    steps, split, wide = program.steps, program.split, program.wide
    member_params = [pad_to(params, split[wide][1]) for _, params, _ in split]
    params = jax.device_put(stack(member_params), member_sharded(mesh))
    opt_state = jax.device_put(stack([steps.optimizer.init(p) for p in member_params]),
                               member_sharded(mesh))
    steps.train.hold(params, opt_state)

    def member_batch(task: Any, config: Any, step: int) -> dict:
        batch = data.train_batch(task, config.data, config.seed, step)
        return batch if widths is None else data.pad_to(batch, *widths)

    batches = [jax.device_put(data.stack_batches(
        [member_batch(task, c, i) for task, c in zip(tasks, configs, strict=True)]),
        member_batch_sharded(mesh))
        for i in (range(batch_count) if batch_steps is None else batch_steps)]
    return steps, batches


def train_state(config, batch_count: int):
    """A single run's steps (holding its fresh state) and its first batches."""
    task = get_task(config.task.to_dict(), config.data.to_dict())
    mesh = data_mesh()
    steps, params, opt_state = initial_train_state(config, task.vocabulary.size, mesh)
    steps.train.hold(params, opt_state)
    batches = [data.global_batch(data.train_batch(task, config.data, config.seed, i), mesh)
               for i in range(batch_count)]
    return steps, batches


def lower_train_step(config, batch_count: int = 4, per_call: int = 1, members: int = 0):
    """``config``'s train step (``per_call`` steps per call; with ``members``, the ensemble
    step of that many seeds) lowered for its first batches: (steps, lowered program, batches,
    seconds the lowering took)."""
    batch_count = max(batch_count, 2 * per_call)
    steps, batches = (ensemble_train_state(config, members, batch_count) if members
                      else train_state(config, batch_count))
    batches = [batch for call in widest_calls(groups(batches, per_call)) for batch in call]
    start = time.perf_counter()
    lowered = steps.train.lower(batches[:per_call])
    return steps, lowered, batches, time.perf_counter() - start


def compile_train_step(config, batch_count: int = 4, per_call: int = 1,
                       members: int = 0) -> TimedStep:
    """Build ``config``'s model and optimizer and compile its train step (timed): ``per_call``
    steps per call, as ``train.steps_per_call`` runs them; with ``members``, the ensemble step
    of that many seeds."""
    steps, lowered, batches, lowering_s = lower_train_step(config, batch_count, per_call,
                                                           members)
    start = time.perf_counter()
    executable = lowered.compile()
    return TimedStep(steps, as_called(steps.train, executable), executable, steps.train.leaves,
                     batches, time.perf_counter() - start + lowering_s, per_call,
                     program_flops(lowered))


def step_seconds(configs: Sequence[Any], steps: int, batch_steps: Sequence[int] | None = None,
                 widths: tuple[int, int, int] | None = None,
                 ) -> tuple[float, float, float, float | None]:
    """(compile seconds, median seconds per step, the same as the training loop runs it with
    each step's batches drawn, the compiled step's memory in GiB) of the members ``configs``
    stacked, at the widest shape their batches are padded to (or on the batches of steps
    ``batch_steps`` padded to ``widths``); a MemoryError (``skipped: ...``) before it runs when
    the step needs more than the device has."""
    per_call = min(steps_per_call(c, get_task(c.task.to_dict(), c.data.to_dict()))
                   for c in configs)
    count = max(8, 2 * per_call)
    if batch_steps is not None:  # as many as the timing cycles through, repeated where fewer
        batch_steps = [batch_steps[i % len(batch_steps)] for i in range(count)]
    state, batches = ensemble_train_state(None, len(configs), count, configs=configs,
                                          batch_steps=batch_steps, widths=widths)
    inputs = widest_calls(groups(batches, per_call))
    start = time.perf_counter()
    executable = state.train.lower(inputs[0]).compile()
    compile_s = time.perf_counter() - start
    needed = check_fits(executable)
    leaves = state.train.leaves
    fresh = jax.tree.map(jnp.copy, leaves)  # a call donates its state; the loop's own
    call = as_called(state.train, executable)
    first_s, step_s = timed(call, leaves, inputs, steps, per_call=per_call)
    draw = batch_drawer(configs, member_batch_sharded(ensemble_mesh(len(configs))))
    loop_s = timed_loop(call, fresh, inputs, draw, steps, per_call=per_call)
    return compile_s + first_s, step_s, loop_s, needed


def draw_seconds(draw: Callable[[int], Any], steps: int, blocks: int = 3) -> float:
    """Host seconds per step of ``draw(step)`` (a program's batches, ``batch_drawer``): the
    fastest of ``blocks`` blocks of ``steps`` steps, after one draw."""
    jax.block_until_ready(draw(0))
    seconds = []
    for block in range(blocks):
        start = time.perf_counter()
        for step in range(steps):
            jax.block_until_ready(draw(1 + block * steps + step))
        seconds.append((time.perf_counter() - start) / steps)
    return min(seconds)


def batch_drawer(configs: Sequence[Any], sharding: Any = None) -> Callable[[int], Any]:
    """``draw(step)``: the members' training batches of ``step`` stacked ``[M, B, ...]``, as the
    ensemble trainer draws them (put on the device with ``sharding``, where given)."""
    tasks = [get_task(c.task.to_dict(), c.data.to_dict()) for c in configs]
    data_blocks = [(c.data.to_dict(), c.seed) for c in configs]

    def draw(step: int) -> Any:
        stacked = data.program_batch(tasks, data_blocks, step)
        return stacked if sharding is None else jax.device_put(stacked, sharding)

    return draw


# A drawing process's members: their tasks and ``(config.data as a dict, seed)``.
_WORKER_MEMBERS: tuple[list[Any], list[tuple[dict, int]]] = ([], [])


def _start_worker(members: list[tuple[dict, dict, int]]) -> None:
    _WORKER_MEMBERS[0][:] = [get_task(task, data_block) for task, data_block, _ in members]
    _WORKER_MEMBERS[1][:] = [(data_block, seed) for _, data_block, seed in members]


def _worker_batch(step: int) -> dict:
    return data.program_batch(*_WORKER_MEMBERS, step)


class WorkerDrawer:
    """``draw(step)`` as ``batch_drawer``'s, each step's batches drawn ahead by one of
    ``workers`` spawned processes (``2 x workers`` steps ahead): what drawing a program's
    batches beside its training loop would give. ``close()`` ends the processes."""

    def __init__(self, configs: Sequence[Any], workers: int, sharding: Any = None):
        members = [(c.task.to_dict(), c.data.to_dict(), int(c.seed)) for c in configs]
        self.pool = multiprocessing.get_context("spawn").Pool(
            workers, initializer=_start_worker, initargs=(members,))
        self.ahead, self.sharding, self.pending = 2 * workers, sharding, {}

    def __call__(self, step: int) -> Any:
        for ahead in range(step, step + self.ahead):
            if ahead not in self.pending:
                self.pending[ahead] = self.pool.apply_async(_worker_batch, (ahead,))
        stacked = self.pending.pop(step).get()
        return stacked if self.sharding is None else jax.device_put(stacked, self.sharding)

    def close(self) -> None:
        self.pool.terminate()
        self.pool.join()
