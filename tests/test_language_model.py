"""Language modelling: windows of a corpus, no source, perplexity, one shape per target bucket."""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # local files only

import json  # noqa: E402
import math  # noqa: E402
import sysconfig  # noqa: E402
from pathlib import Path  # noqa: E402

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import optax  # noqa: E402
import pytest  # noqa: E402
from conftest import REPO, load_experiment, train_here  # noqa: E402

from pe_research import cli, data  # noqa: E402
from pe_research.config import base_config, validate_config  # noqa: E402
from pe_research.core.errors import ConfigError, UsageError  # noqa: E402
from pe_research.evaluation.members_eval import evaluate_members  # noqa: E402
from pe_research.evaluation.range_eval import evaluate_run  # noqa: E402
from pe_research.evaluation.results import read_results  # noqa: E402
from pe_research.model.inputs import batch_positions, eval_position_key  # noqa: E402
from pe_research.model.metrics import METRICS, summarize  # noqa: E402
from pe_research.runs.restore import load_run  # noqa: E402
from pe_research.tasks import get_task  # noqa: E402
from pe_research.tasks.corpora import stdlib_sources, write_stdlib_corpus  # noqa: E402

LM_CONFIG = REPO / "configs" / "language_model.py"
TEXT = "".join(f"def f{i}(x):\n    return x * {i} + {i % 7}\n\n" for i in range(60))


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("corpus") / "code.txt"
    path.write_text(TEXT)
    return path


def lm_task(corpus: Path, **changes):
    return get_task({"name": "language_model", "path": str(corpus),
                     "cache_dir": str(corpus.parent / "hf"), **changes})


def decode(task, ids) -> str:
    return "".join(task.vocabulary.decode(ids))


def test_the_text_is_split_into_training_and_held_out_tokens(corpus):
    task = lm_task(corpus)
    assert task.vocabulary.symbols == tuple(sorted(set(TEXT)))  # line breaks kept
    cut = round(len(TEXT) * 0.9)  # the default eval_fraction holds out the last tenth
    assert decode(task, task.train_ids) == TEXT[:cut]
    assert decode(task, task.eval_ids) == TEXT[cut:]
    assert task.widest([5, 40]) == (0, 40)


