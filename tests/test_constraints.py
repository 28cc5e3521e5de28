"""The suite runs on the versions constraints.txt pins: make test and .ci/run install with it."""

from __future__ import annotations

import importlib.metadata

from conftest import REPO


def pinned() -> dict[str, str]:
    lines = (REPO / "constraints.txt").read_text().splitlines()
    return dict(line.split("==", 1) for line in lines if line and not line.startswith("#"))


def test_the_installed_versions_are_the_tested_ones():
    pins = pinned()
    assert {"jax", "jaxlib", "flax", "optax", "orbax-checkpoint", "wandb"} <= set(pins)
    installed = {name: importlib.metadata.version(name) for name in pins}
    assert installed == pins
