"""Where a CPU train step goes: the GEMM floor, forward, backward, optimizer, steps per call.

    python benchmarks/cpu_breakdown.py                    # d_model 256, 4+4 layers, batch 64
    python benchmarks/cpu_breakdown.py --config.model.d_model=64 --config.model.d_ff=128

The bigger shape of the PyTorch comparison: configs/default.py's encoder-decoder at d_model 256,
4 heads, 4+4 layers, d_ff 1024, batch 64, source 64 and target 72 tokens (copy at n = 64, so
nothing is padding), RoPE. Printed, each the median of 5 blocks after warm-up (the whole step: 3):

1. The floor: every matrix product of the step (forward shapes; the backward pass runs two more
   of each size) as bare ``jnp.matmul`` under ``jax.jit`` and as NumPy's BLAS, in GFLOP/s.
   Run ``benchmarks/torch_reference.py`` with a PyTorch interpreter for the same products in
   ``torch``.
2. The step, split: forward (loss only), forward + backward (``value_and_grad``), the optimizer
   update alone, the whole train step one per call, and per step with ``--steps-per-call``
   steps in one call (``train.steps_per_call``; XLA maps the program's temporaries afresh for
   every call, so fewer calls fault in less memory). The two whole-step rows each run in a
   process of their own (``--step-only K``), as the trainer runs its step: in the process that
   ran the parts they came out up to 15 % slower (benchmarks/RESULTS.md).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx
from step_timing import compile_train_step, median_seconds, run, timed

from pe_research import data
from pe_research.config import collect_overrides, load_config
from pe_research.core.errors import UsageError
from pe_research.model import build_model
from pe_research.model.inputs import forward
from pe_research.model.metrics import token_cross_entropy
from pe_research.runtime import data_mesh
from pe_research.tasks import get_task
from pe_research.training.optimizer import make_optimizer

REPO = Path(__file__).resolve().parents[1]
SHAPE = ["--config.model.d_model=256", "--config.model.num_heads=4", "--config.model.d_ff=1024",
         "--config.model.num_encoder_layers=4", "--config.model.num_decoder_layers=4",
         "--config.data.batch_size=64", "--config.task.name=copy",
         "--config.data.train_lengths=64,64", "--config.data.buckets=64,72",
         "--config.train.eval_lengths=()", "--config.eval.lengths=(64,)"]


def step_matmuls(config, source: int, target: int, batch: int) -> list[tuple[str, int, int, int]]:
    """(name, M, K, N) of the forward pass's matrix products, one entry per kind per layer."""
    d, f, vocab = config.model.d_model, config.model.d_ff, 16
    encoder, decoder = config.model.num_encoder_layers, config.model.num_decoder_layers
    rows_s, rows_t = batch * source, batch * target
    return ([("encoder q/k/v/out", rows_s, d, d)] * 4 * encoder
            + [("encoder ff in", rows_s, d, f), ("encoder ff out", rows_s, f, d)] * encoder
            + [("decoder q/k/v/out + cross q/out", rows_t, d, d)] * 6 * decoder
            + [("cross k/v", rows_s, d, d)] * 2 * decoder
            + [("decoder ff in", rows_t, d, f), ("decoder ff out", rows_t, f, d)] * decoder
            + [("output", rows_t, d, vocab)])


def gemm_floor(matmuls) -> None:
    """GFLOP/s of each distinct product, jnp (jit) vs NumPy, and the forward's total time."""
    print("| product (M x K x N) | count | jnp GFLOP/s | NumPy GFLOP/s |")
    print("|---|---:|---:|---:|")
    total = {"jnp": 0.0, "numpy": 0.0}
    for m, k, n in sorted({shape[1:] for shape in matmuls}):
        count = sum(1 for shape in matmuls if shape[1:] == (m, k, n))
        a = np.random.default_rng(0).standard_normal((m, k), np.float32)
        b = np.random.default_rng(1).standard_normal((k, n), np.float32)
        a_j, b_j = jnp.asarray(a), jnp.asarray(b)
        product = jax.jit(jnp.matmul)
        flops = 2 * m * k * n
        seconds = {"jnp": median_seconds(lambda p=product, x=a_j, y=b_j: p(x, y)),
                   "numpy": median_seconds(lambda x=a, y=b: x @ y)}
        for name in total:
            total[name] += count * seconds[name]
        print(f"| {m} x {k} x {n} | {count} | {flops / seconds['jnp'] / 1e9:.1f} | "
              f"{flops / seconds['numpy'] / 1e9:.1f} |")
    print(f"\nthe forward's products one after another: jnp {total['jnp'] * 1e3:.1f} ms, NumPy "
          f"{total['numpy'] * 1e3:.1f} ms (x3 for forward + backward)\n")


