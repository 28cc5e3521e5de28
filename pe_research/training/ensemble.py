"""Ensembles: M members in one program, differing in seed, task and scalar settings.

Parameters and optimizer state carry a leading member axis, sharded over the mesh's ``members``
axis; the train step is the single run's step under ``jax.vmap``. Member k draws its own data
stream, initialisation and random keys from its seed, so it trains as ``pe-research train`` with
that seed would, and writes an ordinary run directory: config.json, metrics.jsonl, Orbax
checkpoints and a W&B run, in the format of a single run. With ``length_sampling=per_batch``
each member draws its own length and all are padded to the largest member's bucket (padding is
masked, so a member's numbers do not change; dropout masks do depend on the padded width, so
with dropout a member matches its single run in distribution, not bit for bit), unless
``data.length_stream=shared`` gives every member the same length at each step.

Members may differ in what ``config/stacking.py`` lets them (its docstring names every kind). The
model's scalars are traced settings set on the program's model (``model/member_settings.py``), the
update's are traced scalars of the optimizer, keys that only draw the initial parameters give each
member its own, and each member restores its own source run, or none. Tasks of different
vocabularies share the program of the widest one: each member's state is padded to it and its loss
taken over its own tokens (``model/padded_vocab.py``), so it still trains as its single run does (to
rounding) and saves its own shapes. The program draws every member range's positions from the
member's keys and each member takes those of its own range (``inputs.member_positions``), so members
of other ranges, or on plain positions, train as their single runs too.

A member that diverges is stopped and reported; the others go on. One process only: a grid is
spread over hosts by the sweep's SLURM executor, one ensemble per job.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import ml_collections
from flax import nnx
from jax.sharding import Mesh

from pe_research import data
from pe_research.config import from_mapping, to_dict, validate_config
from pe_research.config.stacking import randomized_range
from pe_research.config.validate import steps_per_call
from pe_research.core.errors import ConfigError
from pe_research.model import build_model, model_line
from pe_research.model.member_settings import members_model_settings
from pe_research.model.padded_vocab import crop_to, pad_to, widest
from pe_research.runs import provenance
from pe_research.runs.checkpoint import abstract_like, run_checkpointer
from pe_research.runs.lock import RunDirLock
from pe_research.runs.restore import run_task
from pe_research.runs.tracking import make_writer
from pe_research.runtime import (
    DATA_AXIS,
    MEMBERS_AXIS,
    check_batch_fits,
    data_mesh,
    ensemble_mesh,
    member_batch_sharded,
    member_sharded,
    replicated,
)
from pe_research.training.loop import (
    config_changes,
    init_source,
    prepare_run_dir,
    start_from_source,
)
from pe_research.training.member_checks import check_members, member_shapes
from pe_research.training.optimizer import OPTIMIZER_SETTINGS, setting_value
from pe_research.training.periodic_eval import PeriodicEvaluator
from pe_research.training.program_memory import (
    budget_bytes,
    check_program_memory,
    widest_batches,
)
from pe_research.training.step import Steps, eval_function, make_steps
from pe_research.training.step_loop import MemberRun, StepLoop, all_finite


@dataclasses.dataclass
class EnsembleResult:
    """How each member ended: its last logged record, or the reason it stopped."""

    run_dirs: list[Path]
    records: list[dict[str, float]]
    diverged: dict[Path, str]
    compilations: int
    steps_per_second: float


def stack(trees: Sequence[Any]) -> Any:
    """Member trees -> one tree whose leaves have a leading member axis."""
    return jax.tree.map(lambda *leaves: jnp.stack(leaves), *trees)


def train_ensemble(configs: Sequence[ml_collections.ConfigDict],
                   run_dirs: Sequence[str | Path]) -> EnsembleResult:
    """Train (or resume) member k of ``configs`` into ``run_dirs[k]``, all in one program."""
    for config in configs:
        validate_config(config)
    check_members(configs)
    if len(configs) != len(run_dirs):
        raise ConfigError("run_dirs", len(run_dirs), f"one run directory per member "
                          f"({len(configs)})")
    if jax.process_count() > 1:
        raise ConfigError("distributed", True, "an ensemble trains in one process; spread a "
                          "sweep over hosts with --executor slurm (one ensemble per job)")
    run_dirs = [Path(d).absolute() for d in run_dirs]
    mesh = ensemble_mesh(len(configs))
    eval_mesh = data_mesh(jax.local_devices())
    check_batch_fits("data.batch_size", configs[0].data.batch_size, mesh)
    check_batch_fits("eval.batch_size", configs[0].eval.batch_size, eval_mesh)
    tasks = [run_task(config, run_dir) for config, run_dir in zip(configs, run_dirs, strict=True)]
    member_shapes(configs, [task.vocabulary.size for task in tasks])
    changes = [config_changes(config, run_dir)
               for config, run_dir in zip(configs, run_dirs, strict=True)]
    sources = [init_source(config, run_dir, task)
               for config, run_dir, task in zip(configs, run_dirs, tasks, strict=True)]
    with contextlib.ExitStack() as stack_:
        for run_dir in run_dirs:
            lock = RunDirLock(run_dir).acquire()
            stack_.callback(lock.release)
        return _train_locked(list(configs), run_dirs, tasks, changes, sources, mesh, eval_mesh,
                             stack_)


def _restore_common_step(checkpointers: Sequence[Any], params: Sequence[Any],
                         opt_state: Sequence[Any]) -> tuple[int, list[dict[str, Any]] | None]:
    """The newest step every member holds, restored for each into its own skeletons ``params[k]``
    and ``opt_state[k]`` (0 and None when there is none).

    A crash between two members' saves can leave one member a step ahead: its newer steps are
    deleted, since resuming from the common step recomputes them bit for bit.
    """
    for checkpointer, member_params, member_opt in zip(checkpointers, params, opt_state,
                                                       strict=True):  # moves unreadable steps aside
        checkpointer.restore_latest_good(params=member_params, opt_state=member_opt,
                                         quarantine=True)
    held = [set(checkpointer.steps()) for checkpointer in checkpointers]
    common = max(set.intersection(*held), default=0)
    for checkpointer, steps in zip(checkpointers, held, strict=True):
        for step in sorted(s for s in steps if s > common):
            checkpointer.manager.delete(step)
    if common == 0:
        return 0, None
    return common, [c.restore(common, params=p, opt_state=o)
                    for c, p, o in zip(checkpointers, params, opt_state, strict=True)]


@dataclasses.dataclass
class StackedProgram:
    """The program of a job's members: its ensemble ``steps``; each member's own model
    ``split`` ``(graphdef, params, rest)`` (fresh parameters from its seed); ``wide``, the index
    of the widest vocabulary's member, whose model (with randomized positions if any member has
    them) the program runs; each member's randomized range; and each member's own model
    settings (``{attribute: scalar}``, the same keys for all; empty when they share them)."""

    steps: Steps
    split: list[tuple[Any, Any, Any]]
    wide: int
    ranges: list[int]
    model_settings: list[dict[str, jax.Array]]


def stacked_steps(configs: Sequence[ml_collections.ConfigDict], vocab_sizes: Sequence[int],
                  mesh: Mesh) -> StackedProgram:
    """The program of ``configs`` as members; what differs between members passes as
    per-member arguments."""
    ranges = [randomized_range(to_dict(config)) for config in configs]
    split = [nnx.split(build_model(config, vocab), nnx.Param, ...)
             for config, vocab in zip(configs, vocab_sizes, strict=True)]
    wide = widest(vocab_sizes)
    # The program's model draws the widest range; each member selects its own draw.
    program = from_mapping(to_dict(configs[wide]))
    program.model.pe.randomize.max_position = max(ranges)
    graphdef, _, rest = nnx.split(build_model(program, vocab_sizes[wide]), nnx.Param, ...)

    def own(values: list[Any]) -> list[Any] | None:
        """Per-member values, or None when every member's is the same."""
        return values if len(set(values)) > 1 else None

    settings = {key: own([setting_value(config.train, key) for config in configs])
                for key in OPTIMIZER_SETTINGS}
    model_settings = members_model_settings(configs)
    steps = make_steps(graphdef, rest, configs[wide].train, mesh,
                       [config.seed for config in configs],
                       {key: values for key, values in settings.items() if values is not None},
                       configs[wide].eval.query_block, ensemble=True,
                       vocab_sizes=own(list(vocab_sizes)),
                       position_ranges=own(ranges),
                       model_settings=model_settings,
                       predict_eos=own([bool(config.train.predict_eos) for config in configs]))
    return StackedProgram(steps, split, wide, ranges, [
        {name: jnp.float32(values[k]) for name, values in model_settings.items()}
        for k in range(len(configs))])


