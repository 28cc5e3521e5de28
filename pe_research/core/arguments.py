"""Config overrides on a command line, ``--config.KEY=VALUE``: found and split, with no import
of the heavy layers, so that ``pe-research --help`` stays fast."""

from __future__ import annotations

from collections.abc import Sequence

from pe_research.core.errors import ConfigError

OVERRIDE_PREFIX = "--config."
OVERRIDE_HELP = ("Config values: --config.KEY=VALUE, e.g. --config.model.pe.type=alibi "
                 "--config.train.steps=2000 (a tuple: --config.data.train_lengths=\"(1, 8)\"); "
                 "`pe-research config show CONFIG --keys` lists every key, its default and what "
                 "it may be.")


def split_override(text: str) -> tuple[str, str]:
    """``'--config.a.b=v'`` or ``'a.b=v'`` -> ``('a.b', 'v')``."""
    body = text[len(OVERRIDE_PREFIX):] if text.startswith(OVERRIDE_PREFIX) else text
    key, sep, value = body.partition("=")
    if not sep or not key:
        raise ConfigError("--config", text, "overrides look like --config.train.steps=100")
    return key, value


def collect_overrides(argv: Sequence[str]) -> tuple[list[str], list[str]]:
    """Split command-line leftovers into config overrides (``--config.k=v`` or ``--config.k v``)
    and everything else."""
    overrides, rest = [], []
    args = list(argv)
    while args:
        arg = args.pop(0)
        if not arg.startswith(OVERRIDE_PREFIX):
            rest.append(arg)
        elif "=" in arg:
            overrides.append(arg)
        elif args and not args[0].startswith("--"):
            overrides.append(f"{arg}={args.pop(0)}")
        else:
            raise ConfigError(arg[len(OVERRIDE_PREFIX):], None, f"give a value: {arg}=VALUE")
    return overrides, rest
