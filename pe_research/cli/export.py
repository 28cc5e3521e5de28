"""``pe-research export RUN_DIR --to FILE.safetensors``: a run's parameters for elsewhere.

    pe-research export runs/copy_alibi --to copy_alibi.safetensors
    pe-research export runs/copy_alibi --to copy_alibi_latest.safetensors --step latest

Each tensor is named by its NNX path (``decoder_layers.0.attention.query.kernel``); the
file's metadata holds the run's config as JSON, the step and the package version.
"""

from __future__ import annotations

import argparse


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run_dir", metavar="RUN_DIR", help="a trained run directory")
    parser.add_argument("--to", required=True, metavar="FILE",
                        help="the safetensors file to write (its folder is created)")
    parser.add_argument("--step", default="best", help="'best', 'latest' or a step number")


def run(args: argparse.Namespace) -> int:
    from pe_research.runs.export import export_run, read_export

    path = export_run(args.run_dir, args.to, args.step)
    _, tensors, metadata = read_export(path)
    count = sum(tensor.size for tensor in tensors.values())
    print(f"{path}: {len(tensors)} tensors, {count:,} parameters, step {metadata['step']}")
    return 0
