"""Ensembles: member k of a stacked run equals an independent run of its own config (seed,
learning rate, warm-up, schedule, weight decay, clipping norm, dropout rate, wavelength base,
RoPE scaling, logit scaling, randomized range, task)."""

from __future__ import annotations

import jax
import numpy as np
import pytest
from conftest import DEFAULT_CONFIG, assert_same_trained_parameters, tiny_overrides
from flax import nnx

from pe_research.config import load_config
from pe_research.core.errors import ConfigError
from pe_research.data import stack_batches
from pe_research.runs.checkpoint import Checkpointer
from pe_research.runs.restore import load_run
from pe_research.runs.tracking import read_metrics
from pe_research.training.ensemble import train_ensemble
from pe_research.training.loop import train
from pe_research.training.member_checks import check_members

STEPS = 12
SEEDS = (0, 1, 2, 3)
RATES = (3e-3, 1e-3, 5e-3, 2e-3)
DECAYS = (0.0, 0.1, 0.0, 0.3)  # lr x decay x p moves a parameter ~0.7 % in 12 steps
# 0: no clipping, in the program of members that clip; 0.05 clips the last member's every step.
CLIPS = (0.0, 1.0, 0.0, 0.05)
BASES = (1e4, 500.0, 1e4, 1e3)  # RoPE's theta: the last member's rotates ~1.3x faster per pair
WARMUPS = (5, 2, 5, 9)  # the last member's ramp lasts 9 of the 12 steps, the program's 5
# Mixed length sampling: members draw different lengths, so their batches are padded to the
# widest member's bucket; randomized positions make the member's own keys matter too.
OVERRIDES = tiny_overrides(**{
    "train.steps": STEPS, "train.log_every": 4, "train.eval_every": 6,
    "train.checkpoint_every": 6, "data.length_sampling": "per_batch",
    "model.pe.randomize.max_position": 64, "wandb.mode": "disabled"})


# Tasks of 5, 8 and 13 tokens: the first two members train padded to the third's vocabulary.
TASKS = ("reverse_string", "bucket_sort", "copy")


def member_config(seed: int, learning_rate: float | None = None, task: str | None = None,
                  weight_decay: float | None = None, clip_norm: float | None = None,
                  max_wavelength: float | None = None, warmup_steps: int | None = None):
    config = load_config(DEFAULT_CONFIG, OVERRIDES if task is None else
                         [*OVERRIDES, f"--config.task.name={task}"])
    config.seed = seed
    if learning_rate is not None:
        config.train.learning_rate = learning_rate
    if weight_decay is not None:
        config.train.weight_decay = weight_decay
    if clip_norm is not None:
        config.train.clip_norm = clip_norm
    if max_wavelength is not None:
        config.model.pe.max_wavelength = max_wavelength
    if warmup_steps is not None:
        config.train.warmup_steps = warmup_steps
    return config


def with_own_scalings(config) -> None:
    """YaRN for twice the trained lengths (its frequencies and q/k scale differ from plain RoPE's),
    HoPE at the trained length (only frequencies that complete a period in 9 positions rotate)
    and log-n logit scaling, where the program's model has none of them, and lengths drawn per
    example."""
    config.model.pe.scaling.type = "yarn"
    config.model.pe.scaling.factor = 2.0
    config.model.pe.scaling.original_max_position = 9
    config.model.pe.hope_train_length = 9
    config.model.pe.logit_scaling = "log_n_scaling"
    config.data.length_sampling = "mixed"  # and lengths drawn per example, not per batch


def params_of(run_dir) -> list[np.ndarray]:
    model = load_run(run_dir, "latest").model
    return [np.asarray(leaf) for leaf in jax.tree.leaves(nnx.state(model, nnx.Param))]


def losses(run_dir) -> list[tuple[int, float]]:
    return [(r["step"], r["train/loss"]) for r in read_metrics(run_dir) if "train/loss" in r]