def step_parts(config, steps_per_call: int, overrides: list[str]) -> None:
    """Forward, forward + backward, optimizer update, whole step (one per call and
    ``steps_per_call`` per call, ``train.steps_per_call``, each in a process of its own), in ms
    per step."""
    task = get_task(config.task.to_dict(), config.data.to_dict())
    model = build_model(config, task.vocabulary.size)
    graphdef, params, rest = nnx.split(model, nnx.Param, ...)
    batch = data.global_batch(data.train_batch(task, config.data, config.seed, 0), data_mesh())
    key = jax.random.key(0)
    optimizer = make_optimizer(config.train)
    opt_state = optimizer.init(params)

    def loss(params):
        logits = forward(nnx.merge(graphdef, params, rest), batch, key, training=True)
        return token_cross_entropy(logits, batch["target_output"], batch["target_mask"])

    forward_only = jax.jit(loss)
    backward = jax.jit(jax.value_and_grad(loss))
    grads = backward(params)[1]
    update = jax.jit(lambda g, s, p: optax.apply_updates(p, optimizer.update(g, s, p)[0]))
    tokens = batch["source"].size + batch["target_input"].size
    parts = {"forward (loss)": median_seconds(lambda: forward_only(params)),
             "forward + backward": median_seconds(lambda: backward(params)),
             "optimizer update": median_seconds(lambda: update(grads, opt_state, params)),
             "train step (all of it)": step_in_own_process(1, overrides),
             f"train step, {steps_per_call} per call": step_in_own_process(steps_per_call,
                                                                           overrides)}
    print("| part | ms | share of the step |")
    print("|---|---:|---:|")
    whole = parts["train step (all of it)"]
    for name, seconds in parts.items():
        print(f"| {name} | {seconds * 1e3:.1f} | {seconds / whole:.0%} |")
    grouped = parts[f"train step, {steps_per_call} per call"]
    print(f"\ntrain step: {tokens / whole:,.0f} tokens/s ({tokens} tokens per step); "
          f"{steps_per_call} per call: {tokens / grouped:,.0f} tokens/s")


def step_in_own_process(per_call: int, overrides: list[str]) -> float:
    """Seconds per train step, ``per_call`` steps per call, timed by a fresh process of this
    script (``--step-only``)."""
    done = subprocess.run([sys.executable, __file__, "--step-only", str(per_call), *overrides],
                          capture_output=True, text=True, check=False)
    if done.returncode:
        raise RuntimeError(f"the step in its own process failed: {done.stderr.strip()[-300:]}")
    return float(done.stdout.split()[-1])


def step_only(config, per_call: int) -> None:
    """Print one train step's seconds, ``per_call`` steps per call, the step built as the
    trainer builds it: the median of 3 blocks after warm-up (5 steps each at one per call, else
    the larger of ``per_call`` and 10)."""
    step = compile_train_step(config, per_call=per_call)
    _, seconds = timed(step.compiled, step.state, step.inputs,
                       steps=max(per_call, 5 if per_call == 1 else 10), per_call=per_call)
    print(seconds)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--skip-floor", action="store_true")
    parser.add_argument("--steps-per-call", type=int, default=10,
                        help="train steps per jitted call for the last row (default 10)")
    parser.add_argument("--step-only", type=int, metavar="K",
                        help="only time the train step, K per call, and print its seconds")
    overrides, rest = collect_overrides(sys.argv[1:])
    args = parser.parse_args(rest)
    for flag, value in (("--steps-per-call", args.steps_per_call), ("--step-only", args.step_only)):
        if value is not None and value < 1:
            raise UsageError(f"{flag} {value}: give a positive number of steps per call")
    config = load_config(REPO / "configs" / "default.py", [*SHAPE, *overrides])
    if args.step_only:
        return step_only(config, args.step_only)
    print(f"device: {jax.devices()[0].device_kind} ({jax.default_backend()}), jax "
          f"{jax.__version__}; d_model {config.model.d_model}, "
          f"{config.model.num_encoder_layers}+{config.model.num_decoder_layers} layers, batch "
          f"{config.data.batch_size}\n")
    if not args.skip_floor:
        gemm_floor(step_matmuls(config, 64, 72, config.data.batch_size))
    step_parts(config, args.steps_per_call, overrides)


if __name__ == "__main__":
    run(main)
