"""Atomic writes: a failed write leaves the old file and no temporary behind."""

from __future__ import annotations

import json

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402

from pe_research.core.atomic_files import atomic_open, atomic_savefig, atomic_write_text  # noqa: E402
from pe_research.runs.tracking import JsonlWriter  # noqa: E402


def test_a_failed_write_keeps_the_old_file_and_leaves_no_temporary(tmp_path):
    path = atomic_write_text(tmp_path / "a.json", "old")
    with pytest.raises(RuntimeError), atomic_open(path) as handle:
        handle.write("half of the new")
        raise RuntimeError("crash mid-write")
    assert path.read_text() == "old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.json"]
    atomic_write_text(path, "new")
    assert path.read_text() == "new" and len(list(tmp_path.iterdir())) == 1
    assert (path.stat().st_mode & 0o777) == 0o644


def test_figures_are_written_whole(tmp_path):
    figure = plt.figure()
    path = atomic_savefig(figure, tmp_path / "f.png", dpi=50)
    plt.close(figure)
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert [p.name for p in tmp_path.iterdir()] == ["f.png"]


def test_metrics_truncation_on_resume_is_atomic(tmp_path, monkeypatch):
    writer = JsonlWriter(tmp_path / "metrics.jsonl")
    for step in (1, 2, 3):
        writer.log(step, {"x": float(step)})
    writer.finish()
    replaced = []
    monkeypatch.setattr("os.replace", lambda a, b: replaced.append(b) or
                        __import__("shutil").move(a, b))
    JsonlWriter(tmp_path / "metrics.jsonl", resume_step=2).finish()
    assert [str(p) for p in replaced] == [str(tmp_path / "metrics.jsonl")]
    lines = (tmp_path / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(line)["step"] for line in lines] == [1, 2]
