"""Sweep files over the tiny config, and the sweep driver (in this process or a child), for
tests."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import jax
import numpy as np
from conftest import DEFAULT_CONFIG, REPO, cli_command, cli_here, subprocess_env, tiny_overrides
from flax import nnx

from pe_research.runs.restore import load_run

GRID = 'product({"model.pe.type": ["rope", "alibi"], "data.train_lengths": [(1, 6), (1, 8)]})'


def write_sweep(path: Path, grid: str = GRID, seeds: str = "(0, 1)",
                members_per_program: str = "'point'", **changes) -> Path:
    """A sweep file over the tiny config (W&B off), ``grid``, ``seeds`` and
    ``members_per_program`` as Python text."""
    overrides = tiny_overrides(**{"wandb.mode": "disabled", "train.steps": 20, **changes})
    path.write_text(f'''"""pe-research sweep {path.name} --workdir DIR"""
from pe_research.config import load_config
from pe_research.sweeps import Sweep, product


def get_config():
    return load_config({str(DEFAULT_CONFIG)!r}, {overrides!r})


def sweep():
    return Sweep(grid={grid}, seeds={seeds}, members_per_program={members_per_program})
''')
    return path


def sweep_command(sweep_file: Path, workdir: Path, *extra: str) -> list[str]:
    return [*cli_command(), "sweep", str(sweep_file), "--workdir", str(workdir), *extra]


def sweep_here(sweep_file: Path, workdir: Path, *extra: str) -> subprocess.CompletedProcess:
    """``pe-research sweep`` driven from this process (its workers are processes of their own);
    exit code and output captured."""
    return cli_here("sweep", str(sweep_file), "--workdir", str(workdir), *extra)


def start_sweep(sweep_file: Path, workdir: Path) -> subprocess.Popen:
    """The sweep driver in the background, in its own process group (its workers join it)."""
    return subprocess.Popen(sweep_command(sweep_file, workdir, "--no-report"), cwd=REPO,
                            env=subprocess_env(), start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def manifest_states(workdir: Path) -> dict[str, str]:
    manifest = json.loads((workdir / "sweep.json").read_text())
    return {name: run["state"] for name, run in manifest["runs"].items()}


def wait_for(predicate, timeout: float = 300) -> None:
    """Poll ``predicate`` every 0.2 s; AssertionError after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.2)
    raise AssertionError("timed out")



def run_params(run_dir: Path) -> list[np.ndarray]:
    """The parameters of a run's latest checkpoint, as arrays in tree order."""
    model = load_run(run_dir, "latest").model
    return [np.asarray(leaf) for leaf in jax.tree.leaves(nnx.state(model, nnx.Param))]
