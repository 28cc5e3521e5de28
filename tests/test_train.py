"""End to end through the real `pe-research train` entry point, on a tiny model."""

from __future__ import annotations

import json
import math

import jax
import numpy as np
import pytest
from conftest import DEFAULT_CONFIG, tiny_overrides, train_here
from flax import nnx

from pe_research import data
from pe_research.cli import COMMANDS, main
from pe_research.config import load_config, to_dict
from pe_research.core.errors import ConfigError
from pe_research.model.inputs import EVAL_KEY_TAG, forward
from pe_research.runs.restore import load_run
from pe_research.runs.tracking import read_metrics
from pe_research.tasks import get_task
from pe_research.training.loop import train
from pe_research.training.periodic_eval import HELD_OUT_SEED_OFFSET
from pe_research.training.step import eval_sums, summarize

STEPS = 40  # of the shared tiny run (conftest.trained_run)


def _bucket_shapes(config) -> set[tuple[int, int]]:
    """Distinct (source, target) padded shapes of the training batches of a run."""
    task = get_task(config.task.to_dict(), config.data.to_dict())
    shapes = set()
    for step in range(config.train.steps):
        batch = data.train_batch(task, config.data, config.seed, step)
        shapes.add((batch["source"].shape[1], batch["target_output"].shape[1]))
    return shapes


@pytest.mark.slow
def test_train_command_end_to_end(trained_run):
    """The shared run was made by `pe-research train` in a child process; check all it left."""
    run_dir = trained_run.run_dir
    config = load_config(DEFAULT_CONFIG, tiny_overrides(**{"wandb.mode": "offline"}))
    saved = json.loads((run_dir / "config.json").read_text())
    assert saved == to_dict(config)
    assert saved["train"]["steps"] == STEPS and saved["model"]["d_model"] == 16
    assert (run_dir / "vocabulary.json").exists()

    # Loss decreases on this easy task: every logged window below the first, the last by 2x.
    records = read_metrics(run_dir)
    losses = [r["train/loss"] for r in records if "train/loss" in r]
    assert [r["step"] for r in records if "train/loss" in r] == [10, 20, 30, 40]
    assert max(losses[1:]) < losses[0] and losses[-1] < 0.5 * losses[0], losses

    # Evaluation in distribution and at the longer length, logged with the training metrics.
    final = records[-1]
    assert final["step"] == STEPS and "train/loss" in final
    for prefix in ("eval", "eval_length_12"):
        assert 0.0 <= final[f"{prefix}/token_accuracy"] <= 1.0
        assert 0.0 <= final[f"{prefix}/sequence_accuracy"] <= 1.0
        assert final[f"{prefix}/loss"] > 0.0

    # One compilation of the train step per source bucket: lengths 1-8 all fit bucket 8, and
    # the target takes the widest target of that bucket (8 + EOS -> 16) for every batch.
    assert final["train/compilations"] == len(_bucket_shapes(config)) == 1
    assert _bucket_shapes(config) == {(8, 16)}
    assert "train step compilations: 1" in trained_run.stdout

    # The final checkpoint restores and reproduces the logged in-distribution eval loss.
    restored = load_run(run_dir, "latest")
    assert restored.step == STEPS
    sums: dict[str, float] = {}
    jitted_forward = nnx.jit(forward, static_argnames="training")
    for index in range(config.train.eval_batches):
        batch = data.train_batch(restored.task, config.data, config.seed + HELD_OUT_SEED_OFFSET,
                                 index)
        key = jax.random.fold_in(jax.random.key(config.seed), EVAL_KEY_TAG)
        logits = jitted_forward(restored.model, batch, key, training=False)
        for name, value in eval_sums(logits, batch).items():
            sums[name] = sums.get(name, 0.0) + float(value)
    np.testing.assert_allclose(summarize(sums)["loss"], final["eval/loss"], rtol=1e-5)
    np.testing.assert_allclose(summarize(sums)["token_accuracy"], final["eval/token_accuracy"])

    # The console named the model that ran, with the parameter count of what was restored.
    count = sum(leaf.size for leaf in jax.tree.leaves(nnx.state(restored.model, nnx.Param)))
    assert (f"model: encoder-decoder, 1+1 layers, d_model 16, 2 heads, d_ff 32, positions rope; "
            f"{count:,} parameters") in trained_run.stdout

    # W&B ran offline inside the run directory, and the command said where everything is.
    wandb_runs = list((run_dir / "wandb").glob("offline-run-*/run-*.wandb"))
    assert len(wandb_runs) == 1
    assert f"W&B run:        {wandb_runs[0].parent}" in trained_run.stdout
    assert f"checkpoints:    {run_dir / 'checkpoints'}" in trained_run.stdout

    # The bar says when it stands still for an evaluation (at steps 20 and 40), then goes on.
    bar = [line for line in trained_run.stderr.replace("\r", "\n").splitlines()
           if "step" in line and "|" in line]
    evaluating = [line for line in bar if line.startswith("train: evaluating:")]
    assert [line.split("|")[2].split()[0] for line in evaluating] == ["20/40", "40/40"]
    assert bar[-1].startswith("train: 100%|"), bar[-3:]


