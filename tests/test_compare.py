"""Compare: run directories written by the real writers -> the expected aggregates."""

from __future__ import annotations

import csv
import math
import subprocess
import sys

import jax
import matplotlib.colors
import matplotlib.image
import numpy as np
import pytest
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from pe_research import cli
from pe_research.config import base_config
from pe_research.core.errors import ConfigError
from pe_research.evaluation.compare import (
    compare_runs,
    eval_settings,
    legend_names,
    load_curve,
)
from pe_research.evaluation.finding import seed_lines
from pe_research.evaluation.grouping import natural_key
from pe_research.evaluation.plots import mark_training_ranges, plot_comparison
from pe_research.evaluation.range_eval import EvalResult, LengthResult
from pe_research.evaluation.results import write_results
from pe_research.model.metrics import get_metric, wilson_interval
from pe_research.runs.restore import LoadedRun
from pe_research.runs.run_dir import save_config
from pe_research.runs.tracking import JsonlWriter
from pe_research.runtime import data_mesh
from pe_research.sweeps.report import separating_keys, varying_keys

LENGTHS = (2, 4, 6, 8)  # trained on 1-4: lengths 6 and 8 are out of distribution
CURVES = {  # exact match per length
    ("rope", 0): (1.0, 1.0, 0.5, 0.0),
    ("rope", 1): (1.0, 0.8, 0.25, 0.0),
    ("alibi", 0): (1.0, 1.0, 0.9, 0.7),
}


def row_values(exact: float, samples: int) -> dict[str, float]:
    """A results row: exact match ``exact`` (with its interval), everything else perfect."""
    low, high = wilson_interval(round(exact * samples), samples)
    return {"exact_match": exact, "exact_match_low": low, "exact_match_high": high,
            "decoded_token_accuracy": 1.0, "token_accuracy": 1.0,
            "loss": 0.1}


def write_run(root, scheme: str, seed: int, exact, train_lengths=(1, 4), predict_eos=True):
    """config.json, metrics.jsonl (JsonlWriter) and eval/eval.* (write_results) of one run;
    without ``predict_eos``, ``exact`` is the oracle-length exact match and free decodes fail."""
    run_dir = root / f"{scheme}_s{seed}"
    config = base_config(task="reverse_string", pe=scheme)
    config.seed, config.data.train_lengths = seed, train_lengths
    config.train.predict_eos = predict_eos
    save_config(config, run_dir)
    writer = JsonlWriter(run_dir / "metrics.jsonl")
    writer.log(10, {"train/loss": 1.0, "eval_length_6/sequence_accuracy": 0.0})
    writer.log(20, {"train/loss": 0.5, "eval_length_6/sequence_accuracy": exact[2] / 2,
                    "eval_length_8/sequence_accuracy": exact[3] / 2, "eval/sequence_accuracy": 1})
    writer.finish()
    samples = 20
    rows = [LengthResult(n, samples, row_values(e, samples)) for n, e in zip(LENGTHS, exact,
                                                                              strict=True)]
    if not predict_eos:
        rows = [LengthResult(row.length, samples, {**row_values(0.0, samples),
                                                   "oracle_exact_match": e})
                for row, e in zip(rows, exact, strict=True)]
    run = LoadedRun(run_dir, config, None, 20, None, None, None, data_mesh(jax.devices()[:1]))
    write_results(run, EvalResult(rows, 1, [(4, 8, 16)], 0.5), "eval")
    return run_dir


@pytest.fixture
def run_dirs(tmp_path):
    return [write_run(tmp_path / "runs", s, seed, exact) for (s, seed), exact in CURVES.items()]


def png_width(path) -> int:
    """Width in pixels of a PNG file."""
    return matplotlib.image.imread(path).shape[1]


def read_csv(path):
    with open(path) as handle:
        return {row["group"]: row for row in csv.DictReader(handle)}


