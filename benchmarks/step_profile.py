"""Where a train step's device time goes: a profiler trace of a few steps, summed by kind of
kernel, by pass (forward, backward, update), by part of the model and by XLA instruction.

    python benchmarks/step_profile.py --shape large --implementation cudnn --dtype bfloat16
    python benchmarks/step_profile.py --shape default --save-trace t.json.gz --save-hlo h.txt
    python benchmarks/step_profile.py --read t.json.gz h.txt --steps 5   # summarise again
    python benchmarks/step_profile.py --shape default --members 32      # an ensemble's step

The step is ``train_speed.py``'s (same shapes, same config overrides). After warm-up, ``--steps``
steps run under ``jax.profiler.trace``; its Perfetto trace gives every device event (GPU
kernels; on a CPU, XLA's thunks) with the XLA instruction it runs, and the compiled program's
text gives each instruction's opcode, library call and source op name. With ``--members M``
the step is the ensemble's (M seeds in one program, ``ensemble_speed.py``'s). Printed per step:

* wall time and the time the device was busy (the union of its events; the rest is idle,
  waiting for the host or for launches);
* by kind: matrix products (cuBLAS / Triton GEMMs), attention (cuDNN), other fusions
  (element-wise and reductions), copies and transposes, the rest; with the FLOP rate the
  products and attention reach over their own time (``step_timing.program_flops``);
* by pass, from the op name: forward (``jvp(``), backward (``transpose(``), the rest
  (optimizer update, loss, metrics); and by part of the model, from the named scopes its
  modules open (``positional`` inside ``attention``, ``feed_forward``, ``layer_norm``,
  ``embed``, ``output``); "unknown" is the time of library kernels (cuBLAS, cuDNN) inside
  XLA's CUDA graphs, which carry no op name;
* the ``--top`` instructions by time.
"""

from __future__ import annotations

import argparse
import collections
import gzip
import json
import re
import shutil
import sys
import tempfile
import time
from pathlib import Path

import jax
from step_timing import check_fits, compile_train_step, run
from train_speed import SHAPES, shape_config

from pe_research.config import collect_overrides
from pe_research.core.errors import UsageError

KINDS = ("matmul", "attention", "fusion", "copy", "other")
# the model's named scopes (model/layers.py, attention.py, transformer.py), innermost first
PARTS = ("positional", "attention", "feed_forward", "layer_norm", "embed", "output")
MOVES = {"copy", "transpose", "bitcast", "reshape", "parameter", "concatenate", "slice", "pad",
         "broadcast", "dynamic-slice", "dynamic-update-slice", "tuple", "get-tuple-element"}
_INSTRUCTION = re.compile(r"^\s*(?:ROOT\s+)?%?([\w.\-]+)\s*=\s*(.*)$")
_OPCODE = re.compile(r"\s([a-z][a-z0-9\-]*)\(")
_TARGET = re.compile(r'custom_call_target="([^"]+)"')
_FUSION_KIND = re.compile(r'"kind":"([^"]+)"|kind=(k\w+)')
_OP_NAME = re.compile(r'op_name="([^"]+)"')
_CALLS = re.compile(r"calls=%?([\w.\-]+)")
_COMPUTATION = re.compile(r"^(?:ENTRY\s+)?%?([\w.\-]+)\s.*\{\s*$")


def instructions(hlo_text: str) -> dict[str, dict[str, str]]:
    """Instruction name -> {opcode, target (library call or fusion kind), op_name, calls (the
    opcodes of the computation a fusion calls)}."""
    table, bodies, current = {}, collections.defaultdict(set), None
    for line in hlo_text.splitlines():
        header = _COMPUTATION.match(line)
        if header:
            current = header.group(1)
            continue
        match = _INSTRUCTION.match(line)
        if not match:
            continue
        rest = match.group(2)
        opcode = _OPCODE.search(" " + rest)
        target = _TARGET.search(rest)
        kinds = _FUSION_KIND.findall(rest)
        op_name = _OP_NAME.search(rest)
        called = _CALLS.search(rest)
        table[match.group(1)] = {
            "opcode": opcode.group(1) if opcode else "",
            "target": target.group(1) if target else " ".join(a or b for a, b in kinds),
            "op_name": op_name.group(1) if op_name else "",
            "calls": called.group(1) if called else ""}
        if current and opcode:
            bodies[current].add(opcode.group(1))
    for row in table.values():
        row["calls"] = " ".join(sorted(bodies.get(row["calls"], ())))
    return table


