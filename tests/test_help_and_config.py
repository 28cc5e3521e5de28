"""The command line teaches: every subcommand's --help shows examples and the override syntax,
--help imports no JAX, and `config show` prints the resolved config and every key."""

from __future__ import annotations

import subprocess
import sys

import pytest
from conftest import DEFAULT_CONFIG, REPO

from pe_research.cli.app import COMMANDS, build_parser, examples, main


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_every_subcommands_help_shows_an_example_and_the_override_syntax(command, capsys):
    with pytest.raises(SystemExit):
        main([command, "--help"])
    text = capsys.readouterr().out
    assert f"\n  pe-research {command} " in text, text
    assert "--config.KEY=VALUE" in text


def test_examples_come_from_the_modules_docstring():
    module = type(sys)("fake")
    module.__doc__ = ("One line.\n\n    pe-research fake --a 1 \\\n        --b 2\n\nProse, "
                      "not an example: pe-research fake.\n    pe-research fake --c\n")
    assert examples(module) == ("examples:\n  pe-research fake --a 1 \\\n      --b 2\n"
                                "  pe-research fake --c")


@pytest.mark.parametrize("argv", [["--help"], ["train", "--help"]])
def test_help_imports_no_jax(argv):
    probe = (f"import sys\nfrom pe_research.cli.app import main\ntry:\n    main({argv!r})\n"
             "except SystemExit:\n    pass\nprint('JAX', 'jax' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                         cwd=REPO, timeout=120, check=True).stdout
    assert out.strip().endswith("JAX False"), out[-300:]


def test_config_show_prints_an_overridden_key(capsys):
    assert main(["config", "show", str(DEFAULT_CONFIG), "--config.model.pe.type=alibi",
                 "--config.train.steps=123"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert "model.pe.type = 'alibi'" in lines and "train.steps = 123" in lines
    assert "model.pe.heads = 0" in lines  # the scheme's own keys, filled in


def test_config_show_keys_lists_defaults_and_allowed_values(capsys):
    assert main(["config", "show", str(DEFAULT_CONFIG), "--keys"]) == 0
    lines = capsys.readouterr().out.splitlines()
    schedule = next(line for line in lines if line.startswith("train.schedule = "))
    assert "default 'constant'" in schedule and "one of constant, cosine" in schedule
    assert any(line.startswith("model.d_model = ") and "default 64" in line for line in lines)


def test_an_unknown_key_in_config_show_is_one_line(capsys):
    assert main(["config", "show", str(DEFAULT_CONFIG), "--config.model.nope=1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "model.nope" in err[0]


def test_the_parser_knows_every_command():
    assert build_parser("config").parse_args(["config", "show", "x"]).command == "config"