def test_aggregates_over_seeds(run_dirs, tmp_path):
    paths = compare_runs(run_dirs, tmp_path / "out", threshold=0.85).paths
    table = read_csv(paths["csv"])
    assert list(table) == ["alibi", "rope"]
    rope, alibi = table["rope"], table["alibi"]
    # rope in-dist per seed: mean(1, 1) = 1, mean(1, .8) = .9; OOD: .25 and .125.
    expected = {"runs": 2, "in_dist_mean": 0.95, "in_dist_std": np.std([1, 0.9], ddof=1),
                "in_dist_max": 1.0, "ood_mean": 0.1875, "ood_std": np.std([0.25, 0.125], ddof=1),
                "ood_max": 0.25, "longest_mean": 4, "longest_max": 4}
    for key, value in expected.items():
        assert float(rope[key]) == pytest.approx(value), key
    # alibi, one seed: OOD mean(.9, .7) = .8; its curve stays >= .85 up to n = 6.
    for key, value in {"runs": 1, "in_dist_mean": 1.0, "ood_mean": 0.8, "ood_max": 0.8,
                       "longest_mean": 6, "longest_max": 6}.items():
        assert float(alibi[key]) == pytest.approx(value), key
    assert math.isnan(float(alibi["in_dist_std"]))  # no spread from a single seed
    markdown = paths["markdown"].read_text()
    # Beyond training only 6 and 8 are evaluated: a sparse grid, whose linear uniform average
    # over 6-8 equals the mean of its two ends.
    assert "| rope | 2 | 95.0 ± 7.1 | 100.0 | 18.8 ± 8.8 | 25.0 | 18.8 ± 8.8 | 4 | 4 |" in markdown
    assert "| alibi | 1 | 100.0 ± n/a | 100.0 | 80.0 ± n/a | 80.0 | 80.0 ± n/a | 6 | 6 |" \
        in markdown
    assert "OOD: mean over the 2 evaluated lengths 6, 8 (a sparse grid;" in markdown
    assert "max over seeds" in markdown and "ddof=1" in markdown
    assert paths["png"].stat().st_size > 10_000
    assert png_width(paths["png"]) == 8 * 120  # 5 legend entries: the legend stays inside


def test_the_seeds_of_each_group_are_listed_and_only_pairs_they_separate_are_ordered():
    def summary(*ood):
        return {"ood_runs": list(ood)}

    lines = seed_lines({"a": summary(0.3, 0.35), "b": summary(0.1, 0.2), "c": summary(0.25, 0.5),
                        "d": summary(0.9)}, get_metric("exact_match"))
    assert lines == ["OOD per seed (%, seeds in run order): a: 30.0, 35.0; b: 10.0, 20.0; "
                     "c: 25.0, 50.0.", "",
                     "Seeds apart (every seed of one higher than every seed of the other): "
                     "a higher than b; c higher than b; every other pair overlaps.", ""]
    assert seed_lines({"a": summary(0.3, 0.35), "b": summary(0.33, 0.4)},
                      get_metric("exact_match"))[2].endswith("none, every pair overlaps.")
    assert seed_lines({"a": summary(0.3, 0.35), "d": summary(0.9)},
                      get_metric("exact_match")) == []  # one seed says nothing about order
    assert seed_lines({"a": summary(4.372, 4.25), "b": summary(5.1, 5.3)},
                      get_metric("perplexity"))[0] == \
        "OOD per seed (teacher-forced perplexity, seeds in run order): a: 4.37, 4.25; b: 5.1, 5.3."


def test_the_comparison_lists_each_groups_seeds(tmp_path):
    runs = [write_run(tmp_path / "runs", scheme, seed, curve) for scheme, seed, curve in
            [("rope", 0, (1, 1, 0.5, 0.0)), ("rope", 1, (1, 1, 0.25, 0.0)),
             ("alibi", 0, (1, 1, 0.9, 0.7)), ("alibi", 1, (1, 1, 0.8, 0.6))]]
    markdown = compare_runs(runs, tmp_path / "out").paths["markdown"].read_text()
    assert "OOD per seed (%, seeds in run order): alibi: 80.0, 70.0; rope: 25.0, 12.5." in markdown
    assert "alibi higher than rope; every other pair overlaps." in markdown


