"""Scheme cost: train-step time and memory of every registered scheme, relative to NoPE.

    python benchmarks/scheme_cost.py          # every scheme copy can feed, lengths 64 and 512
    python benchmarks/scheme_cost.py --schemes rope,fire --lengths 64 --steps 3
    python benchmarks/scheme_cost.py --task addition --schemes learned,position_coupling \
        --lengths 64 [--config.model.pe.abacus=True]

A decoder-only model (configs/default.py's width: d_model 64, 4 heads, 2 layers, batch 32) copies
strings so that the joint sequence is exactly L tokens (source L/2 - 1, SEP, target L/2 - 1,
EOS), where every scheme acts (FoX and CoPE only act in causal self-attention). Per scheme and
length: compile seconds, the median train-step time (``block_until_ready``, after warm-up) and
its ratio to NoPE's, XLA's temporary memory for the step (its memory analysis: what the compiled
step allocates beyond parameters and inputs), peak device memory where the backend reports it
(GPUs), and every intermediate of the step's jaxpr with (T, S) axes and more elements than the
bias ``[B, H, T, S]``: a tensor per (query, key) pair wider than a scalar per head, which is
what limits long lengths. "attention" says whether the scheme keeps the fused
``jax.nn.dot_product_attention`` (``fused``: cuDNN's kernel when run with
``--config.model.attention_implementation=cudnn --config.model.dtype=bfloat16`` on a GPU) or
computes attention itself (``explicit``: XLA whatever the implementation).
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import jax
from flax import nnx
from step_timing import compile_train_step, memory_gb, run, timed

from pe_research.config import collect_overrides, load_config
from pe_research.positional import SCHEMES, build_scheme, scheme_class
from pe_research.tasks import get_task

REPO = Path(__file__).resolve().parents[1]


def pair_tensors(jaxpr: jax.extend.core.ClosedJaxpr, length: int, limit: int) -> set[tuple]:
    """Shapes in ``jaxpr`` (sub-jaxprs too) with adjacent ``(L, L)`` axes and more than
    ``limit`` (= B H T S, one bias per head and pair) elements."""
    found: set[tuple] = set()

    def visit(inner) -> None:
        for equation in inner.eqns:
            for var in equation.outvars:
                shape = tuple(getattr(var.aval, "shape", ()))
                pairs = any(shape[i:i + 2] == (length, length) for i in range(len(shape) - 1))
                if pairs and math.prod(shape) > limit:
                    found.add(shape)
            for param in equation.params.values():
                for sub in param if isinstance(param, list | tuple) else [param]:
                    if hasattr(sub, "eqns"):
                        visit(sub)
                    elif hasattr(sub, "jaxpr") and hasattr(sub.jaxpr, "eqns"):
                        visit(sub.jaxpr)

    visit(jaxpr.jaxpr)
    return found


def schemes_for(task_name: str) -> list[str]:
    """Every registered scheme the task can feed: those reading position IDs it does not supply
    (position coupling on copy) are left out."""
    supplied = get_task({"name": task_name}).position_kinds
    return [name for name in SCHEMES if scheme_class(name).task_positions in (None, *supplied)]


def scheme_config(args: argparse.Namespace, overrides: list[str], scheme: str, length: int):
    """The benchmark config for ``scheme`` at joint length ``length``: copy of L/2 - 1 symbols,
    or (``--task addition``, for the schemes that read the task's position IDs) the addition of
    two (L/2 - 1) // 2-digit numbers, padded to the same L/2 + L/2 slots."""
    n = length // 2 - 1 if args.task == "copy" else (length // 2 - 1) // 2
    config = load_config(args.config, [
        "--config.model.architecture=decoder_only", f"--config.model.pe.type={scheme}",
        f"--config.model.num_decoder_layers={args.layers}", f"--config.data.train_lengths={n},{n}",
        f"--config.data.buckets={length // 2}", f"--config.task.name={args.task}",
        "--config.train.eval_lengths=()", f"--config.eval.lengths=({n},)",
        f"--config.data.batch_size={args.batch_size}", *overrides])
    if "max_len" in config.model.pe:
        config.model.pe.max_len = max(config.model.pe.max_len, length)
    return config


def attention_path(config) -> str:
    """``fused`` if the scheme keeps ``jax.nn.dot_product_attention``, else ``explicit``."""
    model = config.model
    scheme = build_scheme(dict(model.pe), d_model=model.d_model, num_heads=model.num_heads,
                          rngs=nnx.Rngs(0))
    return "fused" if scheme.uses_fused_attention else "explicit"


def measure(config, steps: int) -> dict:
    """Compile time, median step time, XLA temp memory, pair tensors of one train step."""
    step = compile_train_step(config)
    batches, train = step.batches, step.steps.train
    temp = getattr(step.executable.memory_analysis(), "temp_size_in_bytes", None)
    batch, length = batches[0]["target_input"].shape[0], sum(
        batches[0][key].shape[1] for key in ("source", "target_input"))
    jaxpr = jax.make_jaxpr(train.program)(step.state, batches[:1], 0, *train.trailing)
    limit = batch * config.model.num_heads * length * length
    _, step_s = timed(step.compiled, step.state, step.inputs, steps)
    return {"compile": step.compile_s, "step": step_s, "temp_mb": temp / 2**20 if temp else None,
            "pairs": pair_tensors(jaxpr, length, limit), "peak_gb": memory_gb(jax.devices()[0])}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default=str(REPO / "configs" / "default.py"))
    parser.add_argument("--schemes", default=None,
                        help="comma-separated values of model.pe.type (default: every scheme "
                             "the task supplies the position IDs of)")
    parser.add_argument("--lengths", default="64,512", help="joint sequence lengths")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--steps", type=int, default=5, help="timed steps per block (3 blocks)")
    parser.add_argument("--task", choices=("copy", "addition"), default="copy",
                        help="addition: for position_coupling and model.pe.abacus, which read "
                             "the task's position IDs (the same padded shapes)")
    overrides, rest = collect_overrides(sys.argv[1:])
    args = parser.parse_args(rest)
    schemes = ([s for s in args.schemes.split(",") if s] if args.schemes is not None
               else schemes_for(args.task))
    schemes = ["none"] + [s for s in schemes if s != "none"]  # the reference comes first
    lengths = [int(n) for n in args.lengths.split(",") if n]
    # Every config is built (and checked) before the first compile.
    configs = {(length, scheme): scheme_config(args, overrides, scheme, length)
               for length in lengths for scheme in schemes}
    device = jax.devices()[0]
    print(f"device: {device.device_kind} ({jax.default_backend()}); decoder-only, "
          f"{args.layers} layers, batch {args.batch_size}, {args.steps} timed steps x 3 blocks, "
          f"task {args.task}")
    for length in lengths:
        print(f"\nT = S = {length}\n")
        print("| scheme | attention | ms/step | vs none | compile (s) | XLA temp (MB) | "
              "peak (GB) | per-pair tensors wider than the bias |")
        print("|---|---|---:|---:|---:|---:|---:|---|")
        reference = None
        for scheme in schemes:
            config = configs[length, scheme]
            result = measure(config, args.steps)
            reference = reference or result["step"]
            pairs = ", ".join(str(list(shape)) for shape in sorted(result["pairs"])) or "-"
            temp = "-" if result["temp_mb"] is None else f"{result['temp_mb']:,.0f}"
            peak = "-" if result["peak_gb"] is None else f"{result['peak_gb']:.2f}"
            print(f"| {scheme} | {attention_path(config)} | {result['step'] * 1e3:.1f} | "
                  f"{result['step'] / reference:.2f}x"
                  f" | {result['compile']:.1f} | {temp} | {peak} | {pairs} |", flush=True)


if __name__ == "__main__":
    run(main)
