"""Range evaluation of the tiny trained run: determinism, devices, compile count, errors."""

from __future__ import annotations

import json
import math
import shutil
import subprocess

import jax
import numpy as np
import pytest
from conftest import REPO, cli_command, subprocess_env
from flax import nnx

from pe_research import cli, data
from pe_research.config import base_config
from pe_research.core.errors import ConfigError
from pe_research.evaluation.range_eval import RangeEvaluator, evaluate_run
from pe_research.model import build_model
from pe_research.model.metrics import wilson_interval
from pe_research.runs.restore import load_run
from pe_research.runs.tracking import read_metrics
from pe_research.runtime import data_mesh
from pe_research.tasks import get_task

LENGTHS = (4, 6, 8, 12)  # with buckets (8, 16, 32): two source buckets, so two shapes
EIGHT_DEVICES = "--xla_force_host_platform_device_count=8"


@pytest.fixture(scope="module")
def run_copy(trained_run_dir, tmp_path_factory):
    """A writable copy of the trained run (the shared one stays read-only)."""
    target = tmp_path_factory.mktemp("eval") / "run"
    shutil.copytree(trained_run_dir, target)
    return target


@pytest.fixture(scope="module")
def one_device(run_copy):
    """The latest checkpoint on one device, its eval set, evaluator and result."""
    run = load_run(run_copy, "latest", mesh=data_mesh(jax.devices()[:1]))
    config = run.config
    dataset = data.eval_dataset(run.task, LENGTHS, config.data.eval_samples, config.seed,
                                str(run_copy))
    evaluator = RangeEvaluator(config, run.graphdef, run.rest, run.mesh)
    result = evaluator(run.params, dataset, LENGTHS, config.eval.batch_size, config.data.buckets)
    return run, dataset, evaluator, result


def test_wilson_interval_closed_forms():
    z2 = 1.959963984540054 ** 2
    assert wilson_interval(0, 16) == pytest.approx((0.0, z2 / (16 + z2)))
    assert wilson_interval(16, 16) == pytest.approx((16 / (16 + z2), 1.0))
    low, high = wilson_interval(3, 20)
    assert (low, high) == pytest.approx((1 - wilson_interval(17, 20)[1],
                                         1 - wilson_interval(17, 20)[0]))
    assert low < 3 / 20 < high and wilson_interval(0, 0) == (0.0, 1.0)


def test_compiles_once_per_source_bucket_and_repeats_exactly(one_device):
    run, dataset, evaluator, result = one_device
    buckets = run.config.data.buckets
    # reverse_string: n source tokens, n target tokens + EOS. Length 8 alone would be (8, 16)
    # and 4, 6 (8, 8): the source bucket 8 takes its widest target, 16, for all three, and the
    # joint width of its longest row, 8 + 9 = 17 tokens, to a multiple of 8 (24).
    assert {n: data.eval_widths(dataset, LENGTHS, buckets)[n] for n in LENGTHS} == {
        4: (8, 16, 24), 6: (8, 16, 24), 8: (8, 16, 24), 12: (16, 16, 32)}
    assert result.compilations == 2 < len(LENGTHS)
    assert sorted({shape[1:] for shape in result.compiled_shapes}) == [(8, 16), (16, 16)]
    assert [row.length for row in result.rows] == list(LENGTHS)
    assert all(row.samples == run.config.data.eval_samples for row in result.rows)
    again = evaluator(run.params, dataset, LENGTHS, run.config.eval.batch_size, buckets)
    assert again.compilations == 0
    assert again.rows == result.rows


def test_a_tiny_memory_budget_splits_batches_and_changes_no_number(one_device):
    run, dataset, _, result = one_device
    config = run.config.copy_and_resolve_references()
    config.eval.memory_budget_gb = 1e-6  # below any batch: halve down to the fewest rows
    evaluator = RangeEvaluator(config, run.graphdef, run.rest, run.mesh)
    split = evaluator(run.params, dataset, LENGTHS, config.eval.batch_size, config.data.buckets)
    assert config.eval.batch_size == 16
    assert set(evaluator.batch_rows.values()) == {1}  # 16 rows halved down to 1
    assert {shape[0] for shape in split.compiled_shapes} == set(evaluator.batch_rows.values())
    assert split.compilations == result.compilations  # still one shape per source bucket
    for row, reference in zip(split.rows, result.rows, strict=True):
        assert row.samples == reference.samples
        for key, value in reference.values.items():
            assert row.values[key] == pytest.approx(value, rel=1e-5, abs=1e-7), key
    assert all(rows == 16 for rows in one_device[2].batch_rows.values())  # the default budget