def eval_values(run_dir) -> list[float]:
    return [r["eval/loss"] for r in read_metrics(run_dir) if "eval/loss" in r]


def assert_same_run(member, single) -> None:
    """Parameters, logged losses and evaluation curves of two runs agree to rounding."""
    assert_same_trained_parameters(params_of(member), params_of(single))
    member_losses, single_losses = losses(member), losses(single)
    assert [s for s, _ in member_losses] == [s for s, _ in single_losses] == [4, 8, 12]
    np.testing.assert_allclose([v for _, v in member_losses], [v for _, v in single_losses],
                               rtol=1e-5)
    assert len(eval_values(member)) == 2
    np.testing.assert_allclose(eval_values(member), eval_values(single), rtol=1e-5)


@pytest.mark.slow
def test_members_with_their_own_optimizer_settings_bases_and_scoring_equal_independent_runs(
        tmp_path):
    configs = [member_config(seed, rate, weight_decay=decay, clip_norm=clip, max_wavelength=base,
                             warmup_steps=warmup)
               for seed, rate, decay, clip, base, warmup in zip(SEEDS, RATES, DECAYS, CLIPS, BASES,
                                                                WARMUPS, strict=True)]
    configs[-1].train.predict_eos = False  # -EOS: its loss leaves the end token out
    configs[-1].train.schedule = "cosine"  # to zero at step 12, where the program's stays constant
    with_own_scalings(configs[-1])
    members = [tmp_path / f"seed_{seed}" for seed in SEEDS]
    result = train_ensemble(configs, members)
    assert result.compilations <= 2  # two target buckets at most (lengths 1-8, buckets 8/16)
    assert not result.diverged
    # The last member (its rate, warm-up, schedule, decay, clipping, base, scalings, HoPE and
    # scoring differ from the program's, member 0's):
    # its own seed, settings and slice of the stacked state all have to line up with a run of its
    # own, in training and in its periodic evaluations.
    single = member_config(SEEDS[-1], RATES[-1], weight_decay=DECAYS[-1], clip_norm=CLIPS[-1],
                           max_wavelength=BASES[-1], warmup_steps=WARMUPS[-1])
    single.train.predict_eos = False
    single.train.schedule = "cosine"
    with_own_scalings(single)
    train(single, tmp_path / "single")
    assert_same_run(members[-1], tmp_path / "single")
    # Different seeds really give different members.
    assert not np.allclose(params_of(members[0])[0], params_of(members[1])[0])


@pytest.mark.slow
def test_members_with_their_own_dropout_rates_equal_independent_runs(tmp_path):
    """Two seeds on lengths 1-20, whose batches fall in three buckets, on a shared length stream
    (``data.length_stream=shared``): both members draw the same width at every step, so their
    masks, drawn over the padded batch, match their single runs' bit for bit: 0 drops nothing,
    0.3 the draws of a run of its own. (On each seed's own stream the second member is padded to
    the first's bucket at some step and its masks differ.)"""
    rates = (0.0, 0.3)
    configs = [member_config(seed) for seed in (0, 1)]
    for config, rate in zip(configs, rates, strict=True):
        config.model.dropout_rate = rate
        config.data.train_lengths = (1, 20)
        config.data.length_stream = "shared"
    members = [tmp_path / f"dropout_{rate}" for rate in rates]
    result = train_ensemble(configs, members)
    assert result.compilations == 3 and not result.diverged  # one program per bucket
    for config, member in zip(configs, members, strict=True):
        train(config, tmp_path / f"single_{member.name}")
        assert_same_run(member, tmp_path / f"single_{member.name}")
    assert not np.allclose(params_of(members[0])[0], params_of(members[1])[0])


