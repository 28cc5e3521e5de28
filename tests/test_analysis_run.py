"""`pe-research analyze RUN_DIR` on a run of the real trainer, logged to real (offline) W&B."""

import contextlib
import io
import json
import math
import shutil

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import nnx
from tiny_models import tiny_model

import pe_research.model.attention as model_attention
from pe_research.analysis.decomposition import qk_logits
from pe_research.analysis.report import REPORT_FILE, model_report, write_report
from pe_research.analysis.run_inputs import evaluation_positions, example_batch
from pe_research.analysis.run_inputs import load_analysis_run as load_run
from pe_research.cli import main
from pe_research.evaluation.batch_statistics import example_statistics
from pe_research.evaluation.range_eval import eval_position_key


@pytest.fixture(scope="module")
def analyzed(trained_run_dir, tmp_path_factory):
    """A copy of the trained run (the shared one stays read-only), analysed with W&B offline."""
    run_dir = tmp_path_factory.mktemp("analyze") / "run"
    shutil.copytree(trained_run_dir, run_dir)
    console = io.StringIO()
    with pytest.MonkeyPatch.context() as patch, contextlib.redirect_stderr(console):
        patch.setenv("WANDB_MODE", "offline")
        patch.delenv("WANDB_SILENT", raising=False)
        assert main(["analyze", str(run_dir), "--step", "latest", "--examples", "4"]) == 0
    out = run_dir / "analysis" / "step_40"
    return run_dir, out, json.loads((out / REPORT_FILE).read_text()), np.load(
        out / "analysis_arrays.npz"), console.getvalue()


def test_analyze_writes_figures_numbers_and_table(analyzed):
    run_dir, out, results, _, _ = analyzed
    assert results["step"] == 40 and results["mode"] == "model"
    assert results["geometry"].startswith("not computed")  # rope adds no position vectors
    sites = results["decomposition"]["sites"]
    assert [s["name"] for s in sites] == ["encoder_self/layer_0", "decoder_self/layer_0"]
    for site in sites:
        assert site["terms"] == ["content", "qk_transform"]
        shares = site["statistics"]["share"]
        np.testing.assert_allclose(np.sum([shares[t] for t in site["terms"]], axis=0), 1.0)
    assert {p.name for p in out.glob("*.png")} == {
        "decomposition_encoder_self_layer_0.png", "decomposition_decoder_self_layer_0.png",
        "decomposition_shares.png", "attention_weights.png"}
    table = (out / "decomposition.md").read_text()
    share = sites[0]["statistics"]["share"]["content"][0]
    assert "| encoder_self/layer_0 | 0 | " in table and f"({share:.1%})" in table