def member_evaluators(program: StackedProgram, configs: Sequence[ml_collections.ConfigDict],
                      tasks: Sequence[Any], eval_mesh: Mesh,
                      run_dirs: Sequence[Path]) -> list[PeriodicEvaluator]:
    """Each member's evaluation during training, on its own frozen eval set and with its own
    key and settings, taking its own params: the program's evaluation where the member's model
    is the program's, else one function per model the members have (so each compiles once)."""
    vocab_sizes = [task.vocabulary.size for task in tasks]
    # What a member's evaluation depends on: its vocabulary, its range, whether it scores the end.
    own_model = [(size, randomized, bool(config.train.predict_eos)) for size, randomized, config
                 in zip(vocab_sizes, program.ranges, configs, strict=True)]
    wide = program.wide
    program_model = (vocab_sizes[wide], max(program.ranges),
                     bool(configs[wide].train.predict_eos))
    functions = {shape: program.steps.evaluate_with_key if shape == program_model
                 else eval_function(program.split[k][0], program.split[k][2], configs[k].train,
                                    configs[k].eval.query_block)
                 for k, shape in enumerate(own_model)}

    def evaluate(k: int) -> Any:
        """Member k's ``(params, batch) -> sums``."""
        function, key = functions[own_model[k]], jax.random.key(configs[k].seed)
        settings = program.model_settings[k] or None
        return lambda params, batch: function(params, batch, key, settings)

    return [PeriodicEvaluator(config, task, eval_mesh, evaluate(k), run_dir)
            for k, (config, task, run_dir) in enumerate(zip(configs, tasks, run_dirs,
                                                            strict=True))]


