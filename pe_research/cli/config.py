"""``pe-research config show``: the config a command would run, resolved, or every key.

    pe-research config show configs/default.py
    pe-research config show configs/default.py --config.model.pe.type=alibi --config.seed=3
    pe-research config show configs/default.py --keys

The first two print every key of the validated config, overrides applied, as
``key = value`` lines (the form ``--config.key=value`` takes). ``--keys`` lists every key with
its default for this config's scheme and task, and the values it may take where they are a
fixed set.
"""

from __future__ import annotations

import argparse
from typing import Any


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("action", choices=("show",), help="what to do: show")
    parser.add_argument("config", metavar="CONFIG", help="a config file, e.g. configs/default.py")
    parser.add_argument("--keys", action="store_true",
                        help="every key with its default and its allowed values")


def choices() -> dict[str, tuple[Any, ...]]:
    """The keys whose values are a fixed set, and the set."""
    from pe_research.config import schema
    from pe_research.data.batches import LENGTH_STREAMS
    from pe_research.model import config as model_config
    from pe_research.positional import SCHEMES
    from pe_research.positional.randomize import DRAWS, EVAL_POLICIES
    from pe_research.positional.rope_scaling import SCALING_TYPES
    from pe_research.tasks import TASKS
    from pe_research.tasks.base import LENGTH_SAMPLING

    return {"model.pe.type": tuple(sorted(SCHEMES)), "task.name": tuple(sorted(TASKS)),
            "model.activation": model_config.ACTIVATIONS,
            "model.norm": model_config.NORM_PLACEMENTS,
            "model.dtype": tuple(model_config.DTYPES),
            "model.attention_implementation": model_config.ATTENTION_IMPLEMENTATIONS,
            "model.architecture": model_config.ARCHITECTURES,
            "model.pe.randomize.eval_policy": EVAL_POLICIES,
            "model.pe.randomize.per": DRAWS, "model.pe.randomize.eval_per": DRAWS,
            "model.pe.scaling.type": SCALING_TYPES,
            "data.length_sampling": LENGTH_SAMPLING, "data.length_stream": LENGTH_STREAMS,
            "train.schedule": schema.SCHEDULES,
            "wandb.mode": schema.WANDB_MODES}


def run(args: argparse.Namespace) -> int:
    from pe_research.config import base_config, flat_config, load_config, to_dict

    config = load_config(args.config, args.config_overrides)
    values = flat_config(to_dict(config))
    if not args.keys:
        for key, value in values.items():
            print(f"{key} = {value!r}")
        return 0
    defaults = flat_config(to_dict(base_config(config.task.name, config.model.pe.type)))
    allowed = choices()
    for key, value in values.items():
        line = f"{key} = {value!r}  (default {defaults.get(key)!r}"
        line += f"; one of {', '.join(map(str, allowed[key]))})" if key in allowed else ")"
        print(line)
    return 0