def test_saved_terms_add_up_to_the_restored_models_logits(analyzed, monkeypatch):
    run_dir, _, results, arrays, _ = analyzed
    run = load_run(run_dir, "40")
    batch = example_batch(run, None, 4)
    source_positions, target_positions = evaluation_positions(run, batch)
    captured = []
    original = model_attention.attention  # the xla path's kernel

    def spy(query, key, value, bias, mask):
        full = qk_logits(query, key)
        captured.append(np.asarray(full if bias is None else
                                   full + bias * math.sqrt(query.shape[-1])))
        return original(query, key, value, bias, mask)

    monkeypatch.setattr(model_attention, "attention", spy)
    run.model(*(jnp.asarray(batch[k]) for k in ("source", "target_input")), source_positions,
              target_positions, jnp.asarray(batch["source_mask"]),
              jnp.asarray(batch["target_mask"]))
    encoder_self, decoder_self = captured[0], captured[1]  # then decoder cross-attention
    for name, full in (("encoder_self_layer_0", encoder_self),
                       ("decoder_self_layer_0", decoder_self)):
        total = sum(arrays[f"decomposition_{name}/{term}"] for term in ("content", "qk_transform"))
        length = total.shape[-1]
        np.testing.assert_allclose(total, full[0, :, :length, :length], rtol=1e-4, atol=1e-4)
        # The saved weights are the softmax the model takes of those logits.
        logits = full[0, :, :length, :length] / math.sqrt(
            run.model.config.d_model // run.model.config.num_heads)
        if name.startswith("decoder"):
            logits = np.where(np.tril(np.ones((length, length), bool)), logits, -np.inf)
        expected = np.exp(logits - logits.max(-1, keepdims=True))
        np.testing.assert_allclose(arrays[f"attention_weights_{name}"],
                                   expected / expected.sum(-1, keepdims=True), atol=1e-5)


def test_restored_parameters_are_the_trained_ones(trained_run_dir):
    early, late = load_run(trained_run_dir, "20"), load_run(trained_run_dir, "40")
    assert early.step == 20 and late.step == 40
    differences = jax.tree.map(lambda a, b: float(jnp.max(jnp.abs(a - b))),
                               nnx.state(early.model, nnx.Param), nnx.state(late.model, nnx.Param))
    assert max(jax.tree.leaves(differences)) > 1e-4


def test_analysis_is_logged_to_the_runs_wandb(analyzed):
    run_dir, _, _, _, console = analyzed
    run_id = (run_dir / "wandb_run_id").read_text().strip()
    sessions = sorted((run_dir / "wandb").glob("offline-run-*"))
    # Training and analysis each write an offline session of the run's one W&B id.
    assert len(sessions) >= 2 and all(run_id in s.name for s in sessions)
    figures = "media/images/analysis/figures"
    runs = [s for s in sessions if (s / "files" / figures).exists()]
    assert len(runs) == 1
    files = runs[0] / "files"
    logged = {p.name.rsplit("_", 2)[0] for p in (files / figures).glob("*")}
    assert logged == {"decomposition_encoder_self_layer_0", "decomposition_decoder_self_layer_0",
                      "decomposition_shares", "attention_weights"}
    assert json.loads((files / "step_40" / REPORT_FILE).read_text())["step"] == 40
    # Copies, not links into the analysis folder (which W&B announces on the console).
    assert not (files / "step_40" / REPORT_FILE).is_symlink()
    assert "wandb:" not in console
    assert (run_dir / "wandb_run_id").read_text().strip() in runs[0].name


def test_model_report_geometry_of_learned_positions_matches_its_figures(tmp_path):
    model = tiny_model("learned", pe={"max_len": 40, "init_std": 0.3})
    report = model_report(model, None, num_positions=40, offset=10, title="tiny")
    write_report(report, tmp_path)
    results = json.loads((tmp_path / REPORT_FILE).read_text())
    table = np.asarray(model.pe.table[...])
    np.testing.assert_allclose(results["norms"]["raw"]["norms"], np.linalg.norm(table, axis=-1),
                               rtol=1e-5)
    scale = np.asarray(model.encoder_layers[0].attention_block.norm.scale[...])
    folded = scale * (table - table.mean(-1, keepdims=True))
    np.testing.assert_allclose(results["norms"]["encoder_ln_folded"]["norms"],
                               np.linalg.norm(folded, axis=-1), rtol=1e-5)
    lines = report.figures["norms"].axes[0].lines
    np.testing.assert_array_equal(lines[0].get_ydata(), results["norms"]["raw"]["norms"])
    tokens = np.asarray(model.embed.embedding[...]) * math.sqrt(16)  # scale_embedding
    cos = (tokens / np.linalg.norm(tokens, axis=-1, keepdims=True)) @ (
        table / np.linalg.norm(table, axis=-1, keepdims=True)).T
    ortho = results["orthogonality"]
    assert ortho["max_abs_cos"] == pytest.approx(np.abs(cos).max(), rel=1e-5)
    assert ortho["mean_abs_cos"] == pytest.approx(np.abs(cos).mean(), rel=1e-5)
    token, position = np.unravel_index(np.abs(cos).argmax(), cos.shape)
    assert (ortho["argmax"]["token_id"], ortho["argmax"]["position"]) == (token, position)
    bars = report.figures["orthogonality"].axes[0].patches[0]  # the histogram's stairs
    assert int(np.sum(bars.get_data().values)) == cos.size == sum(ortho["histogram"]["counts"])


def test_summaries_use_only_the_trained_positions_of_the_config():
    """Lengths 1-8 of reverse_string train positions 0-8; rows past them never move a number."""
    from types import SimpleNamespace

    from conftest import DEFAULT_CONFIG, tiny_overrides

    from pe_research.analysis.run_inputs import default_num_positions, trained_positions
    from pe_research.config import load_config
    from pe_research.tasks import get_task

    config = load_config(DEFAULT_CONFIG, tiny_overrides(**{"model.pe.type": "learned"}))
    task = get_task(config.task.to_dict(), config.data.to_dict())
    run = SimpleNamespace(config=config, task=task)
    trained, source = trained_positions(run)
    source_width, target_width = task.widest(range(1, 9))
    assert trained == max(source_width, target_width + 1) == 9  # BOS + 8 target tokens
    assert "data.train_lengths=(1, 8)" in source
    assert default_num_positions(run) == 64

    model = tiny_model("learned", pe={"max_len": 64, "init_std": 0.3})
    before = model_report(model, None, num_positions=64, trained=trained).results
    table = model.pe.table[...]
    model.pe.table[...] = table.at[trained:].multiply(100.0)  # change only untrained rows
    after = model_report(model, None, num_positions=64, trained=trained).results
    for section in ("orthogonality", "shape"):
        assert after[section] == before[section]
    for name, profile in after["norms"].items():
        if isinstance(profile, dict):
            summary = {k: v for k, v in profile.items() if k != "norms"}
            assert summary == {k: v for k, v in before["norms"][name].items() if k != "norms"}
    raw = after["norms"]["raw"]
    assert (raw["offset"], raw["end"]) == (2, 9)  # a quarter of 9: offset 100 is far past
    norms = np.linalg.norm(np.asarray(table), axis=-1)[2:9]
    assert raw["mean"] == pytest.approx(norms.mean(), rel=1e-5)
    assert after["positions"]["trained"] == 9 and after["orthogonality"]["num_positions"] == 9


def test_evaluation_positions_are_the_range_evaluators_draws(trained_run_dir):
    """Per-example losses from the evaluator's own step equal the model's on the analysis
    positions, with test positions drawn (a randomized range set at evaluation)."""
    run = load_run(trained_run_dir, "40", ["model.pe.randomize.max_position=64"])
    batch = {key: jnp.asarray(value) for key, value in example_batch(run, 8, 4).items()}
    source_positions, target_positions = evaluation_positions(run, batch)
    assert source_positions.shape == (4, batch["source"].shape[1])  # a draw per example
    logits = run.model(batch["source"], batch["target_input"], source_positions,
                       target_positions, batch["source_mask"], batch["target_mask"])
    losses = optax.softmax_cross_entropy_with_integer_labels(logits, batch["target_output"])
    expected = jnp.sum(jnp.where(batch["target_mask"], losses, 0.0), axis=-1)
    found = example_statistics(run.model, batch, eval_position_key(run.config.seed))["loss"]
    np.testing.assert_allclose(found, expected, rtol=1e-5)
    plain = run.model(batch["source"], batch["target_input"], jnp.arange(
        batch["source"].shape[1])[None], jnp.arange(batch["target_input"].shape[1])[None],
        batch["source_mask"], batch["target_mask"])
    assert not np.allclose(plain, logits, atol=1e-4)  # the draw matters
