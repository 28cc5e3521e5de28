"""A save that fails for want of space leaves the last good state: the previous checkpoint,
metrics.jsonl and config.json intact, one line on stderr, and the same command goes on once
space is freed, ending as an uninterrupted run ends.

The run directory sits on a 4 MiB tmpfs mounted in a user and mount namespace of its own
(``unshare``), filled up after the first checkpoint.
"""

from __future__ import annotations

import re
import shlex
import subprocess

import jax
import numpy as np
import pytest
from conftest import DEFAULT_CONFIG, cli_command, subprocess_env, tiny_overrides

from pe_research.runs.restore import load_run
from pe_research.runs.tracking import read_metrics

SCRIPT = """
set -u
mkdir -p "$MNT" && mount -t tmpfs -o size=4m none "$MNT" || exit 9
train() {{ {train} --workdir "$MNT/run" "$@"; }}
train --config.train.steps=20 > "$OUT/first.log" 2>&1; echo $? > "$OUT/first.rc"
free=$(df -k --output=avail "$MNT" | tail -1)  # leave 150 KiB: logs fit, a checkpoint not
dd if=/dev/zero of="$MNT/filler" bs=1k count=$((free - 150)) 2> /dev/null
train > "$OUT/full.out" 2> "$OUT/full.err"; echo $? > "$OUT/full.rc"
ls "$MNT/run/checkpoints" > "$OUT/full.steps"
mkdir "$OUT/full" && cp "$MNT/run/metrics.jsonl" "$MNT/run/config.json" "$OUT/full/"
rm "$MNT/filler"
train > "$OUT/freed.log" 2>&1; echo $? > "$OUT/freed.rc"
cp -r "$MNT/run" "$OUT/run"
"""


def records(run_dir_or_file) -> list[dict]:
    return [{k: v for k, v in r.items() if k not in ("time", "train/steps_per_second")}
            for r in read_metrics(run_dir_or_file)]


@pytest.mark.slow
def test_a_full_disk_keeps_the_last_checkpoint_and_the_run_goes_on(trained_run_dir, tmp_path):
    overrides = tiny_overrides(**{"wandb.mode": "disabled"})
    train = " ".join(shlex.quote(word) for word in [
        *cli_command(), "train", "--config", str(DEFAULT_CONFIG), *overrides])
    out = tmp_path / "out"
    out.mkdir()
    env = {**subprocess_env(), "MNT": str(tmp_path / "mnt"), "OUT": str(out)}
    subprocess.run(["unshare", "--user", "--map-root-user", "--mount", "bash", "-c",
                    SCRIPT.format(train=train)], env=env, check=True, timeout=600)

    assert (out / "first.rc").read_text().strip() == "0"
    assert (out / "full.rc").read_text().strip() == "2"
    errors = (out / "full.err").read_text().replace("\r", "\n").splitlines()
    errors = [line for line in errors if not line.startswith("train:") and line.strip()]
    assert len(errors) == 1 and re.fullmatch(
        rf"pe-research train: no space left for {tmp_path}/mnt/run/checkpoints \(No space left "
        r"on device: step 40's checkpoint needs about [\d,]+ KiB and [\d,]+ KiB are free\); free "
        r"disk space and rerun \(--debug for the traceback\)", errors[0]), errors
    assert (out / "full.steps").read_text().split() == ["20"]  # the last good checkpoint
    up_to_20 = [record for record in records(trained_run_dir) if record["step"] <= 20]
    assert [record for record in records(out / "full") if record["step"] <= 20] == up_to_20
    assert (out / "full" / "config.json").read_text() == (out / "run" / "config.json").read_text()
    assert "resuming" in (out / "full.out").read_text()  # from 20: its save at 40 failed
    assert (out / "freed.rc").read_text().strip() == "0"
    assert "resuming" in (out / "freed.log").read_text()
    assert records(out / "run") == records(trained_run_dir)
    for got, want in zip(jax.tree.leaves(load_run(out / "run", "40").params),
                         jax.tree.leaves(load_run(trained_run_dir, "40").params), strict=True):
        np.testing.assert_array_equal(np.asarray(got), np.asarray(want))
