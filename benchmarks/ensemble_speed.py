"""Ensemble speed: M members in one program (vmapped train step) vs the same members one by one.

    python benchmarks/ensemble_speed.py                         # configs/default.py, 1/4/8/16
    python benchmarks/ensemble_speed.py --members 1,8,32 --steps 50
    python benchmarks/ensemble_speed.py --config.model.d_model=32   # any config override
    python benchmarks/ensemble_speed.py --steps-per-call 1             # one step per call
    python benchmarks/ensemble_speed.py --draw-workers 4               # batches drawn ahead too

For each member count M: the train step of ``training/ensemble.py`` over M stacked members,
timed over ``--steps`` steps after warm-up (``block_until_ready``), ``--steps-per-call`` steps
per call (default: what the trainer picks for the config, ``train.steps_per_call``), against M
runs of the single train step one after another (M x the single step's time, measured the same
way). Every member draws its own batch (default length sampling), padded to the widest member's
bucket, exactly as ``pe-research sweep`` trains them; data generation is excluded from the step
(both paths need it) and timed on its own: the host's ms per step to draw, stack and place the
M members' batches; and the loop's ms per step, the step as the trainer runs it, each step's
batches drawn while the device runs the previous one (where the host's batches take longer
than the step, the loop waits on the host); with ``--draw-workers W``, both again with each
step's batches drawn ahead by W spawned processes (``step_timing.WorkerDrawer``). Printed per
M: the step's ms, the ratio to one-by-one training, examples/s per member, compile time, the
host's batches, the loop; on a GPU also FLOPs per step (XLA's cost analysis of the one-step
program), MFU against the device's dense bf16 peak, and peak device memory; then the two
columns with W processes.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
from step_timing import (
    WorkerDrawer,
    as_called,
    batch_drawer,
    draw_seconds,
    ensemble_train_state,
    groups,
    memory_gb,
    peak_flops,
    program_flops,
    run,
    seed_members,
    timed,
    timed_loop,
    train_state,
)

from pe_research.config import collect_overrides, load_config
from pe_research.config.validate import check_steps_per_call, steps_per_call
from pe_research.core.errors import UsageError
from pe_research.runtime import ensemble_mesh, member_batch_sharded
from pe_research.tasks import get_task

REPO = Path(__file__).resolve().parents[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default=str(REPO / "configs" / "default.py"))
    parser.add_argument("--members", default="1,4,8,16", help="member counts, comma-separated")
    parser.add_argument("--steps", type=int, default=20, help="timed steps per block")
    parser.add_argument("--steps-per-call", type=int, default=0,
                        help="train steps per call; 0: what the trainer picks for the config")
    parser.add_argument("--draw-workers", type=int, default=0,
                        help="also the host's batches and the loop with the batches drawn ahead "
                             "by this many processes")
    overrides, rest = collect_overrides(sys.argv[1:])
    args = parser.parse_args(rest)
    config = load_config(args.config, overrides)
    task = get_task(config.task.to_dict(), config.data.to_dict())
    member_counts = [int(m) for m in args.members.split(",") if m]
    if not member_counts or min(member_counts) < 1:
        raise UsageError(f"--members {args.members}: give positive counts, e.g. 1,4,8")
    if args.draw_workers < 0:
        raise UsageError(f"--draw-workers {args.draw_workers}: give 0 (none) or a positive "
                         "count of processes")
    if args.steps_per_call < 0:
        raise UsageError(f"--steps-per-call {args.steps_per_call}: give 0 (the trainer's "
                         "choice) or a positive count")
    config.train.steps_per_call = args.steps_per_call
    per_call = steps_per_call(config, task)
    check_steps_per_call(config, task)
    device = jax.devices()[0]
    print(f"device: {device.device_kind} x{jax.device_count()} ({jax.default_backend()}); "
          f"config {args.config}, batch {config.data.batch_size}, d_model "
          f"{config.model.d_model}, {args.steps} timed steps x 3 blocks, {per_call} per call")

    single, batches = train_state(config, max(8, 2 * per_call))
    single_compile, single_step = timed(as_called(single.train), single.train.leaves,
                                        groups(batches, per_call), args.steps, per_call=per_call)
    batch = config.data.batch_size
    print(f"single run: {single_step * 1e3:.1f} ms/step, {batch / single_step:,.0f} examples/s,"
          f" compile {single_compile:.1f}s")
    print("| members | ms/step (one program) | one by one (ms) | ratio | examples/s per member "
          "| compile (s) | host batches (ms/step) | loop (ms/step) | GFLOP/step | MFU "
          "| peak mem (GB) |" + (f" host batches, {args.draw_workers} processes (ms/step) | "
                                 f"loop, {args.draw_workers} processes (ms/step) |"
                                 if args.draw_workers else ""))
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
          + ("---:|---:|" if args.draw_workers else ""))
    peak = peak_flops(device)
    for members in member_counts:
        steps, member_batches = ensemble_train_state(config, members, max(8, 2 * per_call))
        flops = program_flops(steps.train.lower(member_batches[:1])) or float("nan")
        fresh = jax.tree.map(jnp.copy, steps.train.leaves)  # a call donates its state
        fresh_too = jax.tree.map(jnp.copy, steps.train.leaves) if args.draw_workers else None
        compile_s, step_s = timed(as_called(steps.train), steps.train.leaves,
                                  groups(member_batches, per_call), args.steps,
                                  per_call=per_call)
        draw = batch_drawer(seed_members(config, members),
                            member_batch_sharded(ensemble_mesh(members)))
        host_s = draw_seconds(draw, args.steps)
        loop_s = timed_loop(as_called(steps.train), fresh, groups(member_batches, per_call), draw,
                            args.steps, per_call=per_call)
        ahead = ""
        if args.draw_workers:
            workers = WorkerDrawer(seed_members(config, members), args.draw_workers,
                                   member_batch_sharded(ensemble_mesh(members)))
            try:
                host_ahead = draw_seconds(workers, args.steps)
                loop_ahead = timed_loop(as_called(steps.train), fresh_too,
                                        groups(member_batches, per_call), workers, args.steps,
                                        per_call=per_call)
                ahead = f" {host_ahead * 1e3:.2f} | {loop_ahead * 1e3:.1f} |"
            finally:
                workers.close()
        mfu = f"{100 * flops / step_s / peak:.1f}%" if peak else "-"
        memory = memory_gb(device)
        sequential = members * single_step
        print(f"| {members} | {step_s * 1e3:.1f} | {sequential * 1e3:.1f} | "
              f"{sequential / step_s:.2f}x | {batch / step_s:,.0f} | {compile_s:.1f} | "
              f"{host_s * 1e3:.2f} | {loop_s * 1e3:.1f} | {flops / 1e9:.2f} | {mfu} | "
              f"{'-' if memory is None else f'{memory:.2f}'} |{ahead}",
              flush=True)


if __name__ == "__main__":
    run(main)