def test_a_batch_larger_than_a_lengths_examples_is_cut_to_them(one_device):
    """eval.batch_size 64 over 16 examples per length: batches of 16 rows, not 48 rows of
    padding beside them; the same numbers and one shape per source bucket."""
    run, dataset, _, result = one_device
    evaluator = RangeEvaluator(run.config, run.graphdef, run.rest, run.mesh)
    assert data.eval_batch_rows(dataset, LENGTHS, 64, 1) == 16 == run.config.data.eval_samples
    assert data.eval_batch_rows(dataset, LENGTHS, 64, 3) == 18  # whole rows for each device
    larger = evaluator(run.params, dataset, LENGTHS, 64, run.config.data.buckets)
    assert larger.compiled_shapes == result.compiled_shapes  # batch 16, as with batch_size 16
    assert larger.rows == result.rows


def test_attention_in_blocks_of_query_rows_changes_no_number(one_device):
    """Source and target widths 8 and 16 in blocks of 3 queries (teacher forcing, the encoder
    of greedy decoding) give the numbers of whole rows (the default 64 exceeds both widths)."""
    run, dataset, _, result = one_device
    config = run.config.copy_and_resolve_references()
    config.eval.query_block = 3
    blocked = RangeEvaluator(config, run.graphdef, run.rest, run.mesh)(
        run.params, dataset, LENGTHS, config.eval.batch_size, config.data.buckets)
    assert run.config.eval.query_block == 64 and blocked.compilations == result.compilations
    for row, reference in zip(blocked.rows, result.rows, strict=True):
        for key, value in reference.values.items():
            assert row.values[key] == pytest.approx(value, rel=1e-5, abs=1e-7), key


def test_lengths_1_to_200_plan_at_most_one_shape_per_bucket(tmp_path):
    config = base_config(task="duplicate_string", pe="rope")
    task = get_task(config.task.to_dict(), config.data.to_dict())
    lengths = range(1, 201)
    dataset = data.eval_dataset(task, lengths, 1, 0, str(tmp_path))
    buckets = config.data.buckets
    widths = data.eval_widths(dataset, lengths, buckets)
    pairs = {(data.bucket_length(n, buckets), data.bucket_length(2 * n + 1, buckets))
             for n in lengths}  # what padding each side alone gives: a shape per pair
    assert len(set(widths.values())) <= len(buckets) < len(pairs)
    for n, (source, target, joint) in widths.items():  # every example still fits its batch
        assert source >= n and target >= 2 * n + 1 and source in buckets and target % 8 == 0
        assert 3 * n + 1 <= joint <= source + target and (joint % 8 == 0 or
                                                         joint == source + target)


def test_teacher_forced_numbers_match_the_training_time_evaluation(run_copy, one_device):
    result = one_device[-1]
    logged = next(r for r in read_metrics(run_copy) if r["step"] == 40)
    row = next(row for row in result.rows if row.length == 12)
    assert row.token_accuracy == pytest.approx(logged["eval_length_12/token_accuracy"], abs=1e-9)
    assert row.loss == pytest.approx(logged["eval_length_12/loss"], rel=1e-5)
    for row in result.rows:
        assert 0 <= row.exact_match_low <= row.exact_match <= row.exact_match_high <= 1
        assert math.isfinite(row.loss) and row.exact_match <= row.decoded_token_accuracy + 1e-12


def test_eight_devices_in_a_fresh_process_give_the_same_numbers(run_copy, one_device):
    result = one_device[-1]
    command = [*cli_command(), "eval", str(run_copy), "--step", "latest", "--lengths",
               ",".join(map(str, LENGTHS)), "--name", "eight", "--config.wandb.mode=offline"]
    completed = subprocess.run(command, capture_output=True, text=True, timeout=300, cwd=REPO,
                               env=subprocess_env(XLA_FLAGS=EIGHT_DEVICES))
    assert completed.returncode == 0, completed.stderr[-3000:]
    record = json.loads((run_copy / "eval" / "eight.json").read_text())
    assert record["devices"] == 8 and record["step"] == 40 and record["compilations"] == 2
    for saved, row in zip(record["rows"], result.rows, strict=True):
        for key in ("length", "samples", "token_accuracy", "decoded_token_accuracy",
                    "exact_match", "exact_match_low", "exact_match_high"):
            assert saved[key] == getattr(row, key), key
        assert saved["loss"] == pytest.approx(row.loss, rel=1e-6)
    csv_lines = (run_copy / "eval" / "eight.csv").read_text().splitlines()
    assert csv_lines[0].startswith("length,samples,") and len(csv_lines) == 1 + len(LENGTHS)
    assert (run_copy / "eval" / "eight.png").stat().st_size > 10_000
    tables = list((run_copy / "wandb").glob("offline-run-*/files/media/table/**/*.table.json"))
    assert tables, "the W&B run has no table"
    logged = json.loads(tables[0].read_text())
    assert [r[0] for r in logged["data"]] == list(LENGTHS)