def kind_of(kernel: str, instruction: dict[str, str]) -> str:
    """One of ``KINDS`` from the instruction's opcode and library call, else the kernel name."""
    text = f"{instruction.get('target', '')} {kernel}".lower()
    opcode = instruction.get("opcode", "")
    called = instruction.get("calls", "").split()
    if any(word in text for word in ("cudnn", "fmha", "flash")):
        return "attention"
    if opcode in ("dot", "convolution") or "dot" in called or "convolution" in called or any(
            word in text for word in ("gemm", "cublas", "nvjet", "cutlass", "xmma", "matmul")):
        return "matmul"
    if opcode in ("copy", "transpose", "copy-start") or "memcpy" in text or "memset" in text:
        return "copy"
    if opcode == "fusion" and called and set(called) <= MOVES:
        return "copy"
    if opcode == "fusion" or "fusion" in text:
        return "fusion"
    return "other"


def part_of(op_name: str) -> str:
    """The model part (``PARTS``) an op belongs to, from its named scopes; else "rest", or
    "unknown" without an op name."""
    if not op_name:
        return "unknown"
    return next((part for part in PARTS if f"{part}/" in op_name or f"({part}" in op_name),
                "rest")


def pass_of(op_name: str) -> str:
    """forward / backward / rest (update, loss, metrics), from a jax op name; "unknown" without
    one (a library's kernel inside a CUDA graph)."""
    if not op_name:
        return "unknown"
    if "transpose(" in op_name:
        return "backward"
    if "jvp(" in op_name:
        return "forward"
    return "rest"


def device_events(trace: dict) -> list[dict]:
    """The trace's complete events that ran an XLA instruction on the device: GPU stream events
    where there are any, else (CPU) the events that name an ``hlo_op``."""
    processes, threads = {}, {}
    for event in trace["traceEvents"]:
        if event.get("ph") == "M" and event.get("name") == "process_name":
            processes[event["pid"]] = event["args"]["name"]
        if event.get("ph") == "M" and event.get("name") == "thread_name":
            threads[(event["pid"], event.get("tid"))] = event["args"]["name"]
    complete = [e for e in trace["traceEvents"] if e.get("ph") == "X" and e.get("dur")]
    gpu = [e for e in complete if processes.get(e["pid"], "").startswith("/device:GPU")
           and threads.get((e["pid"], e.get("tid")), "").lower().startswith("stream")]
    if gpu:
        return gpu
    return [e for e in complete if "hlo_op" in e.get("args", {})
            and not e["name"].startswith("end:")]


def busy_us(events: list[dict]) -> float:
    """Microseconds during which at least one event ran (the union of their intervals)."""
    total, end = 0.0, float("-inf")
    for start, stop in sorted((e["ts"], e["ts"] + e["dur"]) for e in events):
        if stop <= end:
            continue
        total += stop - max(start, end)
        end = stop
    return total


def instruction_name(event: dict, table: dict[str, dict[str, str]]) -> str:
    """The XLA instruction an event ran. Inside a CUDA graph (an ``hlo_op`` like
    ``command_buffer_1``) XLA's kernels are named after their instruction (``loop_add_fusion_7``
    runs ``loop_add_fusion.7``); a library's kernel (cuBLAS, cuDNN) keeps its own name."""
    op = event.get("args", {}).get("hlo_op", event["name"])
    if not op.startswith("command_buffer"):
        return op
    name = re.sub(r"_(\d+)$", r".\1", event["name"])
    return next((n for n in (name, event["name"]) if n in table), event["name"])