def test_curves_measured_with_test_time_settings_say_so_and_judge_the_fit_as_trained(
        run_dirs, tmp_path):
    assert eval_settings(["--config.task.blanks_per_token=2", "--config.data.buckets=8,48",
                          "--config.eval.batch_size=8", "--config.wandb.mode=disabled",
                          "--config.model.pe.scaling.factor=4"]) == (
        "task.blanks_per_token=2", "model.pe.scaling.factor=4")
    samples = 20
    for run_dir in run_dirs:  # under the setting every run drops to 50 % at length 4
        config = base_config(task="reverse_string")
        run = LoadedRun(run_dir, config, None, 20, None, None, None, data_mesh(jax.devices()[:1]))
        rows = [LengthResult(n, samples, row_values(e, samples))
                for n, e in zip(LENGTHS, (1.0, 0.5, 0.2, 0.0), strict=True)]
        write_results(run, EvalResult(rows, 1, [(4, 8, 16)], 0.5), "sparse",
                      overrides=["--config.task.blanks_per_token=2", "--config.data.buckets=8"])
    assert load_curve(run_dirs[0], eval_name="sparse").settings == ("task.blanks_per_token=2",)
    assert load_curve(run_dirs[0]).settings == ()
    learned = [run_dirs[0], run_dirs[2]]  # rope seed 0 and alibi: 100 % on lengths 1-4
    paths = compare_runs(learned, tmp_path / "sparse", eval_name="sparse").paths
    markdown = paths["markdown"].read_text()
    assert "Evaluated with task.blanks_per_token=2, test-time settings" in markdown
    finding = markdown.split("What the curves show: ")[1].split("\n")[0]
    assert finding.startswith("Measured with task.blanks_per_token=2, which the runs were not "
                              "trained with")
    assert "Both schemes learned lengths 1-4" in finding  # as trained (eval/eval.json)
    assert ("the training lengths 1-4 themselves fall below 95% decoded exact match for alibi "
            "and rope (75% and 75% on average)") in finding
    plain = compare_runs(learned, tmp_path / "plain").paths["markdown"].read_text()
    assert "Measured with" not in plain and "Evaluated with" not in plain


def test_training_time_curves_come_from_metrics_jsonl(run_dirs):
    curve = load_curve(run_dirs[0], metric="sequence_accuracy")
    assert curve.source == "metrics.jsonl step 20"
    np.testing.assert_array_equal(curve.lengths, [6, 8])
    np.testing.assert_allclose(curve.values, [0.25, 0.0])
    with pytest.raises(ConfigError, match="pe-research eval") as error:
        load_curve(run_dirs[0], metric="exact_match", eval_name="missing")
    assert "oracle_length" not in str(error.value)
    # The oracle-length metric exists only when asked for: the fix says how.
    with pytest.raises(ConfigError, match="--name eval --config.eval.oracle_length=True`"):
        load_curve(run_dirs[0], metric="oracle_exact_match")


def test_runs_trained_without_the_end_token_are_compared_at_the_oracle_length(run_dirs,
                                                                              tmp_path):
    minus = [write_run(tmp_path / "minus", scheme, seed, exact, predict_eos=False)
             for (scheme, seed), exact in CURVES.items()]
    paths = compare_runs(minus, tmp_path / "out").paths
    assert "Metric: oracle_exact_match" in paths["markdown"].read_text()
    assert float(read_csv(paths["csv"])["alibi"]["ood_mean"]) == pytest.approx(0.8)
    # Next to a +EOS run the default stays the free decode, which every run has.
    paths = compare_runs([*minus[:2], run_dirs[2]], tmp_path / "both").paths
    table = read_csv(paths["csv"])
    assert float(table["rope"]["in_dist_mean"]) == 0.0
    assert float(table["alibi"]["ood_mean"]) == pytest.approx(0.8)