@pytest.mark.parametrize("setting", [
    ("--config.model.pe.scaling.factor=2", "--config.model.pe.scaling.type=pi"),
    ("--config.model.pe.self_extend.group_size=2",
     "--config.model.pe.self_extend.neighbor_window=3"),
    ("--config.model.pe.attention_sinks.window=4",)], ids=["pi", "self_extend", "sinks"])
def test_rope_test_time_settings_change_positions_not_weights(run_copy, one_device, setting):
    run, result = one_device[0], one_device[-1]
    scaled = load_run(run_copy, "latest", list(setting), mesh=run.mesh)
    key, value = setting[-1].removeprefix("--config.").split("=")
    node = scaled.config
    for part in key.split("."):
        node = node[part]
    assert str(node) == value
    for a, b in zip(jax.tree.leaves(scaled.params), jax.tree.leaves(run.params), strict=True):
        np.testing.assert_array_equal(a, b)
    row = evaluate_run(scaled, (12,)).rows[0]
    assert row.loss != pytest.approx(result.rows[-1].loss, rel=1e-4)


def test_a_randomized_range_set_at_evaluation_moves_positions_not_weights(run_copy, one_device):
    """Drawing test positions from [0, 64) instead of 0 .. n-1: the same weights, other numbers;
    a range too short for the lengths fails before compiling, in one line."""
    run, result = one_device[0], one_device[-1]
    drawn = load_run(run_copy, "latest", ["--config.model.pe.randomize.max_position=64"],
                     mesh=run.mesh)
    assert drawn.config.model.pe.randomize.max_position == 64
    for a, b in zip(jax.tree.leaves(drawn.params), jax.tree.leaves(run.params), strict=True):
        np.testing.assert_array_equal(a, b)
    row = evaluate_run(drawn, (12,)).rows[0]
    assert row.loss != pytest.approx(result.rows[-1].loss, rel=1e-4)
    with pytest.raises(ConfigError, match=r"max_position=8 is invalid: must be >= the longest"):
        load_run(run_copy, "latest", ["--config.model.pe.randomize.max_position=8"],
                 mesh=run.mesh)


def test_test_positions_drawn_per_example_do_not_depend_on_the_batching(run_copy, one_device):
    """Each test example draws its positions from its index in the set: one row per batch (a
    tiny memory budget) gives the full batch's numbers; one draw for the batch, others."""
    run, dataset = one_device[0], one_device[1]
    drawn = load_run(run_copy, "latest", ["--config.model.pe.randomize.max_position=64"],
                     mesh=run.mesh)
    assert drawn.config.model.pe.randomize.eval_per == "example"
    lengths, batch_size, buckets = (4, 12), drawn.config.eval.batch_size, drawn.config.data.buckets
    full = RangeEvaluator(drawn.config, drawn.graphdef, drawn.rest, run.mesh)(
        drawn.params, dataset, lengths, batch_size, buckets)
    config = drawn.config.copy_and_resolve_references()
    config.eval.memory_budget_gb = 1e-6
    evaluator = RangeEvaluator(config, drawn.graphdef, drawn.rest, run.mesh)
    split = evaluator(drawn.params, dataset, lengths, batch_size, buckets)
    assert set(evaluator.batch_rows.values()) == {1}
    for row, reference in zip(split.rows, full.rows, strict=True):
        for key, value in reference.values.items():
            assert row.values[key] == pytest.approx(value, rel=1e-5, abs=1e-7), key
    one_draw = load_run(run_copy, "latest", ["--config.model.pe.randomize.max_position=64",
                                             "--config.model.pe.randomize.eval_per=batch"],
                        mesh=run.mesh)
    for row, reference in zip(evaluate_run(one_draw, lengths).rows, full.rows, strict=True):
        assert row.loss != pytest.approx(reference.loss, rel=1e-4)