def test_bad_config_fails_before_compiling(tmp_path):
    run_dir = tmp_path / "run"
    result = train_here(run_dir, [*tiny_overrides(), "--config.model.pe.type=rotary"],
                        check=False)
    assert result.returncode == 2
    assert "model.pe.type='rotary' is invalid: choose one of" in result.stderr
    assert "'rope'" in result.stderr and "Traceback" not in result.stderr
    assert not run_dir.exists()


def test_unknown_override_key_names_the_key(tmp_path, capsys):
    code = main(["train", "--config", str(DEFAULT_CONFIG), "--workdir", str(tmp_path / "run"),
                 "--config.train.stepz=3"])
    assert code == 2
    error = capsys.readouterr().err
    assert "train.stepz" in error and "keys of train are" in error
    assert not (tmp_path / "run").exists()


def test_missing_subcommand_module_is_a_clear_error(monkeypatch):
    monkeypatch.setitem(COMMANDS, "train", ("pe_research.no_such_module", "x"))
    with pytest.raises(SystemExit, match="not available in this installation"):
        main(["train", "--config", str(DEFAULT_CONFIG)])


def test_existing_run_refuses_a_different_model(trained_run_dir):
    before = (trained_run_dir / "config.json").read_text()
    config = load_config(DEFAULT_CONFIG, tiny_overrides(**{"model.d_model": 32,
                                                           "wandb.mode": "disabled"}))
    with pytest.raises(ConfigError, match="model.d_model=32 is invalid: .* was trained with"):
        train(config, trained_run_dir)
    assert (trained_run_dir / "config.json").read_text() == before


def test_a_changed_scheme_is_named_not_the_defaults_it_brings(trained_run_dir):
    config = load_config(DEFAULT_CONFIG, tiny_overrides(**{"model.pe.type": "alibi",
                                                           "wandb.mode": "disabled"}))
    before = {p: p.stat().st_mtime_ns for p in trained_run_dir.rglob("*")}
    with pytest.raises(ConfigError, match="model.pe.type='alibi' is invalid: .* trained with "
                                          "model.pe.type='rope'"):
        train(config, trained_run_dir)
    assert {p: p.stat().st_mtime_ns for p in trained_run_dir.rglob("*")} == before


def test_trained_run_fixture_has_checkpoints_and_metrics(trained_run_dir):
    records = read_metrics(trained_run_dir)
    assert records[-1]["step"] == 40
    assert sorted(p.name for p in (trained_run_dir / "checkpoints").iterdir()
                  if p.name.isdigit()) == ["20", "40"]
    best = max((r["eval/sequence_accuracy"], r["step"]) for r in records
               if "eval/sequence_accuracy" in r)[1]  # ties go to the later step
    restored = load_run(trained_run_dir, "best")
    assert restored.step == best
    assert restored.task.vocabulary.size == 5


def test_train_perplexity_is_e_to_the_windows_mean_loss(trained_run_dir):
    records = [r for r in read_metrics(trained_run_dir) if "train/loss" in r]
    assert records
    for record in records:
        assert record["train/perplexity"] == pytest.approx(math.exp(record["train/loss"]),
                                                           rel=1e-6)
