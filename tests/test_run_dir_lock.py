"""One writer per run directory: a second trainer is refused at once; a dead holder is not one."""

from __future__ import annotations

import fcntl
import os
import shutil
import signal
import subprocess
import sys
import time

import jax
import numpy as np
import pytest
from conftest import (
    DEFAULT_CONFIG,
    REPO,
    cli_command,
    cli_here,
    subprocess_env,
    tiny_overrides,
    train_here,
)
from flax import nnx

from pe_research.cli import main
from pe_research.runs.lock import RunDirBusyError, RunDirLock
from pe_research.runs.restore import load_run
from pe_research.runs.tracking import read_metrics

HOLD = "import sys, time; from pe_research.runs.lock import RunDirLock; " \
       "RunDirLock(sys.argv[1]).acquire(); print('held', flush=True); time.sleep(60)"


def _is_locked(path) -> bool:
    """True while another process holds ``path``'s flock."""
    fd = os.open(path, os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False


def test_second_holder_is_refused_naming_the_first_and_a_killed_holder_frees_it(tmp_path):
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(tmp_path)],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(RunDirBusyError, match=f"process {holder.pid} on {os.uname()[1]}"):
            RunDirLock(tmp_path).acquire()
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    with RunDirLock(tmp_path):  # the stale lock file stays, but the kernel dropped the lock
        assert (tmp_path / ".lock").read_text().split()[0] == str(os.getpid())
    with RunDirLock(tmp_path):  # released on exit
        pass


def test_readers_ignore_the_lock(trained_run_dir, tmp_path, monkeypatch):
    """Eval of a run that is being trained reads its latest finished checkpoint."""
    monkeypatch.setenv("WANDB_MODE", "disabled")
    run_dir = tmp_path / "run"
    shutil.copytree(trained_run_dir, run_dir)
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(run_dir)],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        assert load_run(run_dir, "latest").step == 40
        assert main(["eval", str(run_dir), "--lengths", "4"]) == 0
    finally:
        holder.kill()
        holder.wait()


def _params(run_dir) -> list[np.ndarray]:
    model = load_run(run_dir, "latest").model
    return [np.asarray(leaf) for leaf in jax.tree.leaves(nnx.state(model, nnx.Param))]


@pytest.mark.slow
def test_concurrent_training_is_refused_and_the_first_run_is_unharmed(tmp_path):
    overrides = tiny_overrides(**{"train.steps": 400, "train.checkpoint_every": 100,
                                  "train.log_every": 50, "train.eval_every": 200,
                                  "wandb.mode": "disabled"})
    shared, lone = tmp_path / "shared", tmp_path / "lone"
    train_args = ["train", "--config", str(DEFAULT_CONFIG), *overrides, "--workdir", str(shared)]
    first = subprocess.Popen([*cli_command(), *train_args], cwd=REPO,
                             env=subprocess_env(), stdout=subprocess.DEVNULL,
                             stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while not ((shared / ".lock").exists() and _is_locked(shared / ".lock")):
            assert first.poll() is None and time.monotonic() < deadline, first.stderr.read()
            time.sleep(0.05)
        started = time.monotonic()
        second = cli_here(*train_args)  # from this process: refused while the first trains
        refused_after = time.monotonic() - started
        first_still_running = first.poll() is None
        assert first.wait(timeout=240) == 0, first.stderr.read()[-3000:]
    finally:
        if first.poll() is None:
            first.kill()
    assert second.returncode == 2, second.stderr[-3000:]
    assert second.stderr.strip().splitlines() == [
        f"pe-research train: {shared} is being trained by process {first.pid} on "
        f"{os.uname()[1]} (lock {shared / '.lock'}); wait for it to finish, stop it, or use "
        "another --workdir"]
    assert first_still_running, "the first run ended before the second could be refused"
    print(f"second trainer refused after {refused_after:.1f} s")

    train_here(lone, overrides)
    for a, b in zip(_params(shared), _params(lone), strict=True):
        np.testing.assert_array_equal(a, b)
    strip = lambda records: [{k: v for k, v in r.items() if k != "time" and "per_second" not in k}
                             for r in records]
    assert strip(read_metrics(shared)) == strip(read_metrics(lone))
    assert sorted(p.name for p in (shared / "checkpoints").iterdir()) == \
        sorted(p.name for p in (lone / "checkpoints").iterdir())