def test_different_training_lengths_are_refused_unless_mixed(run_dirs, tmp_path):
    longer = write_run(tmp_path / "runs", "t5", 0, (1.0, 1.0, 1.0, 0.5), train_lengths=(1, 6))
    with pytest.raises(ConfigError, match="data.train_lengths") as error:
        compare_runs([*run_dirs, longer], tmp_path / "out")
    assert error.value.key == "--allow-mixed"
    paths = compare_runs([*run_dirs, longer], tmp_path / "mixed", allow_mixed=True).paths
    t5 = read_csv(paths["csv"])["t5"]
    assert float(t5["in_dist_mean"]) == 1.0 and float(t5["ood_mean"]) == 0.5  # its own 1-6
    markdown = paths["markdown"].read_text()
    assert markdown.startswith(
        "# Length extrapolation: reverse_string, mixed training lengths 1-4, 1-6\n")
    assert "evaluated lengths within each run's training range" in markdown


def test_every_training_range_is_marked_on_a_mixed_plot():
    axes = Figure().add_subplot()
    mark_training_ranges(axes, [(1, 4), (1, 6), (1, 4)])
    (span,), lines = axes.patches, axes.lines
    assert span.get_label() == "training lengths 1-4, 1-6"
    xs = axes.transData.inverted().transform(span.get_verts())[:, 0]  # any matplotlib >= 3.8
    np.testing.assert_allclose((xs.min(), xs.max()), (0.5, 6.5))
    assert sorted(line.get_xdata()[0] for line in lines) == [4.5, 6.5]
    single = Figure().add_subplot()
    mark_training_ranges(single, [(64, 64)])
    assert single.patches[0].get_label() == "training length 64"


@pytest.mark.parametrize("count", [4, 12, 18])
def test_no_two_groups_are_drawn_alike(count):
    x = np.arange(1, 9)
    groups = {f"scheme{i}": {"lengths": x, "mean": np.full(8, i / 20), "std": np.full(8, 0.01),
                             "best": np.full(8, i / 20 + 0.02), "runs": np.array(3)}
              for i in range(count)}
    figure = plot_comparison(groups, [(1, 4)], "exact_match", "t")
    lines = [line for line in figure.axes[0].lines if line.get_label().startswith("scheme")]
    mean = {line.get_label().split(" ")[0]: line for line in lines if line.get_linestyle() == "-"}
    best = {line.get_label().split(" ")[0]: line for line in lines if line.get_linestyle() == "--"}
    assert len(mean) == len(best) == count
    styles = {(tuple(matplotlib.colors.to_rgba(line.get_color())), line.get_marker())
              for line in mean.values()}
    assert len(styles) == count  # beyond the 10 default colours, too
    for name, line in best.items():  # a group's best-seed line looks like its mean line
        assert line.get_color() == mean[name].get_color()
        assert line.get_marker() == mean[name].get_marker()
    legend = figure.axes[0].get_legend().get_window_extent(
        FigureCanvasAgg(figure).get_renderer())
    assert legend.y0 >= 0 and legend.y1 <= figure.bbox.height  # every entry on the figure


@pytest.mark.parametrize(("low", "high", "ends", "labels"), [
    (4.3, 17.3, (3, 20), ["3", "5", "7", "10", "15", "20"]),  # within 1.5 decades: 1-1.5-2-3-5-7
    (4.5, 60.0, (3, 70), ["3", "5", "7", "10", "20", "30", "50", "70"]),  # within 2: 1-2-3-5-7
    (4.3, 300.0, (2, 500), ["2", "5", "10", "20", "50", "100", "200", "500"]),
    (3.0, 4e4, (1, 1e5), ["1", "10", "100", "1000", "10000", "100000"]),
])
def test_a_log_axis_ends_at_labelled_ticks_around_the_data(low, high, ends, labels):
    x, curve = np.arange(1, 8), np.geomspace(low, high, 7)
    groups = {"alibi": {"lengths": x, "mean": curve, "std": 0 * curve, "best": curve,
                        "runs": np.array(2)}}
    figure = plot_comparison(groups, [(1, 4)], "perplexity", "t")
    axes = figure.axes[0]
    FigureCanvasAgg(figure).draw()
    bottom, top = axes.get_ylim()
    assert (bottom, top) == pytest.approx(ends)
    shown = [tick.get_text() for tick in axes.get_yticklabels()
             if bottom * 0.999 <= tick.get_position()[1] <= top * 1.001]
    assert shown == labels
    assert not any(tick.get_text() for tick in axes.yaxis.get_minorticklabels())


