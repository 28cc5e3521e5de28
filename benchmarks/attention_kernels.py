"""Attention and matrix-product kernels alone: how each way of masking costs, and the GEMM rates
at the model's widths.

    python benchmarks/attention_kernels.py                 # the `large` shape's sizes
    python benchmarks/attention_kernels.py --batch 4 --length 16 --heads 2 --head-dim 8

1. Attention, forward + backward (gradients of q, k and v) and forward alone, median of 5
   blocks of 20 calls after warm-up (``step_timing.median_seconds``): cuDNN with a dense
   boolean mask (all true, or causal), no mask, key lengths, the causal flag, both; XLA with
   the dense masks. bfloat16 on a GPU (cuDNN rows there only), float32 on a CPU. TFLOP/s
   counts 4 B H T S D per forward product pair and 3.5x that for forward + backward (causal
   rows counted in full).
2. Matrix products ``[B T, d] x [d, n]`` at the widths of `train_speed.py`'s ``large`` shape
   (d_model 512, d_ff 2048, Q/K/V merged: 1536), and one element-wise pass over ``[B T, d]``
   (bytes read + written per second).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

import jax
import jax.numpy as jnp
from step_timing import median_seconds, run

from pe_research.core.errors import UsageError

# name -> (implementation, keyword arguments of jax.nn.dot_product_attention, given B and S)
MASKINGS: dict[str, tuple[str, Callable[[jax.Array, jax.Array], dict]]] = {
    "cuDNN, dense mask, all true": ("cudnn", lambda full, causal: {"mask": full}),
    "cuDNN, dense causal mask": ("cudnn", lambda full, causal: {"mask": causal}),
    "cuDNN, no mask": ("cudnn", lambda full, causal: {}),
    "cuDNN, key lengths": ("cudnn", lambda full, causal: {
        "key_value_seq_lengths": jnp.full(full.shape[0], full.shape[-1], jnp.int32)}),
    "cuDNN, causal flag": ("cudnn", lambda full, causal: {"is_causal": True}),
    "cuDNN, causal flag + key lengths": ("cudnn", lambda full, causal: {
        "is_causal": True,
        "key_value_seq_lengths": jnp.full(full.shape[0], full.shape[-1], jnp.int32)}),
    "XLA, dense mask, all true": ("xla", lambda full, causal: {"mask": full}),
    "XLA, dense causal mask": ("xla", lambda full, causal: {"mask": causal}),
}


def attention_rows(batch: int, heads: int, length: int, head_dim: int, dtype) -> None:
    """Print one row per masking of ``MASKINGS`` that applies on this backend."""
    keys = jax.random.split(jax.random.key(0), 3)
    q, k, v = (jax.random.normal(key, (batch, length, heads, head_dim), dtype) for key in keys)
    full = jnp.ones((batch, 1, length, length), bool)
    causal = jnp.broadcast_to(jnp.tril(jnp.ones((length, length), bool)), full.shape)
    flops = 4 * batch * heads * length * length * head_dim
    print("| attention | forward + backward (ms) | forward (ms) | TFLOP/s (fwd + bwd) |")
    print("|---|---:|---:|---:|")
    for name, (implementation, arguments) in MASKINGS.items():
        if implementation == "cudnn" and jax.default_backend() != "gpu":
            continue

        kwargs = arguments(full, causal)

        def loss(q, k, v, implementation=implementation, kwargs=kwargs):
            out = jax.nn.dot_product_attention(q, k, v, implementation=implementation, **kwargs)
            return out.astype(jnp.float32).sum()

        both_step, forward_step = jax.jit(jax.grad(loss, argnums=(0, 1, 2))), jax.jit(loss)
        both = median_seconds(lambda step=both_step: step(q, k, v), repeats=20)
        forward = median_seconds(lambda step=forward_step: step(q, k, v), repeats=20)
        print(f"| {name} | {both * 1e3:.3f} | {forward * 1e3:.3f} | "
              f"{3.5 * flops / both / 1e12:.3g} |", flush=True)


def product_rows(rows: int, width: int, dtype) -> None:
    """Print the rate of each product ``[rows, k] x [k, n]`` of the step, and an element-wise
    pass's bandwidth."""
    print("\n| product (M x K x N) | us | TFLOP/s |")
    print("|---|---:|---:|")
    keys = jax.random.split(jax.random.key(1), 2)
    matmul = jax.jit(jnp.matmul)
    for m, k, n in [(rows, width, width), (rows, width, 3 * width), (rows, width, 4 * width),
                    (rows, 4 * width, width), (2 * rows, width, width)]:
        a = jax.random.normal(keys[0], (m, k), dtype)
        b = jax.random.normal(keys[1], (k, n), dtype)
        seconds = median_seconds(lambda a=a, b=b: matmul(a, b), repeats=50)
        print(f"| {m} x {k} x {n} | {seconds * 1e6:.1f} | {2 * m * k * n / seconds / 1e12:.3g} |")
    x = jax.random.normal(keys[0], (rows, width), dtype)
    affine = jax.jit(lambda x: x * 2 + 1)
    seconds = median_seconds(lambda: affine(x), repeats=50)
    moved = 2 * x.size * x.dtype.itemsize
    print(f"\nelement-wise pass over {rows} x {width}: {seconds * 1e6:.1f} us, "
          f"{moved / seconds / 1e12:.3g} TB/s (read + written)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--heads", type=int, default=8)
    parser.add_argument("--length", type=int, default=256, help="queries = keys")
    parser.add_argument("--head-dim", type=int, default=64)
    args = parser.parse_args()
    if min(args.batch, args.heads, args.length, args.head_dim) < 1:
        raise UsageError("--batch, --heads, --length and --head-dim must be positive")
    gpu = jax.default_backend() == "gpu"
    dtype = jnp.bfloat16 if gpu else jnp.float32
    device = jax.devices()[0]
    print(f"device: {device.device_kind} ({jax.default_backend()}), jax {jax.__version__}; "
          f"batch {args.batch}, {args.heads} heads, T = S = {args.length}, head size "
          f"{args.head_dim}, {jnp.dtype(dtype).name}\n")
    attention_rows(args.batch, args.heads, args.length, args.head_dim, dtype)
    product_rows(args.batch * args.length, args.heads * args.head_dim, dtype)


if __name__ == "__main__":
    run(main)
