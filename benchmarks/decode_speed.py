"""Cached greedy decoding at the protocol's lengths: one eval batch decoded to the end of its
target bucket, in one loop over the whole cache and in segments of growing cache width
(``decoding.cache_widths``, the default from T = 256 on).

    python benchmarks/decode_speed.py          # Transformer-XL, T5, RoPE at 128 x 256, 256 x 512
    python benchmarks/decode_speed.py --schemes rope --shapes 512x1024
    python benchmarks/decode_speed.py --config.model.architecture=decoder_only

The model is ``--config``'s (default configs/randomized_pe_benchmark.py: 5 + 5 layers, d_model
64, 8 heads) with random weights; the batch is ``eval.batch_size`` rows of random tokens with
positions drawn per row as evaluation draws them (sorted, without repeats, below the config's
``randomize.max_position``; 0, 1, ... when positions are not randomized). No EOS ends a row
early, so every row decodes all T steps. Per scheme, shape and loop: the first call (compile
and one decoding), the median of ``--repeats`` decodings after it, ms per step and decoded
tokens/s; the two loops must decode the same tokens.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx
from step_timing import run

from pe_research.config import collect_overrides, load_config
from pe_research.core.errors import UsageError
from pe_research.model.decoding import NEVER, cache_widths, greedy_decode
from pe_research.model.factory import build_model

REPO = Path(__file__).resolve().parents[1]
VOCAB = 16  # token ids 3..15 are drawn; the speed does not depend on the vocabulary


def parse_shapes(text: str) -> list[tuple[int, int]]:
    """``"128x256,256x512"`` -> [(128, 256), (256, 512)]: source and target widths."""
    shapes = []
    for item in text.split(","):
        source, _, target = item.partition("x")
        if not (source.isdigit() and target.isdigit() and int(source) > 0 and int(target) > 0):
            raise UsageError(f"--shapes {text!r}: give SOURCExTARGET widths, e.g. 128x256,256x512")
        shapes.append((int(source), int(target)))
    return shapes


def drawn_positions(key: jax.Array, rows: int, width: int, limit: int) -> jax.Array:
    """``[rows, width]`` sorted positions drawn without repeats below ``limit`` (0, 1, ...
    when ``limit`` is 0: positions not randomized)."""
    if limit <= 0:
        return jnp.broadcast_to(jnp.arange(width), (rows, width))
    draw = jax.vmap(lambda k: jnp.sort(jax.random.choice(k, limit, (width,), replace=False)))
    return draw(jax.random.split(key, rows))


def decoding(model, batch: int, source_width: int, target_width: int, limit: int):
    """A jitted decoding of one random batch: ``widths -> tokens [B, T]``, and the state."""
    keys = jax.random.split(jax.random.key(0), 3)
    source = jax.random.randint(keys[0], (batch, source_width), 3, VOCAB)
    source_positions = drawn_positions(keys[1], batch, source_width, limit)
    target_positions = drawn_positions(keys[2], batch, target_width, limit)
    source_mask = jnp.ones((batch, source_width), bool)
    graphdef, state = nnx.split(model)

    def decode(state, widths):
        return greedy_decode(nnx.merge(graphdef, state), source, source_positions, source_mask,
                             target_positions, eos_id=NEVER, widths=widths)

    return jax.jit(decode, static_argnums=1), state


def timed(decode, state, widths: tuple[int, ...], repeats: int) -> tuple[float, float, np.ndarray]:
    """First-call seconds, median seconds of ``repeats`` calls after it, and the tokens."""
    start = time.perf_counter()
    tokens = np.asarray(jax.block_until_ready(decode(state, widths)))
    first = time.perf_counter() - start
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        jax.block_until_ready(decode(state, widths))
        times.append(time.perf_counter() - start)
    return first, statistics.median(times), tokens


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--config", default=str(REPO / "configs" / "randomized_pe_benchmark.py"))
    parser.add_argument("--schemes", default="transformer_xl,t5,rope",
                        help="comma-separated values of model.pe.type")
    parser.add_argument("--shapes", default="128x256,256x512",
                        help="SOURCExTARGET widths (the target bucket T sets the segments)")
    parser.add_argument("--batch-size", type=int, default=0, help="rows (default eval.batch_size)")
    parser.add_argument("--repeats", type=int, default=3, help="timed decodings after the first")
    overrides, rest = collect_overrides(sys.argv[1:])
    args = parser.parse_args(rest)
    shapes = parse_shapes(args.shapes)
    if args.batch_size < 0 or args.repeats < 1:
        raise UsageError(f"--batch-size {args.batch_size} --repeats {args.repeats}: give a "
                         "batch size >= 0 (0: eval.batch_size) and repeats >= 1")
    configs = {s: load_config(args.config, [*overrides, f"--config.model.pe.type={s}"])
               for s in args.schemes.split(",") if s}  # all checked before anything compiles
    device = jax.devices()[0]
    print(f"device: {device.device_kind} ({jax.default_backend()}), jax {jax.__version__}\n")
    print("| scheme | architecture | S x T | loop (cache widths) | first call (s) | s | "
          "ms/step | tokens/s | same tokens |")
    print("|---|---|---|---|---:|---:|---:|---:|---|")
    for scheme, config in configs.items():
        batch = args.batch_size or config.eval.batch_size
        model = build_model(config, VOCAB)
        limit = int(config.model.pe.randomize.max_position)
        for source_width, target_width in shapes:
            decode, state = decoding(model, batch, source_width, target_width,
                                     max(limit, source_width + target_width) if limit else 0)
            loops = {"one": (target_width,), "segments": cache_widths(target_width)}
            reference = None
            for loop, widths in loops.items():
                if loop == "segments" and len(widths) == 1:
                    continue  # below 256 the default is the one loop
                first, seconds, tokens = timed(decode, state, widths, args.repeats)
                same = "-" if reference is None else str(bool((tokens == reference).all()))
                reference = tokens if reference is None else reference
                print(f"| {scheme} | {config.model.architecture} | {source_width} x "
                      f"{target_width} | {loop} {widths} | {first:.1f} | {seconds:.3f} | "
                      f"{1e3 * seconds / target_width:.2f} | "
                      f"{batch * target_width / seconds:,.0f} | {same} |", flush=True)


if __name__ == "__main__":
    run(main)