def _train_locked(configs, run_dirs, tasks, changes, sources, mesh, eval_mesh,
                  cleanup: contextlib.ExitStack) -> EnsembleResult:
    vocab_sizes = [task.vocabulary.size for task in tasks]
    program = stacked_steps(configs, vocab_sizes, mesh)
    steps, split, wide, ranges = program.steps, program.split, program.wide, program.ranges
    on_eval_mesh = replicated(eval_mesh)
    member_params = [jax.device_put(params, on_eval_mesh) for _, params, _ in split]
    member_opt = [steps.optimizer.init(params) for params in member_params]
    stacked = member_sharded(mesh)
    batch_sharding = member_batch_sharded(mesh)
    per_call = min(steps_per_call(config, task) for config, task in zip(configs, tasks,
                                                                          strict=True))

    def stacked_state(params: list[Any], opt: list[Any]) -> tuple[Any, Any]:
        """The members' states padded to the widest vocabulary, stacked on the members' mesh."""
        return (jax.device_put(stack([pad_to(p, params[wide]) for p in params]), stacked),
                jax.device_put(stack([pad_to(o, opt[wide]) for o in opt]), stacked))

    # Before any run directory is written: the fresh state has the restored one's shapes.
    fresh = stacked_state(member_params, member_opt)
    steps.train.hold(*fresh)
    check_program_memory(steps.train, widest_batches(tasks, configs, per_call, batch_sharding),
                         budget_bytes(configs[0].train.memory_budget_gb), len(configs))
    # Each member's own shapes: what it saves and restores, and what evaluates it.
    own = [(abstract_like(p, on_eval_mesh), abstract_like(o, on_eval_mesh))
           for p, o in zip(member_params, member_opt, strict=True)]
    checkpointers = [run_checkpointer(config, run_dir)
                     for config, run_dir in zip(configs, run_dirs, strict=True)]
    for checkpointer in checkpointers:
        cleanup.callback(checkpointer.close)
    start, restored = _restore_common_step(checkpointers, [p for p, _ in own],
                                           [o for _, o in own])
    windows: list[Any] = [None] * len(configs)
    initialised: list[Any] = [None] * len(configs)
    for k, (config, task) in enumerate(zip(configs, tasks, strict=True)):
        if restored is None and config.train.init_from:  # members without one start fresh
            member_params[k], member_opt[k], initialised[k] = start_from_source(
                config, task, sources[k], member_params[k], on_eval_mesh, steps.optimizer)
    if restored is not None:
        member_params = [items["params"] for items in restored]
        member_opt = [items["opt_state"] for items in restored]
        windows = [items["meta"].get("train_window") for items in restored]
        print(f"resuming {len(configs)} members from step {start} "
              f"(of {configs[0].train.steps})", flush=True)
    changed = restored is not None or any(state is not None for state in initialised)
    params, opt_state = stacked_state(member_params, member_opt) if changed else fresh
    del fresh  # a restored program holds one stacked state, not two
    tasks_line = "" if len(set(vocab_sizes)) == 1 else \
        f", {len({t.name for t in tasks})} tasks (vocabularies padded to {max(vocab_sizes)})"
    if len(set(ranges)) > 1:
        tasks_line += ", positions: " + ", ".join(
            f"{ranges.count(r)} " + (f"in [0, {r})" if r else "plain") for r in sorted(set(ranges)))
    print(f"ensemble of {len(configs)} members{tasks_line} on {mesh.shape[MEMBERS_AXIS]} x "
          f"{mesh.shape[DATA_AXIS]} devices (members x data)", flush=True)
    print(model_line(configs[wide], vocab_sizes[wide], member_params[wide]), flush=True)

    writers = []
    for k, (config, run_dir, task) in enumerate(zip(configs, run_dirs, tasks, strict=True)):
        prepare_run_dir(config, run_dir, task, changes[k], start, initialised[k])
        writers.append(make_writer(config.wandb, run_dir,
                                   resume_step=start if restored else None,
                                   hparams={**to_dict(config),
                                            "provenance": provenance.environment()}))
        cleanup.callback(writers[-1].finish)
    evaluators = member_evaluators(program, configs, tasks, eval_mesh, run_dirs)
    members = [MemberRun(config, run_dir, vocab_sizes[k], checkpointers[k], writers[k],
                         evaluators[k], windows[k])
               for k, (config, run_dir) in enumerate(zip(configs, run_dirs, strict=True))]

    data_blocks = [(config.data.to_dict(), config.seed) for config in configs]

    def batch(data_step: int) -> dict[str, jax.Array]:
        return jax.device_put(data.program_batch(tasks, data_blocks, data_step), batch_sharding)

    # One program takes a member's part of every leaf: leaf by leaf, each slice is a dispatch.
    take_member = jax.jit(lambda tree, k: jax.tree.map(lambda leaf: leaf[k], tree))

    def member_state(tree: Any, k: int) -> Any:
        """Member k's params or optimizer state, cut to its own shapes."""
        like = next(skeleton for skeleton in own[k]
                    if jax.tree.structure(skeleton) == jax.tree.structure(tree))
        return jax.device_put(crop_to(take_member(tree, k), like), on_eval_mesh)

    loop = StepLoop(members, steps, batch, member_state=member_state,
                    stacked_finite=jax.jit(jax.vmap(all_finite)), steps_per_call=per_call)
    loop.run(params, opt_state, start)
    return EnsembleResult(run_dirs=list(run_dirs), records=[m.record for m in members],
                          diverged={m.run_dir: m.diverged for m in members if m.diverged},
                          compilations=steps.compilations,
                          steps_per_second=loop.steps_per_second)