def test_plots_return_figures_and_draw_into_a_given_axes(run_dirs, tmp_path):
    """A figure object comes back (the CLI saves it); with ``ax`` it draws there, in the
    caller's figure; the comparison's ``plot`` is the figure written to comparison.png."""
    groups = {"alibi": {"lengths": np.arange(1, 5), "mean": np.full(4, 0.5),
                        "std": np.zeros(4), "best": np.full(4, 0.6), "runs": np.array(2)}}
    own = plot_comparison(groups, [(1, 2)], "exact_match", "t")
    assert isinstance(own, Figure) and len(own.axes[0].lines) == 3  # boundary, mean, best
    caller = Figure()
    left, right = caller.subplots(1, 2)
    drawn = plot_comparison(groups, [(1, 2)], "exact_match", "t", ax=right)
    assert drawn is caller and len(right.lines) == 3 and not left.lines
    result = compare_runs(run_dirs, tmp_path / "out")
    figure = result.plot()
    assert isinstance(figure, Figure) and result.paths["png"].is_file()
    labels = [line.get_label() for line in figure.axes[0].lines]
    assert all(any(label.startswith(f"{name} (") for label in labels) for name in result.groups)


def test_importing_the_plots_leaves_a_notebooks_backend_alone():
    probe = ("import matplotlib; matplotlib.use('svg'); "
             "import pe_research.evaluation.plots, pe_research.evaluation.compare; "
             "print(matplotlib.get_backend())")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                         timeout=120, check=True).stdout
    assert out.strip() == "svg"


def test_cli_takes_a_glob_and_a_group_key(run_dirs, tmp_path, capsys):
    pattern = str(run_dirs[0].parent / "*")
    out = tmp_path / "by_seed"
    assert cli.main(["compare", pattern, "--group-by", "seed", "--show", "max", "--out",
                     str(out)]) == 0
    assert set(read_csv(out / "comparison.csv")) == {"0", "1"}
    assert "| seed | runs |" in capsys.readouterr().out
    finding = (out / "comparison.md").read_text().split("What the curves show: ")[1]
    assert finding.startswith("seed=1 did not learn")  # not a bare "1" in a sentence


def test_a_legend_names_the_key_of_a_bare_number(run_dirs):
    by_seed = [load_curve(run, group_by="seed") for run in run_dirs]
    assert legend_names(by_seed, "seed") == {"0": "seed=0", "1": "seed=1"}
    by_scheme = [load_curve(run) for run in run_dirs]
    assert legend_names(by_scheme, "model.pe.type") == {"rope": "rope", "alibi": "alibi"}
    both = [load_curve(run, group_by="model.pe.type,seed") for run in run_dirs]
    assert set(legend_names(both, "model.pe.type,seed").values()) == {
        "pe.type=rope, seed=0", "pe.type=rope, seed=1", "pe.type=alibi, seed=0"}


def test_a_key_only_one_scheme_has_labels_only_its_runs(run_dirs, tmp_path):
    """A sweep over schemes varies ``model.pe.max_len`` only where it exists (learned)."""
    learned = write_run(tmp_path / "runs", "learned", 0, (1.0, 1.0, 0.0, 0.0))
    runs = [*run_dirs, learned]
    assert varying_keys(runs, ["model.pe.type", "model.pe.max_len", "data.batch_size"]) == [
        "model.pe.type", "model.pe.max_len"]
    rows = base_config(task="reverse_string", pe="learned").model.pe.max_len
    paths = compare_runs(runs, tmp_path / "out",
                         group_by="model.pe.type,model.pe.max_len").paths
    table = read_csv(paths["csv"])
    assert set(table) == {"pe.type=rope", "pe.type=alibi", f"pe.type=learned, max_len={rows}"}
    assert float(table[f"pe.type=learned, max_len={rows}"]["ood_mean"]) == 0.0
    assert float(table["pe.type=rope"]["ood_mean"]) == pytest.approx(0.1875)  # as without it
    assert png_width(paths["png"]) == (8 + 4.5) * 120  # 7 legend entries: set beside the axes
    with pytest.raises(ConfigError, match="model.pe.max_lne"):  # a key no run has: a typo
        compare_runs(runs, tmp_path / "typo", group_by="model.pe.type,model.pe.max_lne")


