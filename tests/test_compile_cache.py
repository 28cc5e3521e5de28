"""The persistent compilation cache (``runtime.setup``): where it goes, how it is switched off, and
that a second process loads the first one's programs and trains to the same numbers."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO, run_train, subprocess_env, tiny_overrides

from pe_research import runtime

PROBE = ("import jax; from pe_research import runtime; d = runtime.setup(); "
         "print(d); print(jax.config.values['jax_compilation_cache_dir']); "
         "print(jax.config.values['jax_persistent_cache_min_compile_time_secs']); "
         "print(jax.config.values['jax_compilation_cache_max_size'])")


def cache_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    """A child's environment as a user's: no cache chosen by the test session, a home of its own."""
    env = subprocess_env()
    for name in ("JAX_COMPILATION_CACHE_DIR", "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"):
        env.pop(name, None)
    return {**env, "XDG_CACHE_HOME": str(tmp_path / "xdg"), **extra}


def probe(env: dict[str, str]) -> tuple[list[str], str]:
    """What ``setup`` returned and what it left in JAX's config, in a fresh process."""
    result = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True,
                            env=env, cwd=REPO, timeout=120, check=True)
    return result.stdout.split("\n")[:4], result.stderr


def test_the_host_tag_names_the_cpu(tmp_path):
    one, other = tmp_path / "one", tmp_path / "other"
    one.write_text("processor : 0\nmodel name : CPU A\nflags : fpu sse2 avx2\n\n"
                   "processor : 1\nmodel name : CPU A\nflags : fpu sse2 avx2\n")
    other.write_text("processor : 0\nmodel name : CPU A\nflags : fpu sse2 avx2 avx512f\n")
    tag = runtime.host_tag(one)
    assert len(tag) == 12 and int(tag, 16) >= 0
    assert tag == runtime.host_tag(one)
    assert tag != runtime.host_tag(other)  # one more instruction set: another cache
    assert len(runtime.host_tag(tmp_path / "absent")) == 12


def test_by_default_the_cache_is_under_the_user_cache_directory(tmp_path):
    (returned, configured, min_seconds, max_size), _ = probe(cache_env(tmp_path))
    expected = tmp_path / "xdg" / "pe_research" / f"jax-{runtime.host_tag()}"
    assert returned == configured == str(expected)
    assert expected.is_dir()
    assert float(min_seconds) == runtime.MIN_COMPILE_SECONDS
    assert int(max_size) == runtime.MAX_CACHE_BYTES


@pytest.mark.parametrize("setting", ["0", "off", "OFF"])
def test_the_switch_turns_it_off(tmp_path, setting):
    (returned, configured, *_), _ = probe(cache_env(tmp_path,
                                                    PE_RESEARCH_COMPILATION_CACHE=setting))
    assert returned == configured == "None"


def test_a_directory_of_the_users_choice_is_used(tmp_path):
    chosen = tmp_path / "mine"
    (returned, configured, *_), _ = probe(cache_env(
        tmp_path, PE_RESEARCH_COMPILATION_CACHE=str(chosen)))
    assert returned == configured == str(chosen)
    jax_own = tmp_path / "jax_own"
    (returned, configured, *_), _ = probe(cache_env(tmp_path,
                                                    JAX_COMPILATION_CACHE_DIR=str(jax_own)))
    assert returned == configured == str(jax_own)  # JAX's own setting, left as it is


def test_a_directory_that_cannot_be_written_is_one_line_and_no_cache(tmp_path):
    blocker = tmp_path / "a_file"
    blocker.write_text("")
    (returned, configured, *_), stderr = probe(cache_env(
        tmp_path, PE_RESEARCH_COMPILATION_CACHE=str(blocker / "cache")))
    assert returned == configured == "None"
    assert stderr.strip().splitlines() == [
        f"compilation cache off: cannot use {blocker / 'cache'} (Not a directory); set "
        "PE_RESEARCH_COMPILATION_CACHE to a directory you can write to, or to 0"]


def losses(run_dir: Path) -> list[float]:
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    return [record["train/loss"] for record in map(json.loads, lines) if "train/loss" in record]


@pytest.mark.slow
def test_a_second_process_loads_the_programs_and_trains_alike(tmp_path):
    """Seed 0 twice and seed 1 once against one cache: the second seed-0 run loads its
    programs and logs the first one's losses bit for bit; seed 1 builds the same train step
    (its keys are arguments, not constants), so no second train-step entry is written."""
    cache = tmp_path / "cache"
    env = cache_env(tmp_path, PE_RESEARCH_COMPILATION_CACHE=str(cache),
                    JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS="0")
    overrides = tiny_overrides(**{"train.steps": 8, "train.log_every": 2, "train.eval_every": 4,
                                  "train.checkpoint_every": 8, "model.dropout_rate": 0.1,
                                  "model.pe.randomize.max_position": 64, "wandb.mode": "disabled"})
    first = run_train(tmp_path / "first", overrides, env=env)
    assert "compilation cache" not in first.stdout
    train_entries = sorted(cache.glob("jit_train*-cache"))
    assert len(train_entries) == 1
    again = run_train(tmp_path / "again", overrides, env=env)
    # Its own line: the count is every program of the process, not the train step's.
    assert re.search(r"^train step compilations: 1; [\d.]+ steps/s in the last window\n"
                     r"compilation cache: \d+ programs of this process \(training's and "
                     r"evaluation's\) loaded instead of compiled$", again.stdout, re.MULTILINE)
    assert losses(tmp_path / "again") == losses(tmp_path / "first")
    assert len(losses(tmp_path / "first")) >= 2
    other_seed = run_train(tmp_path / "seed1", [*overrides, "--config.seed=1"], env=env)
    assert "loaded instead of compiled" in other_seed.stdout
    assert sorted(cache.glob("jit_train*-cache")) == train_entries
    assert losses(tmp_path / "seed1") != losses(tmp_path / "first")
