"""Train-step speed of named shapes, for every attention implementation and dtype that applies.

    python benchmarks/train_speed.py                      # every shape; CPU: xla/float32 only
    python benchmarks/train_speed.py --shapes default --dtypes float32,bfloat16
    python benchmarks/train_speed.py --shapes large --steps 20 --config.model.pe.type=alibi
    python benchmarks/train_speed.py --shapes large --steps 1 --steps-per-call 1   # CPU: slow

Shapes (task length n; every batch is exactly one shape, no padding):

* ``default``: configs/default.py (encoder-decoder, d_model 64, 2+2 layers, batch 32), copy at
  its longest training length, n = 16.
* ``randomized_pe``: the randomized-PE paper's model (Ruoss et al. 2023): encoder-only,
  d_model 64, 8 heads, 5 layers, batch 128, duplicate_string at n = 40, Transformer-XL
  relative encoding with positions randomized over [0, 2048) (configs/randomized_pe_benchmark.py).
* ``large``: encoder-decoder, d_model 512, 8 heads, 6+6 layers, d_ff 2048, batch 64, copy at
  n = 255 (256 source and 256 target tokens with EOS), RoPE.
* ``language_model``: configs/language_model.py (decoder-only, ALiBi, characters of the Python
  standard library's source, written to data/python_stdlib.txt when absent) at ``large``'s
  size: d_model 512, 8 heads, 12 layers, d_ff 2048, batch 64, windows of n = 511 characters
  (512 tokens with BOS); no source, so cuDNN gets key lengths and a causal flag.

Per shape, attention implementation (``xla``; ``cudnn`` on a GPU, bfloat16 only), dtype and
steps per call (``train.steps_per_call``: 1, and 10 as the trainer picks for these shapes):
tokens/s (source + target tokens of the batch per second), the median step time over 3 blocks
after warm-up (``block_until_ready``), compile time, the step's memory from XLA's memory
analysis (arguments + outputs + temporaries - donated) and the device's peak so far where the
backend reports it (shapes run from small to large, so it is that shape's), FLOPs per step from
XLA's cost analysis of the lowered, unoptimised xla-attention program (``program_flops``: the
same count on every backend; a cuDNN custom call reports none, so its rows take the xla count)
and MFU against the device's dense bf16 peak (``step_timing.PEAK_FLOPS``: H100/H200 989 TFLOP/s,
A100 312); on a CPU, FLOP/s only. A combination that fails prints its one-line error in its row,
and one whose step needs more memory than the device has (``language_model`` on a small host) is
skipped with the two sizes in its row.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

import jax
from step_timing import (
    check_fits,
    compile_train_step,
    lower_train_step,
    memory_gb,
    peak_flops,
    program_flops,
    run,
    timed,
)

from pe_research.config import collect_overrides, load_config
from pe_research.core.errors import ConfigError, UsageError
from pe_research.tasks import get_task
from pe_research.tasks.corpora import write_stdlib_corpus

REPO = Path(__file__).resolve().parents[1]
CONFIGS = REPO / "configs"
# name -> (config file, task length, overrides)
SHAPES: dict[str, tuple[str, int, tuple[str, ...]]] = {
    "default": ("default.py", 16, ()),
    "randomized_pe": ("randomized_pe_benchmark.py", 40, (
        "--config.model.architecture=encoder_only", "--config.model.num_encoder_layers=5")),
    "large": ("default.py", 255, (
        "--config.model.d_model=512", "--config.model.num_heads=8", "--config.model.d_ff=2048",
        "--config.model.num_encoder_layers=6", "--config.model.num_decoder_layers=6",
        "--config.data.batch_size=64", "--config.model.pe.type=rope")),
    "language_model": ("language_model.py", 511, (
        "--config.model.d_model=512", "--config.model.num_heads=8", "--config.model.d_ff=2048",
        "--config.model.num_decoder_layers=12", "--config.data.batch_size=64")),
}
# The language model reads a text file: the Python standard library's source, written once.
CORPUS = REPO / "data" / "python_stdlib.txt"


def shape_config(name: str, implementation: str, dtype: str, overrides: list[str]):
    """The config of shape ``name``: one task length, buckets that fit it exactly."""
    file, length, shape_overrides = SHAPES[name]
    if file == "language_model.py":
        if not CORPUS.exists():
            write_stdlib_corpus(CORPUS)
        shape_overrides = (*shape_overrides, f"--config.task.path={CORPUS}")
    base = [*shape_overrides, f"--config.data.train_lengths={length},{length}",
            "--config.train.eval_lengths=()", f"--config.eval.lengths=({length},)",
            f"--config.model.attention_implementation={implementation}",
            f"--config.model.dtype={dtype}", *overrides]
    config = load_config(CONFIGS / file, base, validate=False)
    task = get_task(config.task.to_dict(), config.data.to_dict())
    source, target = task.widest([length])
    config.data.buckets = tuple(sorted({source, target + 1} - {0}))  # a language model: S = 0
    return load_config(CONFIGS / file, [*base, f"--config.data.buckets={config.data.buckets}"])


def measure(config, steps: int, per_call: int) -> dict:
    """Compile time, median step time, tokens per step, FLOPs of one step and memory of
    ``per_call`` train steps per call."""
    step = compile_train_step(config, per_call=per_call)
    needed = check_fits(step.executable)
    _, step_s = timed(step.compiled, step.state, step.inputs, steps, per_call=per_call)
    tokens = sum(step.batches[0][key].size for key in ("source", "target_input"))
    return {"compile": step.compile_s, "step": step_s, "tokens": tokens,
            "flops": step.flops,
            "memory": needed, "peak": memory_gb(jax.devices()[0])}


def combinations(dtypes: list[str], implementations: Sequence[str] = ("xla", "cudnn"),
                 ) -> list[tuple[str, str]]:
    """(attention implementation, dtype) pairs of ``implementations`` that apply on this
    backend."""
    pairs = [("xla", dtype) for dtype in dtypes]
    if jax.default_backend() == "gpu":
        pairs += [("cudnn", dtype) for dtype in dtypes if dtype in ("bfloat16", "float16")]
    return [pair for pair in pairs if pair[0] in implementations]


def xla_flops(shape: str, dtype: str, overrides: list[str], per_call: int) -> float | None:
    """FLOPs of the shape's step with xla attention, from its lowered program alone (a cuDNN
    custom call counts none)."""
    config = shape_config(shape, "xla", dtype, overrides)
    return program_flops(lower_train_step(config, per_call=per_call)[1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shapes", default=",".join(SHAPES), help=f"of {tuple(SHAPES)}")
    gpu = jax.default_backend() == "gpu"
    parser.add_argument("--dtypes", default="float32,bfloat16" if gpu else "float32")
    parser.add_argument("--implementations", default="xla,cudnn",
                        help="attention implementations (cudnn runs on a GPU only)")
    parser.add_argument("--steps", type=int, default=10, help="timed steps per block (3 blocks)")
    parser.add_argument("--steps-per-call", default="1,10",
                        help="train steps per call (train.steps_per_call), comma-separated")
    overrides, rest = collect_overrides(sys.argv[1:])
    args = parser.parse_args(rest)
    shapes = [s for s in args.shapes.split(",") if s]
    per_calls = [int(k) for k in args.steps_per_call.split(",") if k]
    if not per_calls or min(per_calls) < 1:
        raise UsageError(f"--steps-per-call {args.steps_per_call}: give positive integers, "
                         "e.g. 1,10")
    implementations = [i for i in args.implementations.split(",") if i]
    if not implementations or set(implementations) - {"xla", "cudnn"}:
        raise UsageError(f"--implementations {args.implementations}: choose from xla,cudnn")
    unknown = sorted(set(shapes) - set(SHAPES))
    if unknown:
        raise UsageError(f"--shapes {','.join(unknown)}: not a shape; choose from {tuple(SHAPES)}")
    device = jax.devices()[0]
    peak = peak_flops(device)
    print(f"device: {device.device_kind} ({jax.default_backend()}), jax {jax.__version__}; "
          f"{args.steps} timed steps x 3 blocks; MFU against "
          f"{'%.0f TFLOP/s' % (peak / 1e12) if peak else 'no known peak (FLOP/s only)'}")
    print("\n| shape | attention | dtype | steps/call | tokens/s | ms/step | compile (s) "
          "| step memory (GB) | peak (GB) | GFLOP/step | TFLOP/s | MFU |")
    print("|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for shape in shapes:
        flops_of: dict[str, float] = {}  # dtype -> one step's FLOPs with xla attention
        for implementation, dtype in combinations(args.dtypes.split(","), implementations):
            for per_call in sorted(set(per_calls)):
                row = f"| {shape} | {implementation} | {dtype} | {per_call} |"
                try:
                    result = measure(shape_config(shape, implementation, dtype, overrides),
                                     args.steps, per_call)
                except (ConfigError, ValueError, NotImplementedError, RuntimeError,
                        MemoryError) as error:
                    failed = "" if isinstance(error, MemoryError) else "failed: "
                    print(f"{row} {failed}{str(error).splitlines()[0][:160]} |||||||",
                          flush=True)
                    continue
                if implementation == "xla" and result["flops"]:
                    flops_of[dtype] = result["flops"]
                if dtype not in flops_of:  # a cuDNN row without its xla row
                    flops_of[dtype] = xla_flops(shape, dtype, overrides, per_call)
                flops = flops_of.get(dtype) or result["flops"]
                rate = flops / result["step"] if flops else None
                cells = [f"{result['tokens'] / result['step']:,.0f}",
                         f"{result['step'] * 1e3:.2f}", f"{result['compile']:.1f}",
                         _cell(result["memory"], ".3f"), _cell(result["peak"], ".2f"),
                         _cell(flops and flops / 1e9, ",.4g"), _cell(rate and rate / 1e12, ".3g"),
                         _cell(rate and peak and 100 * rate / peak, ".1f", "%")]
                print(f"{row} {' | '.join(cells)} |", flush=True)


def _cell(value: float | None, spec: str, suffix: str = "") -> str:
    return "-" if value is None else f"{value:{spec}}{suffix}"


if __name__ == "__main__":
    run(main)