@pytest.mark.slow
def test_members_of_tasks_with_different_vocabularies_equal_independent_runs(tmp_path, capsys):
    """Three tasks of 5, 8 and 13 tokens; the first on plain positions, the others on positions
    randomized in [0, 64) and, the widest vocabulary's (so the program model's), [0, 128)."""
    def config(seed, task):
        member = member_config(seed, task=task)
        member.model.pe.randomize.max_position = (0, 64, 128)[TASKS.index(task)]
        return member

    configs = [config(seed, task) for seed, task in enumerate(TASKS)]
    members = [tmp_path / task for task in TASKS]
    result = train_ensemble(configs, members)
    console = capsys.readouterr()
    assert ("3 tasks (vocabularies padded to 13), positions: 1 plain, 1 in [0, 64), "
            "1 in [0, 128)") in console.out
    # the bar names the member being evaluated, at each of the two evaluations
    bar = console.err.replace("\r", "\n")
    assert [bar.count(f"train: evaluating member {k}/3:") for k in (1, 2, 3)] == [2, 2, 2]
    assert result.compilations <= 2 and not result.diverged
    for seed, (task, member) in enumerate(zip(TASKS, members, strict=True)):
        single = tmp_path / f"single_{task}"
        train(config(seed, task), single)
        assert_same_run(member, single)
        saved = load_run(member, "latest")
        assert saved.task.name == task  # an ordinary run directory of its own task and shapes
        assert saved.model.embed.embedding.shape[0] == saved.task.vocabulary.size


def test_the_comparison_of_trained_parameters_admits_rounding_and_no_more():
    leaf = np.linspace(-0.3, 0.3, 256, dtype=np.float32).reshape(16, 16)
    rounded = leaf.copy()
    rounded[5, 4] += 2e-6  # a small value off by rounding at its leaf's scale
    assert_same_trained_parameters([rounded], [leaf])
    for wrong in (leaf + 1e-4, np.where(leaf == leaf[5, 4], leaf + 1e-3, leaf)):
        with pytest.raises(AssertionError):
            assert_same_trained_parameters([wrong], [leaf])
    with pytest.raises(AssertionError):
        assert_same_trained_parameters([leaf[:8]], [leaf])


def test_members_may_differ_only_in_what_stacks():
    a, b = member_config(0), member_config(1)
    b.model.d_model = 32
    with pytest.raises(ConfigError, match="model.d_model"):
        check_members([a, b])
    with pytest.raises(ConfigError, match="distinct seeds"):
        check_members([member_config(0), member_config(0)])
    check_members([member_config(0), member_config(0, task="copy")])  # tasks stack
    longer = member_config(0)
    longer.data.train_lengths = (1, 6)
    plain = member_config(0)
    plain.model.pe.randomize.max_position = 0
    wider = member_config(1)
    wider.model.pe.randomize.max_position = 128
    check_members([member_config(0), longer, plain, wider])  # lengths and ranges stack
    with pytest.raises(ConfigError, match="distinct seeds .or .*randomized ranges"):
        check_members([member_config(0), plain, member_config(1), plain])
    scaled, log_n, ssmax = member_config(0), member_config(0), member_config(0)
    with_own_scalings(scaled)
    log_n.model.pe.logit_scaling = "log_n_scaling"
    ssmax.model.pe.logit_scaling = "ssmax"  # parameters of its own: never stacks
    check_members([member_config(0), scaled, log_n])
    with pytest.raises(ConfigError, match=r"model.pe.logit_scaling.*\(none or log_n_scaling\)"):
        check_members([member_config(0), ssmax])


def test_members_whose_models_differ_in_shape_beyond_the_vocabulary_are_refused():
    from pe_research.training.member_checks import member_shapes

    wider = member_config(1)
    wider.model.d_ff = 64
    member_shapes([member_config(0), member_config(1, task="copy")], [5, 13])
    with pytest.raises(ConfigError, match="parameter shapes differ"):
        member_shapes([member_config(0), wider], [5, 5])


