"""A bias computed once for the batch vs once per row: train-step memory and time at length L.

    python benchmarks/bias_memory.py                          # ALiBi, T = S = 1024, batch 32
    python benchmarks/bias_memory.py --length 512 --config.model.pe.type=t5

configs/default.py's encoder-decoder (d_model 64, 4 heads, 2+2 layers) copies strings of
L - 1 tokens, so source and target are exactly L tokens. Two layouts of the same positions:

* ``per row``: positions repeated over the batch, ``[B, T]``, so every bias scheme builds a
  ``[B, H, T, S]`` bias (what every batch did before positions shared by the rows became
  ``[1, T]``);
* ``shared``: ``[1, T]``, the bias ``[1, H, T, S]``, broadcast by attention (the default now).

For each attention implementation and dtype that applies (cuDNN: a GPU and bfloat16): the
step's memory from XLA's memory analysis (arguments + outputs + temporaries - donated), the
device's peak where reported (run order: per row, then shared, so a later peak is a maximum),
compile seconds and the median step time. The numbers of both layouts are the same (the
contract tests check it); only memory and time differ.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
from step_timing import compile_train_step, memory_gb, run, step_memory_gb, timed
from train_speed import combinations

import pe_research.model.inputs as inputs_module
from pe_research.config import collect_overrides, load_config
from pe_research.core.errors import UsageError

REPO = Path(__file__).resolve().parents[1]
SHARED_POSITIONS = inputs_module.make_positions


def per_row_positions(pe, mask_BxT, key, training):
    """The same positions, repeated for every row: ``[B, T]``."""
    return jnp.broadcast_to(SHARED_POSITIONS(pe, mask_BxT, key, training), mask_BxT.shape)


def measure(config, layout: str, steps: int) -> dict:
    """Memory, compile and step time of one train step with positions laid out as ``layout``."""
    inputs_module.make_positions = per_row_positions if layout == "per row" else SHARED_POSITIONS
    try:
        step = compile_train_step(config, batch_count=2)
        _, step_s = timed(step.compiled, step.state, step.inputs, steps)
    finally:
        inputs_module.make_positions = SHARED_POSITIONS
    return {"memory": step_memory_gb(step.executable), "peak": memory_gb(jax.devices()[0]),
            "compile": step.compile_s, "step": step_s}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--length", type=int, default=1024, help="source = target tokens")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--steps", type=int, default=3, help="timed steps per block (3 blocks)")
    gpu = jax.default_backend() == "gpu"
    parser.add_argument("--dtypes", default="float32,bfloat16" if gpu else "float32")
    overrides, rest = collect_overrides(sys.argv[1:])
    args = parser.parse_args(rest)
    if args.length < 2:
        raise UsageError(f"--length {args.length}: give at least 2 (a token and EOS)")
    n = args.length - 1
    config_args = ["--config.model.pe.type=alibi", "--config.task.name=copy",
                   f"--config.data.train_lengths={n},{n}", f"--config.data.buckets={args.length}",
                   f"--config.data.batch_size={args.batch_size}", "--config.train.eval_lengths=()",
                   f"--config.eval.lengths=({n},)", *overrides]
    configs = {(implementation, dtype): load_config(REPO / "configs" / "default.py", [
        *config_args, f"--config.model.attention_implementation={implementation}",
        f"--config.model.dtype={dtype}"]) for implementation, dtype in combinations(
            args.dtypes.split(","))}  # every one checked before the first compile
    device = jax.devices()[0]
    print(f"device: {device.device_kind} ({jax.default_backend()}); T = S = {args.length}, "
          f"batch {args.batch_size}, overrides {overrides or '-'}\n")
    print("| attention | dtype | positions | step memory (GB) | peak (GB) | compile (s) "
          "| ms/step |")
    print("|---|---|---|---:|---:|---:|---:|")
    for (implementation, dtype), config in configs.items():
        for layout in ("per row", "shared"):
            row = f"| {implementation} | {dtype} | {layout} |"
            try:
                result = measure(config, layout, args.steps)
            except Exception as error:  # noqa: BLE001 - a kernel's refusal is a result here
                print(f"{row} failed: {str(error).splitlines()[0][:160]} ||||", flush=True)
                continue
            memory = "-" if result["memory"] is None else f"{result['memory']:.2f}"
            peak = "-" if result["peak"] is None else f"{result['peak']:.2f}"
            print(f"{row} {memory} | {peak} | {result['compile']:.1f} | "
                  f"{result['step'] * 1e3:.1f} |", flush=True)


if __name__ == "__main__":
    run(main)