def test_every_eval_length_tiles_the_same_held_out_text(corpus):
    task = lm_task(corpus, eval_tokens=100)
    held_out = TEXT[round(len(TEXT) * 0.9):][:100]
    for n in (1, 7, 25, 100):
        examples = task.eval_examples([n], 1, seed=3)  # eval_samples does not apply
        assert len(examples) == 100 // n
        assert examples.source.shape == (100 // n, 0)
        assert examples.target_lengths.tolist() == [n] * (100 // n)
        assert "".join(decode(task, row) for row in examples.target) == held_out[:n * (100 // n)]
    with pytest.raises(ConfigError, match="eval_tokens"):
        task.eval_examples([101], 1, 0)


def test_training_windows_are_slices_of_the_training_text(corpus):
    task = lm_task(corpus)
    text = decode(task, task.train_ids)
    config = {"batch_size": 8, "train_lengths": (5, 9), "buckets": (4, 8, 16),
              "length_sampling": "per_batch"}
    batch = data.train_batch(task, config, seed=0, step=3)
    n = int(batch["lengths"][0])
    assert set(batch["lengths"].tolist()) == {n} and 5 <= n <= 9
    assert batch["source"].shape == (8, 0) and batch["target_output"].shape == (8, 16)
    for row in range(8):
        window = decode(task, batch["target_output"][row][:n])
        assert window in text
        assert decode(task, batch["target_input"][row][1:n]) == window[:-1]  # shifted by BOS
    assert batch["target_mask"].sum(axis=1).tolist() == [n + 1] * 8  # + the end slot
    mixed = data.train_batch(task, {**config, "length_sampling": "mixed"}, seed=0, step=3)
    assert len(set(mixed["lengths"].tolist())) > 1
    keys = task.draw_train_keys(np.random.default_rng(0), 1000, (9, 9), "per_batch")
    assert keys[:, 1].min() >= 0 and keys[:, 1].max() <= task.train_ids.size - 9


def test_bad_settings_are_refused_in_one_line(corpus):
    for changes, key in (({"eval_fraction": 1.0}, "task.eval_fraction"),
                         ({"eval_tokens": -1}, "task.eval_tokens"),
                         ({"tokenizer": "sentencepiece"}, "task.tokenizer"),
                         ({"tokenizer": "bpe", "vocab_size": 256}, "task.vocab_size"),
                         ({"path": ""}, "task.path")):
        with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
            lm_task(corpus, **changes)
    with pytest.raises(ConfigError, match=r"no such file.*pe-research data stdlib --to"):
        lm_task(corpus.parent / "missing.txt")  # refused at once, never looked up on the hub
    table = corpus.parent / "rows.jsonl"
    table.write_text(json.dumps({"content": "abc"}) + "\n")
    with pytest.raises(ConfigError, match=r"task\.column.*\['content'\]"):
        lm_task(table)
    assert lm_task(table, column="content", eval_fraction=0.5).train_ids.size == 2


def test_a_run_must_be_decoder_only_and_not_predict_the_end(corpus):
    config = base_config(task="language_model", pe="alibi")
    config.task.path = str(corpus)
    config.data.train_lengths, config.data.buckets = (16, 16), (17, 33)
    config.model.architecture = "decoder_only"
    with pytest.raises(ConfigError, match=r"train\.predict_eos.*set it to False"):
        validate_config(config)
    config.train.predict_eos = False
    validate_config(config)
    config.model.architecture = "encoder_decoder"
    with pytest.raises(ConfigError, match=r"model\.architecture.*decoder_only"):
        validate_config(config)


def test_sourceless_lengths_keep_their_own_target_bucket():
    # (source bucket, longest target, longest joint sequence; EOS included) -> (source,
    # target, joint) widths: a sourceless target to its own bucket, the joint rounded up to 8
    buckets = (8, 16, 32, 64, 128)
    widths = {16: (0, 17, 17), 32: (0, 33, 33), 64: (0, 65, 65)}
    assert data.one_shape_per_source_bucket(widths, buckets) == {
        16: (0, 32, 24), 32: (0, 64, 40), 64: (0, 128, 72)}
    assert data.bucket_length(0, (8, 16)) == 0
    # tasks with a source share the longest target and joint of their source bucket, rounded
    # up to a multiple of 8 (the joint at most source + target)
    assert data.one_shape_per_source_bucket({4: (8, 9, 13), 8: (8, 17, 25)}, buckets) == {
        4: (8, 24, 32), 8: (8, 24, 32)}


def test_perplexity_is_e_to_the_mean_cross_entropy():
    sums = {"loss": 6.0, "perplexity": 6.0, "tokens": 4.0}
    values = summarize(sums, [METRICS["loss"], METRICS["perplexity"]])
    assert values["perplexity"] == pytest.approx(math.exp(1.5))
    assert METRICS["perplexity"].value({"perplexity": 8000.0, "tokens": 1.0}) == math.inf
    assert not METRICS["perplexity"].higher_is_better and METRICS["perplexity"].log_axis


def test_stdlib_corpus_is_every_top_level_module_in_name_order(tmp_path):
    path, characters, version = write_stdlib_corpus(tmp_path / "deep" / "stdlib.txt")
    sources = stdlib_sources()
    assert sources == sorted(Path(sysconfig.get_paths()["stdlib"]).glob("*.py"))
    text = path.read_text()
    assert characters == len(text) and text.startswith(sources[0].read_text()[:200])
    assert version.count(".") == 2


@pytest.fixture(scope="module")
def lm_run(corpus, tmp_path_factory) -> Path:
    """A tiny character LM trained through `pe-research train` on the corpus."""
    run_dir = tmp_path_factory.mktemp("lm") / "run"
    train_here(run_dir, [f"--config.task.path={corpus}",
                         f"--config.task.cache_dir={corpus.parent / 'hf'}",
                         "--config.task.eval_tokens=256", "--config.task.eval_fraction=0.2",
                         "--config.data.train_lengths=(16, 16)", "--config.data.batch_size=8",
                         "--config.data.buckets=(9, 17, 33, 65)",
                         "--config.model.d_model=16", "--config.model.num_heads=2",
                         "--config.model.num_decoder_layers=1", "--config.model.d_ff=32",
                         "--config.train.steps=20", "--config.train.warmup_steps=2",
                         "--config.train.log_every=10", "--config.train.eval_every=10",
                         "--config.train.checkpoint_every=10", "--config.train.eval_lengths=(32,)",
                         "--config.eval.lengths=(8, 16, 32, 64)", "--config.eval.batch_size=16",
                         "--config.wandb.mode=disabled"],
               config=LM_CONFIG)
    return run_dir


def test_range_eval_scores_every_window_token_by_teacher_forcing(lm_run):
    run = load_run(lm_run, "latest")
    result = evaluate_run(run)
    assert result.compilations == 4  # one shape per length: 9, 17, 33 and 65 target slots
    rows = {row.length: row for row in result.rows}
    assert "exact_match" not in rows[8].values  # nothing is decoded
    assert [rows[n].samples for n in (8, 16, 32, 64)] == [32, 16, 8, 4]
    # the same numbers by hand: every window at positions 0..n-1 after BOS, no end token
    examples = run.task.eval_examples([32], 1, 0)
    batch = data.make_batch(examples, 0, 33)
    source_positions, target_positions = batch_positions(
        run.config.model.pe, batch, eval_position_key(run.config.seed), training=False,
        architecture="decoder_only")
    logits = run.model(jnp.asarray(batch["source"]), jnp.asarray(batch["target_input"]),
                       source_positions, target_positions, jnp.asarray(batch["source_mask"]),
                       jnp.asarray(batch["target_mask"]))
    losses = optax.softmax_cross_entropy_with_integer_labels(
        logits[:, :32].astype(jnp.float32), jnp.asarray(batch["target_output"][:, :32]))
    assert rows[32].loss == pytest.approx(float(jnp.mean(losses)), rel=1e-5)
    assert rows[32].perplexity == pytest.approx(math.exp(rows[32].loss), rel=1e-9)
    assert rows[32].token_accuracy == pytest.approx(float(jnp.mean(
        jnp.argmax(logits[:, :32], -1) == batch["target_output"][:, :32])), abs=1e-9)


def test_eval_and_compare_show_perplexity(lm_run, tmp_path, capsys):
    assert cli.main(["eval", str(lm_run), "--lengths", "8,32"]) == 0
    printed = capsys.readouterr().out
    assert "perplexity" in printed and "interval" not in printed
    record = read_results(lm_run / "eval" / "eval.json")
    assert record["headline"] == "perplexity"
    assert (lm_run / "eval" / "eval.png").stat().st_size > 0
    assert cli.main(["compare", str(lm_run), "--out", str(tmp_path / "cmp")]) == 0
    table = (tmp_path / "cmp" / "comparison.md").read_text()
    assert "Metric: perplexity" in table


@pytest.mark.parametrize("budget_gb", [0.0, 1e-6])
def test_members_evaluated_in_one_program_score_as_the_single_run(lm_run, budget_gb):
    run = load_run(lm_run, "latest")
    single = evaluate_run(run, (16, 64))
    members = [load_run(lm_run, "latest"), run]
    for member in members:  # members of one program share their evaluation settings
        member.config.eval.memory_budget_gb = budget_gb
    results = evaluate_members(members, (16, 64))
    rows = {shape[0] for shape in results[0].compiled_shapes}
    assert rows == ({1} if budget_gb else {16})  # a tiny budget splits batches down to 1 row
    for member in results:
        assert [row.length for row in member.rows] == [16, 64]
        for row, reference in zip(member.rows, single.rows, strict=True):
            assert row.samples == reference.samples and "exact_match" not in row.values
            assert row.perplexity == pytest.approx(reference.perplexity, rel=1e-5)


def test_data_commands_write_a_corpus_and_show_its_windows(corpus, capsys):
    assert cli.main(["data", "stdlib", "--to", str(corpus.parent / "stdlib.txt")]) == 0
    assert "--config.task.path=" in capsys.readouterr().out
    assert cli.main(["data", "show", "language_model", f"--config.task.path={corpus}",
                     f"--config.task.cache_dir={corpus.parent / 'hf'}", "--length", "12",
                     "--count", "3"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("language_model (n = 12")
    held_out = TEXT[round(len(TEXT) * 0.9):]  # the first windows, one line each
    assert lines[1:] == ["  " + held_out[i:i + 12].replace("\n", "\\n") for i in (0, 12, 24)]


def test_position_loss_redraws_its_figure_from_its_numbers(tmp_path):
    position_loss = load_experiment("position_loss")
    record = {name: {"bands": position_loss.bands(32), "perplexity": values,
                     "training_length": 16}
              for name, values in (("alibi (2 seeds)", [6.0, 5.0]), ("rope (2 seeds)", [6, 9]))}
    numbers = tmp_path / "pl.json"
    numbers.write_text(json.dumps(record))
    figure = position_loss.redraw(numbers, tmp_path / "pl.png")
    assert (tmp_path / "pl.png").stat().st_size > 0
    axes = figure.axes[0]
    assert axes.get_xlim() == (1, 32)
    assert [t.get_text() for t in axes.get_legend().get_texts()] == [
        "alibi (2 seeds)", "rope (2 seeds)", "training length 16"]
    del record["rope (2 seeds)"]["training_length"]
    numbers.write_text(json.dumps(record))
    with pytest.raises(UsageError, match="no training_length for rope"):
        position_loss.redraw(numbers, tmp_path / "again.png")


def test_position_losses_average_to_the_range_evaluation_loss(lm_run):
    position_loss = load_experiment("position_loss")
    run = load_run(lm_run, "latest")
    losses = position_loss.token_losses(run, 32, rows=3).mean(axis=0)  # split batches
    assert losses.shape == (32,)
    row = evaluate_run(run, (32,)).rows[0]
    assert float(losses.mean()) == pytest.approx(row.loss, rel=1e-5)
    assert position_loss.bands(100) == [(0, 16), (16, 32), (32, 64), (64, 100)]
    figure = position_loss.draw({"alibi (1 seed)": {"bands": position_loss.bands(32),
                                                    "perplexity": [6.0, 5.0]}}, 32, {16})
    assert [t.get_text() for t in figure.axes[0].get_legend().get_texts()] == [
        "alibi (1 seed)", "training length 16"]
    # the same tokens: positions below 16 of 32-windows are scored as in 16-windows
    long = position_loss.token_losses(run, 32)
    short = position_loss.token_losses(run, 16).reshape(-1)[:long.size].reshape(long.shape)
    np.testing.assert_allclose(short[:, :16], long[:, :16], rtol=1e-4, atol=1e-5)
    # a window ending at a token scores it as that window's last position does
    ends = np.array([15, 47, 63])
    np.testing.assert_allclose(position_loss.last_token_losses(run, ends, 16, rows=2),
                               short.reshape(-1)[ends], rtol=1e-4)
    sliding, in_long = position_loss.paired_losses(run, long, 16)
    assert in_long == pytest.approx(float(long[:, 16:].mean()), rel=1e-6)
    beyond = np.flatnonzero(np.arange(long.size) % 32 >= 16)
    assert sliding == pytest.approx(float(
        position_loss.last_token_losses(run, beyond, 16).mean()), rel=1e-6)