def summarize(events: list[dict], table: dict[str, dict[str, str]], steps: int) -> dict:
    """Per-step microseconds by kind, by pass and by instruction (with its kernel and op name)."""
    by_kind: dict[str, float] = collections.Counter()
    by_pass: dict[str, float] = collections.Counter()
    by_part: dict[str, float] = collections.Counter()
    by_op: dict[str, dict] = {}
    for event in events:
        op = instruction_name(event, table)
        instruction = table.get(op, {})
        kind = kind_of(event["name"], instruction)
        by_kind[kind] += event["dur"] / steps
        by_pass[pass_of(instruction.get("op_name", ""))] += event["dur"] / steps
        by_part[part_of(instruction.get("op_name", ""))] += event["dur"] / steps
        row = by_op.setdefault(op, {"us": 0.0, "launches": 0, "kind": kind,
                                    "kernel": event["name"],
                                    "op_name": instruction.get("op_name", "")})
        row["us"] += event["dur"] / steps
        row["launches"] += 1
    for row in by_op.values():
        row["launches"] /= steps
    return {"kind": dict(by_kind), "pass": dict(by_pass), "part": dict(by_part), "op": by_op,
            "busy": busy_us(events) / steps}


def short(op_name: str, width: int = 70) -> str:
    """The last parts of a jax op name (``jit(train)/jvp(...)/dot_general`` -> its tail)."""
    return op_name if len(op_name) <= width else "..." + op_name[-width + 3:]


def report(summary: dict, wall_ms: float | None, flops: float | None, top: int) -> None:
    """Print the tables of ``summarize``'s per-step figures (``wall_ms`` None: not known)."""
    device_ms = sum(summary["kind"].values()) / 1e3
    busy_ms = summary["busy"] / 1e3
    wall = "" if wall_ms is None else (
        f"wall {wall_ms:.2f} ms; idle {max(wall_ms - busy_ms, 0):.2f} ms "
        f"({max(wall_ms - busy_ms, 0) / wall_ms:.0%} of wall); ")
    print(f"\nper step: {wall}device busy {busy_ms:.2f} ms; events sum {device_ms:.2f} ms")
    print("\n| kind | ms/step | share of device time |")
    print("|---|---:|---:|")
    for kind in KINDS:
        ms = summary["kind"].get(kind, 0.0) / 1e3
        print(f"| {kind} | {ms:.2f} | {ms / device_ms:.0%} |")
    matrix_ms = (summary["kind"].get("matmul", 0.0) + summary["kind"].get("attention", 0.0)) / 1e3
    if flops and matrix_ms:
        print(f"\nmatrix products + attention: {flops / 1e9:,.1f} GFLOP in {matrix_ms:.2f} ms = "
              f"{flops / matrix_ms / 1e9:.1f} TFLOP/s over their own time"
              + ("" if wall_ms is None else f"; over the wall time {flops / wall_ms / 1e9:.1f}"))
    for title, names in (("pass", ("forward", "backward", "rest", "unknown")),
                         ("part", (*PARTS, "rest", "unknown"))):
        print(f"\n| {title} | ms/step | share |")
        print("|---|---:|---:|")
        for name in names:
            ms = summary[title].get(name, 0.0) / 1e3
            print(f"| {name} | {ms:.2f} | {ms / device_ms:.0%} |")
    print("\n| instruction | kind | ms/step | launches/step | kernel | op name |")
    print("|---|---|---:|---:|---|---|")
    rows = sorted(summary["op"].items(), key=lambda item: -item[1]["us"])[:top]
    for op, row in rows:
        print(f"| {op[:60]} | {row['kind']} | {row['us'] / 1e3:.3f} | {row['launches']:g} | "
              f"{row['kernel'][:40]} | {short(row['op_name'])} |")


def run_steps(step, state: list, count: int, first: int = 0) -> tuple[list, float]:
    """``count`` train steps from ``state`` (the leaves of params and opt_state); (new state,
    seconds per step)."""
    start = time.perf_counter()
    for i in range(first, first + count):
        state, metrics = step.compiled(state, step.inputs[i % len(step.inputs)], i)
    jax.block_until_ready(metrics)
    return state, (time.perf_counter() - start) / count