def test_unsafe_override_and_unknown_step_are_refused(run_copy, capsys):
    assert cli.main(["eval", str(run_copy), "--config.model.d_model=32"]) == 2
    assert "model.d_model" in capsys.readouterr().err
    with pytest.raises(ConfigError, match=r"saved steps \[20, 40\]"):
        load_run(run_copy, "30")


def test_positions_beyond_a_learned_table_fail_before_compiling(tmp_path):
    config = base_config(task="reverse_string", pe="learned")
    config.model.update(d_model=16, num_heads=2, num_encoder_layers=1, num_decoder_layers=1,
                        d_ff=32)
    config.model.pe.max_len = 8
    task = get_task(config.task.to_dict())
    graphdef, params, rest = nnx.split(build_model(config, task.vocabulary.size), nnx.Param, ...)
    evaluator = RangeEvaluator(config, graphdef, rest, data_mesh(jax.devices()[:1]))
    dataset = data.eval_dataset(task, (12,), 4, 0, tmp_path)
    with pytest.raises(ConfigError) as error:
        evaluator(params, dataset, (12,), 4, (8, 16, 32))
    message = str(error.value)
    assert error.value.key == "model.pe.max_len" and "8 rows" in message
    assert "positions up to 15" in message and "task length 12" in message
    assert evaluator.compilations == 0


def test_eval_shows_a_progress_bar_over_lengths_once_it_takes_a_while(run_copy, monkeypatch,
                                                                       capsys):
    monkeypatch.setenv("WANDB_MODE", "disabled")
    monkeypatch.setattr("pe_research.evaluation.range_eval.PROGRESS_DELAY_S", 0.0)
    assert cli.main(["eval", str(run_copy), "--lengths", "4,8", "--name", "bar"]) == 0
    err = capsys.readouterr().err
    assert "eval:" in err and "1/2 [" in err  # the bar, over 2 lengths (cleared at the end)
    monkeypatch.setattr("pe_research.evaluation.range_eval.PROGRESS_DELAY_S", 60.0)
    assert cli.main(["eval", str(run_copy), "--lengths", "4,8", "--name", "bar"]) == 0
    assert "eval:" not in capsys.readouterr().err  # quick evaluations stay quiet


def test_lengths_asked_for_replace_the_configs_in_the_checks(run_copy, one_device, capsys,
                                                              monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "disabled")
    narrow = ["--config.data.buckets=(4, 8)"]  # eval.lengths reach 16: 16 source tokens
    assert cli.main(["eval", str(run_copy), "--name", "narrow", *narrow]) == 2
    assert "no bucket holds 16" in capsys.readouterr().err
    # lengths 4 and 8 fit those buckets, and score as they do with the stored ones
    assert cli.main(["eval", str(run_copy), "--lengths", "4,8", "--name", "narrow",
                     "--step", "latest", *narrow]) == 0
    rows = json.loads((run_copy / "eval" / "narrow.json").read_text())["rows"]
    reference = {row.length: row.values for row in one_device[-1].rows}
    for row in rows:
        assert row["exact_match"] == reference[row["length"]]["exact_match"]
        assert row["loss"] == pytest.approx(reference[row["length"]]["loss"], rel=1e-5)


def test_cached_exact_match_reads_its_file_only_under_the_same_overrides(run_copy):
    from pe_research.evaluation.results import cached_exact_match, results_path

    first = cached_exact_match(run_copy, "cached", (1, 2), ["data.buckets=(8, 16, 32)"])
    path = results_path(run_copy, "cached")
    record = json.loads(path.read_text())
    np.testing.assert_array_equal(first, [row["exact_match"] for row in record["rows"]])
    record["rows"][0]["exact_match"] = 0.123  # a marker: a reread returns it
    path.write_text(json.dumps(record))
    # Bucket widths only pad; other lengths or another override mean evaluating again.
    assert cached_exact_match(run_copy, "cached", (1,), ["data.buckets=(8, 16, 64)"])[0] == 0.123
    assert cached_exact_match(run_copy, "cached", (1, 2, 3))[0] == pytest.approx(first[0])
    again = cached_exact_match(run_copy, "cached", (1, 2), ["data.eval_samples=16"])
    assert again[0] != 0.123