def test_keys_that_follow_the_grouping_keys_split_no_group(run_dirs, tmp_path):
    """A learned table's length, or steps set per scheme, follow the scheme: not a group key."""
    learned = write_run(tmp_path / "runs", "learned", 0, (1.0, 1.0, 0.0, 0.0))
    runs = [*run_dirs, learned]
    keys = ["model.pe.type", "model.pe.max_len", "seed"]
    assert separating_keys(runs, keys) == (["model.pe.type", "seed"], ["model.pe.max_len"])
    # seed splits rope's two runs; max_len (learned only) and a per-scheme value do not
    config = base_config(task="reverse_string", pe="learned")
    config.data.train_lengths, config.train.steps = (1, 4), 2 * config.train.steps
    save_config(config, learned)
    keys = ["model.pe.type", "train.steps", "model.pe.max_len"]
    assert separating_keys(runs, keys) == (["model.pe.type"],
                                           ["train.steps", "model.pe.max_len"])
    # the first key names the groups when two keys split the runs alike
    assert separating_keys(runs, ["train.steps", "model.pe.max_len"]) == (
        ["train.steps"], ["model.pe.max_len"])


def test_a_per_token_comparison_judges_the_training_fit_by_exact_match(tmp_path):
    """Every token right but one string in four wrong at length 4: not learned, whatever the
    compared metric says in distribution."""
    runs = [write_run(tmp_path / "runs", scheme, 0, exact)
            for scheme, exact in (("rope", (1.0, 0.5, 0.0, 0.0)), ("alibi", (1.0, 1.0, 0, 0)))]
    paths = compare_runs(runs, tmp_path / "tokens", metric="decoded_token_accuracy").paths
    finding = paths["markdown"].read_text().split("What the curves show: ")[1]
    assert finding.startswith("rope did not learn the training lengths 1-4 (75% decoded exact "
                              "match in distribution, below 95%)"), finding
    same = compare_runs(runs, tmp_path / "exact", metric="exact_match").paths
    assert same["markdown"].read_text().split("What the curves show: ")[1] == finding


def test_groups_named_by_numbers_are_ordered_by_value():
    names = ["max_position=1024", "max_position=128", "max_position=0", "alibi", "pe.type=rope"]
    assert sorted(names, key=natural_key) == ["alibi", "max_position=0", "max_position=128",
                                              "max_position=1024", "pe.type=rope"]


def test_a_run_written_before_a_key_existed_compares_with_newer_runs(run_dirs, tmp_path):
    """A config.json that lacks a key added since (here the task's alphabet_size) reads as its
    default: compare and the sweep report put it with the runs that name the default."""
    import json

    from pe_research.sweeps.report import comparison_groups

    path = run_dirs[2] / "config.json"
    stored = json.loads(path.read_text())
    del stored["task"]["alphabet_size"]
    path.write_text(json.dumps(stored))
    paths = compare_runs(run_dirs, tmp_path / "out").paths  # before: "runs differ in task"
    assert "mixed task settings" not in paths["markdown"].read_text()
    manifest = {"runs": {f"{d.parent.name}/{d.name}": {"state": "done"} for d in run_dirs}}
    assert list(comparison_groups(manifest, run_dirs[0].parents[1]).values()) == [run_dirs]
    stored["task"]["alphabet_size"] = 3  # a real difference still splits them
    path.write_text(json.dumps(stored))
    with pytest.raises(ConfigError, match="runs differ in task"):
        compare_runs(run_dirs, tmp_path / "out2")
