"""The PyTorch reference for CPU speed: the same matrix products, and an encoder-decoder step.

Run with an interpreter that has ``torch`` and ``x_transformers`` (neither is a dependency of
this project)::

    /path/to/torch-python benchmarks/torch_reference.py            # both shapes, eager
    /path/to/torch-python benchmarks/torch_reference.py --compile  # and torch.compile

1. The GEMM floor: the matrix products of ``benchmarks/cpu_breakdown.py``'s shape (d_model 256,
   d_ff 1024, batch 64, source 64 / target 72) in ``torch``, in GFLOP/s.
2. Train-step tokens/s of x-transformers' ``XTransformer`` (pre-LN, rotary positions, AdamW) at
   the two shapes of the comparison: small (d_model 64, 2+2 layers, d_ff 128, batch 32, source
   16 / target 24) and bigger (d_model 256, 4+4 layers, d_ff 1024, batch 64, source 64 / target
   72), 4 heads, median of 5 blocks after warm-up. ``benchmarks/train_speed.py``-style numbers
   for pe_research at the same shapes come from ``cpu_breakdown.py`` (bigger) and
   ``--config.model.d_model=64 ...`` overrides of it (small).
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

SHAPES = {"small": {"dim": 64, "depth": 2, "ff_mult": 2, "batch": 32, "source": 16,
                    "target": 24},
          "bigger": {"dim": 256, "depth": 4, "ff_mult": 4, "batch": 64, "source": 64,
                     "target": 72}}
VOCAB = 16


def median_seconds(function, repeats: int = 10, blocks: int = 5) -> float:
    for _ in range(3):
        function()
    times = []
    for _ in range(blocks):
        start = time.perf_counter()
        for _ in range(repeats):
            function()
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


def step_rate(shape: dict, compiled: bool) -> float:
    from x_transformers import XTransformer

    torch.manual_seed(0)
    model = XTransformer(
        dim=shape["dim"], enc_num_tokens=VOCAB, enc_depth=shape["depth"], enc_heads=4,
        enc_max_seq_len=shape["source"], enc_rotary_pos_emb=True, enc_use_abs_pos_emb=False,
        enc_ff_mult=shape["ff_mult"], dec_num_tokens=VOCAB, dec_depth=shape["depth"],
        dec_heads=4, dec_max_seq_len=shape["target"], dec_rotary_pos_emb=True,
        dec_use_abs_pos_emb=False, dec_ff_mult=shape["ff_mult"], tie_token_emb=True)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    source = torch.randint(3, VOCAB, (shape["batch"], shape["source"]))
    target = torch.randint(3, VOCAB, (shape["batch"], shape["target"] + 1))
    mask = torch.ones_like(source).bool()
    loss_of = torch.compile(model) if compiled else model

    def step():
        loss = loss_of(source, target, mask=mask)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    tokens = shape["batch"] * (shape["source"] + shape["target"])
    return tokens / median_seconds(step, repeats=5)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--compile", action="store_true", help="also time torch.compile")
    args = parser.parse_args()
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads\n")
    gemm_floor()
    print("\n| shape | mode | tokens/s |")
    print("|---|---|---:|")
    for name, shape in SHAPES.items():
        for compiled in (False, True) if args.compile else (False,):
            mode = "torch.compile" if compiled else "eager"
            print(f"| {name} | {mode} | {step_rate(shape, compiled):,.0f} |", flush=True)


if __name__ == "__main__":
    main()
