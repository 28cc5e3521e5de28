"""The exception types for bad input a user can fix, and the checks every layer shares.

The CLI prints a ``UsageError`` as one line and exits 2; ``--debug`` shows the traceback.
"""

from __future__ import annotations

from collections.abc import Sequence


class UsageError(Exception):
    """Bad input or a busy resource the user can fix; its message names the problem and the fix."""


class ConfigError(UsageError, ValueError):
    """Raised before anything is compiled when a config value cannot work."""

    def __init__(self, key: str, value: object, valid: str):
        self.key, self.value, self.valid = key, value, valid
        super().__init__(f"{key}={value!r} is invalid: {valid}")


def check_choice(key: str, value: object, choices: Sequence[object]) -> None:
    """ConfigError unless ``value`` is one of ``choices``."""
    if value not in choices:
        raise ConfigError(key, value, f"choose one of {tuple(choices)}")


def check_divisible(key: str, value: int, divisor: int, what: str) -> None:
    """ConfigError unless ``value`` splits evenly over ``divisor`` devices or processes."""
    if value % divisor:
        raise ConfigError(key, value, f"must be divisible by the {what} {divisor}")
