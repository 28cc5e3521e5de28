"""Every run records what produced it: library versions, device, the checkout's commit and
dirty flag, the command line; a resume under other versions says so in one line."""

from __future__ import annotations

import importlib.metadata
import subprocess

import pytest
from conftest import DEFAULT_CONFIG, REPO, tiny_overrides

import pe_research
from pe_research.config import load_config
from pe_research.runs import provenance
from pe_research.runs.run_dir import RunDir
from pe_research.training.loop import train


def test_a_trained_run_holds_its_versions_device_commit_and_command(trained_run_dir):
    entries = provenance.read(RunDir(trained_run_dir).provenance)
    assert len(entries) == 1 and entries[0]["step"] == 0
    entry = entries[0]
    for name in ("jax", "jaxlib", "flax", "optax", "orbax-checkpoint", "numpy"):
        assert entry["versions"][name] == importlib.metadata.version(name)
    assert entry["device"]["platform"] == "cpu" and entry["device"]["count"] >= 1
    assert entry["command"][1:3] == ["train", "--config"]
    if (REPO / ".git").exists():  # a checkout, as in CI
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True,
                              text=True, check=True).stdout.strip()
        assert entry["git"]["commit"] == head


def test_the_eval_record_holds_the_evaluating_environment(trained_run_dir):
    from pe_research.evaluation.range_eval import EvalResult
    from pe_research.evaluation.results import results_record
    from pe_research.runs.restore import load_run

    empty = EvalResult(rows=[], compilations=0, compiled_shapes=[], seconds=0.0)
    record = results_record(load_run(trained_run_dir), empty, "probe")
    assert record["environment"]["versions"]["jax"] == importlib.metadata.version("jax")
    assert record["environment"]["device"]["platform"] == "cpu"


def test_the_dirty_flag_follows_an_uncommitted_change(tmp_path):
    repo = tmp_path / "checkout"
    (repo / "pe_research").mkdir(parents=True)
    tracked = repo / "pe_research" / "a.py"
    tracked.write_text("x = 1\n")

    def git(*args):
        subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True)

    git("init", "-q")
    git("add", "-A")
    git("-c", "user.email=t@t", "-c", "user.name=t", "commit", "-qm", "one")
    clean = provenance.git_state.__wrapped__(repo)
    assert clean["dirty"] is False and len(clean["commit"]) == 40
    tracked.write_text("x = 2\n")
    assert provenance.git_state.__wrapped__(repo) == {"commit": clean["commit"], "dirty": True}
    assert provenance.git_state.__wrapped__(tmp_path) is None  # not a checkout


def test_a_resume_under_other_versions_prints_one_line(tmp_path, monkeypatch, capsys):
    run_dir = tmp_path / "run"
    overrides = {"train.steps": 4, "train.log_every": 2, "train.checkpoint_every": 2,
                 "train.eval_every": 0, "wandb.mode": "disabled"}
    train(load_config(DEFAULT_CONFIG, tiny_overrides(**overrides)), run_dir)
    real = provenance.package_versions()
    monkeypatch.setattr(provenance, "package_versions",
                        lambda: {**real, "jax": "0.0.1-other"})
    capsys.readouterr()
    train(load_config(DEFAULT_CONFIG, tiny_overrides(**{**overrides, "train.steps": 6})),
          run_dir)
    lines = [line for line in capsys.readouterr().out.splitlines() if "library versions" in line]
    assert lines == [f"run: resumed under other library versions than its last start: jax "
                     f"{real['jax']} -> 0.0.1-other (recorded in provenance.json)"]
    entries = provenance.read(RunDir(run_dir).provenance)
    assert [entry["step"] for entry in entries] == [0, 4]


def test_version_changes_name_each_library_that_moved():
    assert provenance.version_changes({"jax": "1", "numpy": "2"}, {"jax": "1", "numpy": "3"}) \
        == "numpy 2 -> 3"
    assert provenance.version_changes({"jax": "1"}, {"jax": "1"}) is None


def test_the_package_says_its_version():
    assert pe_research.__version__ == importlib.metadata.version("pe_research")


@pytest.mark.parametrize("name", pe_research.__all__)
def test_the_lazy_api_is_visible_and_complete(name):
    assert name in dir(pe_research)
    assert callable(getattr(pe_research, name))
