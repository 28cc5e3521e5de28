"""The PyTorch reference: the same matrix products, and x-transformers' encoder-decoder step.

Run with an interpreter that has ``torch`` and ``x_transformers`` (neither is a dependency of
this project)::

    /path/to/torch-python benchmarks/torch_reference.py            # CPU shapes, eager
    /path/to/torch-python benchmarks/torch_reference.py --compile  # and torch.compile
    /path/to/torch-python benchmarks/torch_reference.py --device cuda --shapes large \
        --dtype bfloat16 --compile                                 # the GPU goal's comparison

1. The GEMM floor: the matrix products of ``benchmarks/cpu_breakdown.py``'s shape (d_model 256,
   d_ff 1024, batch 64, source 64 / target 72) in ``torch``, in GFLOP/s.
2. Train-step tokens/s of x-transformers' ``XTransformer`` (pre-LN, rotary positions, AdamW) at
   the two shapes of the comparison: small (d_model 64, 2+2 layers, d_ff 128, batch 32, source
   16 / target 24) and bigger (d_model 256, 4+4 layers, d_ff 1024, batch 64, source 64 / target
   72), 4 heads, median of 5 blocks after warm-up. ``benchmarks/train_speed.py``-style numbers
   for pe_research at the same shapes come from ``cpu_breakdown.py`` (bigger) and
   ``--config.model.d_model=64 ...`` overrides of it (small).
3. On a GPU, ``large``: ``train_speed.py``'s shape of that name (d_model 512, 8 heads, 6+6
   layers, d_ff 2048, batch 64, 256 source and 256 target tokens), with PyTorch's fused
   attention (``attn_flash``) and, for ``--dtype bfloat16``, autocast (float32 parameters, as
   ``model.dtype=bfloat16`` keeps them). The GEMM floor is a CPU figure and is skipped there.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

SHAPES = {"small": {"dim": 64, "depth": 2, "ff_mult": 2, "heads": 4, "batch": 32,
                    "source": 16, "target": 24},
          "bigger": {"dim": 256, "depth": 4, "ff_mult": 4, "heads": 4, "batch": 64,
                     "source": 64, "target": 72},
          "large": {"dim": 512, "depth": 6, "ff_mult": 4, "heads": 8, "batch": 64,
                    "source": 256, "target": 256}}
VOCAB = 16


def synchronize(device: str) -> None:
    """Wait for the device's queued work (CUDA runs asynchronously)."""
    if device == "cuda":
        torch.cuda.synchronize()


def median_seconds(function, repeats: int = 10, blocks: int = 5, device: str = "cpu") -> float:
    for _ in range(3):
        function()
    synchronize(device)
    times = []
    for _ in range(blocks):
        start = time.perf_counter()
        for _ in range(repeats):
            function()
        synchronize(device)
        times.append((time.perf_counter() - start) / repeats)
    return statistics.median(times)


def gemm_floor() -> None:
    d, f, batch = 256, 1024, 64
    print("| product (M x K x N) | torch GFLOP/s |")
    print("|---|---:|")
    for m, k, n in sorted({(batch * 64, d, d), (batch * 72, d, d), (batch * 64, d, f),
                           (batch * 64, f, d), (batch * 72, d, f), (batch * 72, f, d),
                           (batch * 72, d, VOCAB)}):
        a, b = torch.randn(m, k), torch.randn(k, n)
        seconds = median_seconds(lambda a=a, b=b: a @ b)
        print(f"| {m} x {k} x {n} | {2 * m * k * n / seconds / 1e9:.1f} |")


def step_rate(shape: dict, compiled: bool, device: str, dtype: str) -> float:
    """Train-step tokens/s (source + target) of ``XTransformer`` at ``shape``."""
    from x_transformers import XTransformer

    torch.manual_seed(0)
    flash = device == "cuda"  # PyTorch's fused attention: x-transformers' fast path on a GPU
    model = XTransformer(
        dim=shape["dim"], enc_num_tokens=VOCAB, enc_depth=shape["depth"],
        enc_heads=shape["heads"], enc_max_seq_len=shape["source"], enc_rotary_pos_emb=True,
        enc_use_abs_pos_emb=False, enc_ff_mult=shape["ff_mult"], enc_attn_flash=flash,
        dec_num_tokens=VOCAB, dec_depth=shape["depth"], dec_heads=shape["heads"],
        dec_max_seq_len=shape["target"], dec_rotary_pos_emb=True, dec_use_abs_pos_emb=False,
        dec_ff_mult=shape["ff_mult"], dec_attn_flash=flash, tie_token_emb=True).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    source = torch.randint(3, VOCAB, (shape["batch"], shape["source"]), device=device)
    target = torch.randint(3, VOCAB, (shape["batch"], shape["target"] + 1), device=device)
    mask = torch.ones_like(source).bool()
    loss_of = torch.compile(model) if compiled else model

    def step():
        with torch.autocast(device, dtype=torch.bfloat16, enabled=dtype == "bfloat16"):
            loss = loss_of(source, target, mask=mask)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    tokens = shape["batch"] * (shape["source"] + shape["target"])
    return tokens / median_seconds(step, repeats=5, device=device)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--compile", action="store_true", help="also time torch.compile")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu",
                        choices=("cpu", "cuda"))
    parser.add_argument("--dtype", default="float32", choices=("float32", "bfloat16"))
    parser.add_argument("--shapes", default=None,
                        help=f"of {tuple(SHAPES)}; default: small,bigger on a CPU, large on a GPU")
    args = parser.parse_args()
    shapes = (args.shapes or ("large" if args.device == "cuda" else "small,bigger")).split(",")
    unknown = sorted(set(shapes) - set(SHAPES))
    if unknown:
        parser.exit(2, f"error: --shapes {','.join(unknown)}: choose from {tuple(SHAPES)}\n")
    where = torch.cuda.get_device_name() if args.device == "cuda" else \
        f"CPU, {torch.get_num_threads()} threads"
    print(f"torch {torch.__version__}, {where}, {args.dtype}\n")
    if args.device == "cpu":
        gemm_floor()
    print("\n| shape | mode | dtype | tokens/s |")
    print("|---|---|---|---:|")
    for name in shapes:
        for compiled in (False, True) if args.compile else (False,):
            mode = "torch.compile" if compiled else "eager"
            rate = step_rate(SHAPES[name], compiled, args.device, args.dtype)
            print(f"| {name} | {mode} | {args.dtype} | {rate:,.0f} |", flush=True)


if __name__ == "__main__":
    main()