def profile(step, steps: int, trace_dir: Path) -> tuple[float, float, Path]:
    """Warm up, time 10 steps, then run ``steps`` more under the profiler; (untraced and
    traced seconds per step, the Perfetto trace's path)."""
    state, _ = run_steps(step, step.state, 3)
    state, untraced = run_steps(step, state, 10, 3)
    with jax.profiler.trace(str(trace_dir), create_perfetto_trace=True):
        _, traced = run_steps(step, state, steps, 13)
    path = max(trace_dir.rglob("perfetto_trace.json.gz"), key=lambda p: p.stat().st_mtime)
    return untraced, traced, path


def read_text(path: Path) -> str:
    """A file's text, gunzipped when its name ends in .gz."""
    if not path.is_file():
        raise UsageError(f"{path}: no such file; give a trace and a program text that "
                         "--save-trace and --save-hlo wrote")
    return gzip.decompress(path.read_bytes()).decode() if path.suffix == ".gz" else (
        path.read_text())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shape", default="default", help=f"one of {tuple(SHAPES)}")
    parser.add_argument("--implementation", default="xla", help="xla or cudnn")
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--steps", type=int, default=5, help="profiled steps")
    parser.add_argument("--members", type=int, default=0,
                        help="profile the ensemble step of this many seeds (0: a single run)")
    parser.add_argument("--top", type=int, default=20, help="instructions listed")
    parser.add_argument("--save-trace", type=Path, help="copy the Perfetto trace (.json.gz) here")
    parser.add_argument("--save-hlo", type=Path, help="write the compiled program's text here")
    parser.add_argument("--read", type=Path, nargs=2, metavar=("TRACE", "HLO"),
                        help="summarise a saved trace and program text (--steps as profiled)")
    overrides, rest = collect_overrides(sys.argv[1:])
    args = parser.parse_args(rest)
    if args.read:
        trace, hlo = (json.loads(read_text(path)) if i == 0 else read_text(path)
                      for i, path in enumerate(args.read))
        report(summarize(device_events(trace), instructions(hlo), args.steps), None, None,
               args.top)
        return
    if args.shape not in SHAPES:
        raise UsageError(f"--shape {args.shape}: not a shape; choose from {tuple(SHAPES)}")
    if args.steps < 1:
        raise UsageError(f"--steps {args.steps}: give a positive number of steps")
    if args.members < 0:
        raise UsageError(f"--members {args.members}: give 0 (a single run) or a member count")
    config = shape_config(args.shape, args.implementation, args.dtype, overrides)
    device = jax.devices()[0]
    print(f"device: {device.device_kind} ({jax.default_backend()}), jax {jax.__version__}; "
          f"shape {args.shape}, {args.implementation}, {args.dtype}"
          + (f", {args.members} members in one program" if args.members else ""))
    step = compile_train_step(config, members=args.members)
    try:
        check_fits(step.executable)
    except MemoryError as error:  # running it would fail, or swap for hours on a host
        raise UsageError(f"{str(error).removeprefix('skipped: ')}; profile fewer --members "
                         "or a smaller --shape") from None
    hlo = step.executable.as_text()
    with tempfile.TemporaryDirectory() as trace_dir:
        step_s, wall_s, path = profile(step, args.steps, Path(trace_dir))
        with gzip.open(path) as file:
            trace = json.load(file)
        if args.save_trace:
            shutil.copyfile(path, args.save_trace)
    if args.save_hlo:
        args.save_hlo.write_text(hlo)
    tokens = sum(step.batches[0][key].size for key in ("source", "target_input"))
    print(f"step {step_s * 1e3:.2f} ms untraced ({tokens / step_s:,.0f} tokens/s), "
          f"{wall_s * 1e3:.2f} ms traced; compile {step.compile_s:.1f} s")
    summary = summarize(device_events(trace), instructions(hlo), args.steps)
    report(summary, wall_s * 1e3, step.flops, args.top)


if __name__ == "__main__":
    run(main)
