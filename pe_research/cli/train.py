"""``pe-research train``: train (or resume) the run directory of a config file.

    pe-research train --config configs/default.py --workdir runs/copy_alibi \\
        --config.model.pe.type=alibi --config.seed=1
    pe-research train --config configs/default.py --workdir runs/copy_rope_pi \\
        --config.data.train_lengths="(1, 32)" --config.train.init_from=runs/copy_rope \\
        --config.model.pe.scaling.type=pi --config.model.pe.scaling.factor=2

Rerunning the same command resumes from the newest good checkpoint. On SIGTERM or SIGUSR1 it
checkpoints the step reached and exits with code 75, on Ctrl-C with 130: rerun to continue.
`pe-research config show CONFIG [--config.KEY=VALUE ...]` prints the config that would train.
"""

from __future__ import annotations

import argparse
import signal
import sys
from pathlib import Path


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", required=True, metavar="FILE",
                        help="config file defining get_config(), e.g. configs/default.py")
    parser.add_argument("--workdir", required=True, metavar="DIR",
                        help="run directory; an existing one is resumed from its latest "
                             "checkpoint")


def run(args: argparse.Namespace) -> int:
    """Load and validate the config, train, print where everything is."""
    from pe_research import runtime
    from pe_research.config import load_config
    from pe_research.training.loop import train
    from pe_research.training.preemption import EXIT_CODE, INTERRUPTED_EXIT, PreemptedError
    from pe_research.training.step_loop import DivergedError

    config = load_config(args.config, args.config_overrides)
    try:
        result = train(config, Path(args.workdir))
    except DivergedError as error:
        print(f"pe-research train: {error}", file=sys.stderr)
        return 1
    except PreemptedError as error:
        print(f"pe-research train: {error}", file=sys.stderr)
        return INTERRUPTED_EXIT if error.signal_number == signal.SIGINT else EXIT_CODE
    print(f"run directory:  {result.run_dir}")
    print(f"checkpoints:    {result.checkpoint_dir}")
    print(f"W&B run:        {result.wandb_run or 'disabled'}")
    print(f"train step compilations: {result.compilations}; "
          f"{result.steps_per_second:.1f} steps/s in the last window")
    if runtime.cache_line():
        print(runtime.cache_line())
    return 0