def test_stacked_batches_are_padded_to_the_widest_member():
    narrow = {"source": np.ones((2, 8), np.int32), "source_mask": np.ones((2, 8), bool),
              "target_input": np.ones((2, 8), np.int32),
              "target_output": np.ones((2, 8), np.int32),
              "target_mask": np.ones((2, 8), bool), "lengths": np.full(2, 7, np.int32),
              "joint_mask": np.ones((2, 16), bool)}
    wide = {**narrow, **{k: np.ones((2, 16), narrow[k].dtype) for k in
                         ("target_input", "target_output", "target_mask")},
            "joint_mask": np.ones((2, 24), bool),
            "source_abacus": np.full((2, 8), 3, np.int32),  # a task with position IDs
            "target_abacus": np.ones((2, 16), np.int32)}
    stacked = stack_batches([narrow, wide])
    assert stacked["source"].shape == (2, 2, 8)
    assert stacked["target_mask"].shape == (2, 2, 16)
    assert stacked["target_mask"][0, :, 8:].sum() == 0  # the padding is masked
    assert stacked["target_mask"][1].all()
    assert stacked["joint_mask"].shape == (2, 2, 24) and stacked["joint_mask"][0, :, 16:].sum() == 0
    assert stacked["source_abacus"].shape == (2, 2, 8) and stacked["target_abacus"].shape == (
        2, 2, 16)
    assert not stacked["source_abacus"][0].any() and (stacked["source_abacus"][1] == 3).all()


@pytest.mark.slow
def test_diverging_member_stops_and_the_others_finish(tmp_path):
    configs = [member_config(0), member_config(1, learning_rate=1e30)]
    members = [tmp_path / "good", tmp_path / "bad"]
    result = train_ensemble(configs, members)
    assert list(result.diverged) == [members[1].absolute()]
    assert "diverged" in result.diverged[members[1].absolute()]
    assert Checkpointer(members[0] / "checkpoints", read_only=True).steps()[-1] == STEPS
    assert Checkpointer(members[1] / "checkpoints", read_only=True).steps() == []


@pytest.mark.slow
def test_single_stack_members_equal_single_runs_and_analyze(tmp_path, capsys):
    """Ensembles, training and analysis work the same for an encoder-only model."""
    from pe_research.cli.app import main

    def config(seed):
        c = member_config(seed)
        c.model.architecture = "encoder_only"
        c.train.steps = 6
        c.train.eval_every = 0
        return c

    members = [tmp_path / "seed_0", tmp_path / "seed_1"]
    train_ensemble([config(0), config(1)], members)
    train(config(1), tmp_path / "single_1")
    assert_same_trained_parameters(params_of(members[1]), params_of(tmp_path / "single_1"))
    assert main(["analyze", str(members[1])]) == 0
    assert "encoder_self/layer_0" in capsys.readouterr().out


def test_members_reading_the_tasks_position_ids_equal_single_runs(tmp_path):
    """Position coupling with an Abacus table on addition: both draw their training offsets from
    the member's own keys (the Abacus offset up to the member's own largest k, 4 where the
    program's model has 9), and the batch's position IDs are stacked with its tokens."""
    def config(seed, max_k):
        member = load_config(DEFAULT_CONFIG, [
            *OVERRIDES, "--config.task.name=addition", "--config.task.reversed=True",
            "--config.task.operand_lengths=per_pair", "--config.task.zero_pad=False",
            "--config.data.length_sampling=mixed", "--config.data.buckets=(8,16,32)",
            "--config.data.train_lengths=(1,5)", "--config.train.eval_lengths=(8,)",
            "--config.eval.lengths=(8,)",
            "--config.model.pe.type=position_coupling", "--config.model.pe.max_position=24",
            "--config.model.pe.randomize.max_position=0",
            "--config.model.pe.abacus=True", "--config.model.pe.abacus_table_size=32",
            f"--config.model.pe.abacus_max_k={max_k}"])
        member.seed = seed
        return member

    members = [tmp_path / "seed_0", tmp_path / "seed_1"]
    result = train_ensemble([config(0, 9), config(1, 4)], members)
    assert not result.diverged
    train(config(1, 4), tmp_path / "single")
    assert_same_run(members[1], tmp_path / "single")
