"""Metric writers: JSONL content and resume, process 0 only, real W&B offline, W&B failures."""

from __future__ import annotations

import json
import sys
import time
import warnings

import pytest

from pe_research.runs.tracking import (
    JsonlWriter,
    NullWriter,
    WandbWriter,
    make_writer,
    read_metrics,
    wandb_mode,
    wandb_writer,
)

WANDB_OFFLINE = {"mode": "offline", "project": "pe-tests", "entity": "", "group": "unit",
                 "tags": ("tracking",), "name": ""}


def test_jsonl_records_and_nonfinite_values(tmp_path):
    writer = JsonlWriter(tmp_path / "metrics.jsonl")
    writer.log(1, {"train/loss": 2.5})
    writer.log(2, {"train/loss": float("nan"), "train/grad_norm": float("inf")})
    writer.finish()
    records = read_metrics(tmp_path)
    assert [r["step"] for r in records] == [1, 2]
    assert records[0]["train/loss"] == 2.5
    assert records[1]["train/loss"] == "nan" and records[1]["train/grad_norm"] == "inf"


def test_jsonl_resume_drops_records_after_the_resumed_step(tmp_path):
    writer = JsonlWriter(tmp_path / "metrics.jsonl")
    for step in range(1, 6):
        writer.log(step, {"x": float(step)})
    writer.finish()
    resumed = JsonlWriter(tmp_path / "metrics.jsonl", resume_step=3)
    resumed.log(4, {"x": 40.0})
    resumed.finish()
    assert [(r["step"], r["x"]) for r in read_metrics(tmp_path)] == [
        (1, 1.0), (2, 2.0), (3, 3.0), (4, 40.0)]


def test_fresh_writer_replaces_an_old_file(tmp_path):
    (tmp_path / "metrics.jsonl").write_text(json.dumps({"step": 9}) + "\n")
    writer = JsonlWriter(tmp_path / "metrics.jsonl")
    writer.log(1, {"x": 1.0})
    writer.finish()
    assert [r["step"] for r in read_metrics(tmp_path)] == [1]


def test_only_process_zero_writes(tmp_path):
    writer = make_writer(WANDB_OFFLINE, tmp_path, process_index=1)
    assert isinstance(writer, NullWriter)
    writer.log(1, {"x": 1.0})
    writer.finish()
    assert list(tmp_path.iterdir()) == []


def test_wandb_mode_from_environment(monkeypatch):
    monkeypatch.delenv("WANDB_MODE", raising=False)
    assert wandb_mode("offline") == "offline"
    monkeypatch.setenv("WANDB_MODE", "disabled")
    assert wandb_mode("offline") == "disabled"
    monkeypatch.setenv("WANDB_MODE", "dryrun")
    assert wandb_mode("online") == "offline"


def test_wandb_disabled_by_environment_writes_no_wandb_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "disabled")
    writer = make_writer(WANDB_OFFLINE, tmp_path)
    writer.log(1, {"x": 1.0})
    writer.finish()
    assert writer.wandb_run_path is None
    assert not (tmp_path / "wandb").exists()
    assert read_metrics(tmp_path)[0]["x"] == 1.0


@pytest.mark.slow
def test_wandb_offline_run_holds_config_and_metrics(tmp_path, monkeypatch):
    monkeypatch.delenv("WANDB_MODE", raising=False)
    writer = make_writer(WANDB_OFFLINE, tmp_path,
                         hparams={"model": {"pe": {"type": "alibi-marker-7731"}}})
    writer.log(1, {"train/loss_marker_5521": 1.25})
    run_path = writer.wandb_run_path
    writer.finish()
    run_dir = tmp_path / "wandb"
    assert run_path is not None and run_path.startswith(str(run_dir))
    wandb_files = list(run_dir.glob("offline-run-*/run-*.wandb"))
    assert len(wandb_files) == 1
    # W&B's service process may still be flushing the run file when finish() returns.
    deadline = time.monotonic() + 30
    while b"train/loss_marker_5521" not in (content := wandb_files[0].read_bytes()):
        assert time.monotonic() < deadline, content[:200]
        time.sleep(0.2)
    assert b"alibi-marker-7731" in content  # the config was logged as W&B config
    assert (tmp_path / "wandb_run_id").read_text() in wandb_files[0].name


def test_wandb_not_installed_warns_once_and_jsonl_continues(tmp_path, monkeypatch):
    monkeypatch.delenv("WANDB_MODE", raising=False)
    monkeypatch.setitem(sys.modules, "wandb", None)  # `import wandb` raises ImportError
    with pytest.warns(UserWarning, match="W&B disabled") as caught:
        writer = make_writer(WANDB_OFFLINE, tmp_path)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no second warning
        for step in range(1, 4):
            writer.log(step, {"x": float(step)})
        writer.finish()
    assert len(caught) == 1
    assert [r["x"] for r in read_metrics(tmp_path)] == [1.0, 2.0, 3.0]


@pytest.mark.slow
def test_wandb_online_without_credentials_falls_back_to_an_offline_run(tmp_path, monkeypatch,
                                                                        capsys):
    """One warning, then a real offline run under the same id that `wandb sync` can upload."""
    for name in ("WANDB_MODE", "WANDB_API_KEY", "WANDB_SILENT"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))  # no ~/.netrc with a key
    monkeypatch.setenv("WANDB_CONFIG_DIR", str(tmp_path / "home"))
    with pytest.warns(UserWarning, match="could not start online") as caught:
        writer = WandbWriter(tmp_path / "run", "online", project="p", entity="no-such-entity")
    assert len(caught) == 1
    writer.log(1, {"x": 1.0})
    writer.finish()
    assert writer.run is not None and writer.run.offline
    run_id = (tmp_path / "run" / "wandb_run_id").read_text()
    sessions = list((tmp_path / "run" / "wandb").glob(f"offline-run-*-{run_id}*"))
    assert len(sessions) == 1 and list(sessions[0].glob("*.wandb"))
    out = capsys.readouterr().out.strip().splitlines()
    assert out == [f"W&B: offline run in {sessions[0]}; upload with: wandb sync {sessions[0]}"]


def test_wandb_prints_one_line_per_run(tmp_path, monkeypatch, capfd):
    """No W&B chatter on the console: one line when the run starts, nothing when it ends."""
    for name in ("WANDB_MODE", "WANDB_SILENT"):
        monkeypatch.delenv(name, raising=False)
    writer = wandb_writer(WANDB_OFFLINE, tmp_path)
    writer.log(1, {"x": 1.0})
    writer.finish()
    captured = capfd.readouterr()
    assert captured.out.strip().splitlines() == [writer.describe()]
    assert "wandb sync" in writer.describe() and captured.err.strip() == ""


def test_wandb_writer_resumes_the_runs_id_only_on_process_zero(tmp_path, monkeypatch):
    monkeypatch.delenv("WANDB_MODE", raising=False)
    assert wandb_writer({**WANDB_OFFLINE, "mode": "disabled"}, tmp_path) is None
    assert wandb_writer(WANDB_OFFLINE, tmp_path, process_index=1) is None
    assert not (tmp_path / "wandb").exists()
    first = wandb_writer(WANDB_OFFLINE, tmp_path)
    first.finish()
    second = wandb_writer(WANDB_OFFLINE, tmp_path)
    second.finish()
    run_id = (tmp_path / "wandb_run_id").read_text()
    sessions = sorted((tmp_path / "wandb").glob("offline-run-*"))
    assert len(sessions) == 2 and all(run_id in s.name for s in sessions)
