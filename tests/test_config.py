"""Config loading, dotted overrides, block rebuilding, validation messages, config.json."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import chdir_with_corpus

from pe_research.config import (
    apply_overrides,
    base_config,
    collect_overrides,
    load_config,
    to_dict,
)
from pe_research.config.files import from_mapping
from pe_research.config.validate import validate_config
from pe_research.core.errors import ConfigError
from pe_research.runs.run_dir import load_run_config, save_config

CONFIGS = Path(__file__).resolve().parents[1] / "configs"
DEFAULT = CONFIGS / "default.py"


def test_overrides_are_parsed_by_the_type_they_replace():
    config = load_config(DEFAULT, [
        "--config.train.steps=12", "--config.train.learning_rate=3e-4",
        "--config.model.scale_embedding=false", "--config.data.train_lengths=2,9",
        "--config.train.eval_lengths=(20, 30)", "--config.wandb.tags=a,b",
        "--config.wandb.name='my run'", "--config.eval.lengths=()"])
    assert config.train.steps == 12 and isinstance(config.train.steps, int)
    assert config.train.learning_rate == 3e-4
    assert config.model.scale_embedding is False
    assert config.data.train_lengths == (2, 9)
    assert config.train.eval_lengths == (20, 30)
    assert config.wandb.tags == ("a", "b")
    assert config.wandb.name == "my run"
    assert config.eval.lengths == ()


def test_a_float_key_set_to_an_int_takes_a_float_override_and_an_int_key_does_not():
    values = to_dict(base_config(task="selective_copy"))
    values["task"]["blanks_per_token"] = 1  # as a config file may write the float key's value
    config = from_mapping(values)  # as config.json is read back
    assert type(config.task.blanks_per_token) is int
    apply_overrides(config, ["task.blanks_per_token=0.5"])
    assert config.task.blanks_per_token == 0.5
    validate_config(config)
    with pytest.raises(ConfigError, match=r"train.steps=1.5 is invalid: expected int"):
        load_config(DEFAULT, ["--config.train.steps=1.5"])


def test_space_separated_overrides_are_collected():
    overrides, rest = collect_overrides(
        ["--workdir", "runs/x", "--config.train.steps", "7", "--config.seed=3"])
    assert overrides == ["--config.train.steps=7", "--config.seed=3"]
    assert rest == ["--workdir", "runs/x"]
    with pytest.raises(ConfigError, match="give a value"):
        collect_overrides(["--config.train.steps"])


@pytest.mark.parametrize(("override", "message"), [
    ("train.steps=ten", "train.steps='ten' is invalid: expected a value of type int"),
    ("model.dropout_rate=high", "model.dropout_rate='high' is invalid: expected a value of type"),
    ("model.tie_output=maybe", "model.tie_output='maybe' is invalid"),
    ("train.stepz=3", "train.stepz=None is invalid: not a config key; keys of train are"),
    ("optimizer.lr=3", "optimizer.lr=None is invalid: not a config key; keys of the config"),
    ("model.pe=rope", "model.pe='rope' is invalid: a block of settings: set one of its keys, "
                      "e.g. --config.model.pe.type=VALUE$"),
    ("train.eval_lengths=all", "train.eval_lengths='all' is invalid: expected a value of type "
                               "tuple like (24, 32, 48)$"),
])
def test_bad_override_names_key_and_value(override, message):
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")
                       .replace(".", r"\.")) as error:
        load_config(DEFAULT, [f"--config.{override}"])
    assert "\n" not in str(error.value)


def test_a_bad_override_of_a_long_value_shows_its_start_on_one_line():
    with pytest.raises(ConfigError, match=r"expected a value of type tuple like \(1, 2, 3, 4, "
                                          r"5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 1\.\.\.$"):
        load_config(CONFIGS / "sweeps/randomized_pe_pilot.py", ["--config.eval.lengths=all"])


def test_changing_the_scheme_rebuilds_its_block_first():
    # The scheme-specific key comes before the type change on the command line; it still applies.
    config = load_config(DEFAULT, ["--config.model.pe.max_len=300",
                                   "--config.model.pe.type=learned",
                                   "--config.model.pe.combine=concat"])
    assert config.model.pe.type == "learned"
    assert config.model.pe.max_len == 300 and config.model.pe.combine == "concat"
    assert "max_wavelength" not in config.model.pe  # rope's key is gone
    alibi = load_config(DEFAULT, ["--config.model.pe.randomize.max_position=256",
                                  "--config.model.pe.type=alibi"])
    assert alibi.model.pe.randomize.max_position == 256  # scheme-independent keys are kept
    assert set(alibi.model.pe) == {"type", "combine", "randomize", "layers", "logit_scaling",
                                   "ssmax_init", "abacus", "abacus_max_k", "abacus_table_size",
                                   "heads", "learnable_slopes"}


def test_changing_the_task_rebuilds_its_block():
    config = load_config(DEFAULT, ["--config.task.alphabet_size=7", "--config.task.name=copy"])
    assert dict(config.task) == {"name": "copy", "alphabet_size": 7}
    with pytest.raises(ConfigError, match="task.name='cpy' is invalid: choose one of"):
        load_config(DEFAULT, ["--config.task.name=cpy"])


@pytest.mark.parametrize(("overrides", "message"), [
    (["model.pe.type=rotary"], "model.pe.type='rotary' is invalid: choose one of"),
    (["model.pe.type=learned", "model.pe.max_len=32"],
     "model.pe.max_len=32 is invalid: the learned table has 32 rows but positions up to"),
    (["data.train_lengths=9,3"], "data.train_lengths=(9, 3) is invalid: min must not exceed max"),
    (["data.buckets=8,16"], "data.buckets=(8, 16) is invalid: no bucket holds"),
    (["data.buckets=32,16"], "data.buckets=(32, 16) is invalid: a non-empty, strictly increasing"),
    (["train.schedule=linear"], "train.schedule='linear' is invalid: choose one of"),
    (["train.learning_rate=0"], "train.learning_rate=0.0 is invalid: must be > 0"),
    (["train.learning_rate=1e39"], "train.learning_rate=1e+39 is invalid: must be > 0 and at "
                                   "most 3.403e+38 (float32's largest)"),
    (["train.best_metric=eval/bleu"], "train.best_metric='eval/bleu' is invalid: choose one of"),
    (["wandb.mode=cloud"], "wandb.mode='cloud' is invalid: choose one of"),
    (["model.d_model=30"], "model.d_model=30 is invalid: must be divisible by model.num_heads"),
    (["model.activation=tanh"], "model.activation='tanh' is invalid: choose one of"),
    (["model.pe.randomize.max_position=40"], "model.pe.randomize.max_position=40 is invalid"),
    (["eval.checkpoint=first"], "eval.checkpoint='first' is invalid"),
])
def test_validation_errors_name_key_value_and_fix(overrides, message):
    with pytest.raises(ConfigError) as caught:
        load_config(DEFAULT, [f"--config.{o}" for o in overrides])
    assert message in str(caught.value)
    assert "\n" not in str(caught.value)


def test_unknown_keys_in_a_config_file_are_rejected(tmp_path):
    path = tmp_path / "extra.py"
    path.write_text(
        "from pe_research.config import base_config\n\n"
        "def get_config():\n"
        "    config = base_config()\n"
        "    config.train.lr_decay = 0.5\n"
        "    config.model.vocab_size = 9\n"
        "    return config\n")
    with pytest.raises(ConfigError, match="train.lr_decay=0.5 is invalid: not a config key"):
        load_config(path)
    path.write_text(path.read_text().replace("    config.train.lr_decay = 0.5\n", ""))
    with pytest.raises(ConfigError, match="model.vocab_size=9 is invalid: set by the task"):
        load_config(path)


def test_missing_config_file():
    with pytest.raises(ConfigError, match="no such config file"):
        load_config("configs/nope.py")


def test_a_runs_config_json_is_a_config_file_and_other_files_are_refused(tmp_path):
    config = load_config(DEFAULT, ["--config.model.pe.type=alibi"])
    save_config(config, tmp_path)
    again = load_config(tmp_path / "config.json", ["--config.train.steps=7"])
    assert again.model.pe.type == "alibi" and again.train.steps == 7
    assert again.to_dict() == {**config.to_dict(), "train": {**config.train.to_dict(),
                                                               "steps": 7}}
    (tmp_path / "notes.txt").write_text("x")
    with pytest.raises(ConfigError, match=r"a config file \(configs/\*.py\) or a run's "
                                          "config.json"):
        load_config(tmp_path / "notes.txt")
    (tmp_path / "broken.json").write_text("{")
    with pytest.raises(ConfigError, match="cannot be read as JSON"):
        load_config(tmp_path / "broken.json")


def test_config_json_round_trip_keeps_tuples(tmp_path):
    config = load_config(DEFAULT, ["--config.model.pe.type=alibi"])
    save_config(config, tmp_path)
    reloaded = load_run_config(tmp_path)
    assert to_dict(reloaded) == to_dict(config)
    assert isinstance(reloaded.data.buckets, tuple)
    assert reloaded.model.pe.type == "alibi"
    assert load_run_config(tmp_path, ["model.pe.randomize.eval_policy=plain"]) \
        .model.pe.randomize.eval_policy == "plain"


def test_older_config_json_gets_new_keys_filled_in(tmp_path):
    values = to_dict(load_config(DEFAULT))
    del values["train"]["eval_batches"], values["wandb"]
    (tmp_path / "config.json").write_text(json.dumps(values))
    config = load_run_config(tmp_path)
    assert config.train.eval_batches == base_config().train.eval_batches
    assert config.wandb.mode == "offline"


def test_override_of_a_base_config_in_place():
    config = apply_overrides(base_config(), ["seed=5", "model.num_heads=8"])
    assert config.seed == 5 and config.model.num_heads == 8


@pytest.mark.parametrize("path", sorted(CONFIGS.glob("*.py")), ids=lambda p: p.stem)
def test_every_config_file_validates_and_names_its_command(path, tmp_path, monkeypatch):
    first_line = path.read_text().split('"""')[1].splitlines()[0]
    assert first_line.startswith(f"pe-research train --config configs/{path.name} --workdir ")
    if "language_model" in path.read_text():  # names a corpus file, relative to the cwd
        chdir_with_corpus(tmp_path, monkeypatch)
    if path.stem == "scan_length" and not Path("data/scan/tasks_train_length.txt").exists():
        with pytest.raises(ConfigError, match="data.scan_dir='data/scan' is invalid"):
            load_config(path)
        load_config(path, validate=False)
        return
    load_config(path)
