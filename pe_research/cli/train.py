"""``pe-research train --config configs/x.py [--config.KEY=VALUE ...] --workdir runs/NAME``."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from pe_research import runtime
from pe_research.config import load_config


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", required=True, metavar="FILE",
                        help="config file defining get_config(), e.g. configs/default.py")
    parser.add_argument("--workdir", required=True, metavar="DIR",
                        help="run directory; an existing one is resumed from its latest "
                             "checkpoint")


def run(args: argparse.Namespace) -> int:
    """Load and validate the config, train, print where everything is."""
    config = load_config(args.config, args.config_overrides)
    from pe_research.training.loop import train
    from pe_research.training.step_loop import DivergedError

    try:
        result = train(config, Path(args.workdir))
    except DivergedError as error:
        print(f"pe-research train: {error}", file=sys.stderr)
        return 1
    print(f"run directory:  {result.run_dir}")
    print(f"checkpoints:    {result.checkpoint_dir}")
    print(f"W&B run:        {result.wandb_run or 'disabled'}")
    print(f"train step compilations: {result.compilations}{runtime.cache_note()}; "
          f"{result.steps_per_second:.1f} steps/s in the last window")
    return 0
