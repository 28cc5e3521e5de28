"""``pe-research``: one console script, one subcommand per module of ``pe_research.cli``.

A subcommand is one module here plus one line in ``COMMANDS``. Each module provides
``add_arguments(parser)`` and ``run(args) -> int``, and its docstring's indented
``pe-research ...`` lines are the examples its ``--help`` shows (their one source). A module is
imported only when its subcommand is used, and imports JAX only inside ``run``, so ``--help``
stays fast. Arguments of the form ``--config.a.b=v`` are collected into
``args.config_overrides`` for every subcommand.

Errors a user can cause (a bad config, a busy run directory, a path that cannot be written) are
printed as one line naming the problem and the fix, with exit code 2; ``--debug`` (or
``PE_RESEARCH_DEBUG=1``) shows the full traceback instead.
"""

from __future__ import annotations

import argparse
import errno
import importlib
import os
import re
import sys
import textwrap
from collections.abc import Sequence
from types import ModuleType

from pe_research.core.arguments import OVERRIDE_HELP, collect_overrides
from pe_research.core.console import own_warnings_on_one_line
from pe_research.core.errors import ConfigError, UsageError

DEBUG_ENV = "PE_RESEARCH_DEBUG"

COMMANDS: dict[str, tuple[str, str]] = {
    "train": ("pe_research.cli.train", "train (or resume) a model from a config file"),
    "data": ("pe_research.cli.data", "inspect tasks and build evaluation sets"),
    "eval": ("pe_research.cli.eval", "evaluate a trained run over a grid of lengths"),
    "compare": ("pe_research.cli.compare", "compare extrapolation curves across runs"),
    "analyze": ("pe_research.cli.analyze", "look inside a trained model's positions and attention"),
    "table": ("pe_research.cli.table", "the papers' table: tasks x schemes, plain and "
              "randomized"),
    "sweep": ("pe_research.cli.sweep", "run a grid of configs (seeds stacked), follow it, "
              "compare it"),
    "config": ("pe_research.cli.config", "print a resolved config, or every key with its default"),
    "export": ("pe_research.cli.export", "write a run's parameters to a safetensors file"),
}
EXAMPLES = """examples:
  pe-research train --config configs/default.py --workdir runs/copy_alibi \\
      --config.model.pe.type=alibi
  pe-research eval runs/copy_alibi --lengths 1:64
  pe-research compare 'runs/copy_*' --group-by model.pe.type
  pe-research train --help          # a subcommand's options and examples"""


def _load(command: str):
    module_name = COMMANDS[command][0]
    try:
        return importlib.import_module(module_name)
    except ModuleNotFoundError as error:
        if error.name != module_name:
            raise
        raise SystemExit(f"pe-research {command}: this subcommand is not available in this "
                         f"installation (module {module_name} not found)") from None


def examples(module: ModuleType) -> str:
    """The example command lines of a subcommand's docstring (indented ``pe-research`` lines and
    their continuations), as the epilog of its ``--help``."""
    lines, taking = [], False
    for line in (module.__doc__ or "").splitlines():
        if re.match(r"\s+pe-research ", line):
            taking = True
        elif not line.startswith("        "):
            taking = False
        if taking:
            lines.append("  " + line[4:])
    return "examples:\n" + "\n".join(lines) if lines else ""


def build_parser(command: str | None) -> argparse.ArgumentParser:
    """The parser, with the arguments of ``command`` (only that module is imported)."""
    parser = argparse.ArgumentParser(
        prog="pe-research", allow_abbrev=False,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description=textwrap.fill("Positional encodings and length extrapolation. "
                                  + OVERRIDE_HELP, 90),
        epilog=EXAMPLES)
    parser.add_argument("--debug", action="store_true",
                        help=f"show full tracebacks, anywhere on the line (or {DEBUG_ENV}=1)")
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, (_, help_text) in COMMANDS.items():
        if name != command:
            subparsers.add_parser(name, help=help_text, description=help_text)
            continue
        module = _load(name)
        sub = subparsers.add_parser(
            name, help=help_text, description=textwrap.fill(f"{help_text}. {OVERRIDE_HELP}", 90),
            epilog=examples(module), formatter_class=argparse.RawDescriptionHelpFormatter,
            allow_abbrev=False)
        module.add_arguments(sub)
        sub.set_defaults(run=module.run)
    return parser


def describe_os_error(error: OSError) -> str:
    """One line for a file-system error: what failed, on which path, and what to do."""
    path = error.filename or "a file"
    if error.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        return f"cannot write {path}: {error.strerror}; choose a directory you can write to"
    if error.errno in (errno.EEXIST, errno.ENOTDIR):
        return (f"{path}: a file is in the way ({error.strerror}); choose another directory "
                "or move the file")
    if error.errno in (errno.ENOSPC, errno.EDQUOT):
        return f"no space left for {path} ({error.strerror}); free disk space and rerun"
    if error.errno == errno.ENOENT:
        return f"{path} does not exist; check the path"
    return f"{path}: {error.strerror or error}; check the path and rerun"


def debug_wanted(argv: Sequence[str]) -> bool:
    return "--debug" in argv or os.environ.get(DEBUG_ENV, "") not in ("", "0", "false")


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``pe-research`` console script."""
    argv = list(sys.argv[1:] if argv is None else argv)
    command = next((arg for arg in argv if not arg.startswith("-")), None)
    parser = build_parser(command if command in COMMANDS else None)
    try:
        overrides, rest = collect_overrides(argv)
    except ConfigError as error:
        parser.error(str(error))
    args = parser.parse_args([arg for arg in rest if arg != "--debug"])
    args.config_overrides = overrides
    from pe_research import runtime  # imports JAX: only once a command runs

    runtime.setup()
    if debug_wanted(argv):
        previous = os.environ.get(DEBUG_ENV)
        os.environ[DEBUG_ENV] = "1"  # the library's own reports show everything too
        try:
            return int(args.run(args) or 0)
        finally:
            if previous is None:
                del os.environ[DEBUG_ENV]
    prefix = f"pe-research {args.command}"
    try:
        with own_warnings_on_one_line():
            return int(args.run(args) or 0)
    except ConfigError as error:
        print(f"{prefix}: config error: {error}", file=sys.stderr)
    except UsageError as error:
        print(f"{prefix}: {error}", file=sys.stderr)
    except OSError as error:
        print(f"{prefix}: {describe_os_error(error)} (--debug for the traceback)",
              file=sys.stderr)
        if type(error).__name__ == "CheckpointWriteError":
            # Orbax's writer threads would report the same failure again at interpreter exit.
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(2)
    except KeyboardInterrupt:
        print(f"{prefix}: interrupted; rerun the same command to go on", file=sys.stderr)
        return 130
    return 2
