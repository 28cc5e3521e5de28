"""Every error a user can cause is one line on stderr, exit code 2, and writes nothing."""

from __future__ import annotations

import errno
import os
import subprocess
from pathlib import Path

import pytest
from conftest import DEFAULT_CONFIG, REPO, cli_command, subprocess_env, tiny_overrides

from pe_research.cli.app import describe_os_error, main


def _write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def _cases(tmp: Path) -> dict[str, tuple[list[str], str, Path]]:
    """name -> (arguments after `train`, expected text on stderr, a path that must not appear)."""
    syntax = _write(tmp / "syntax.py", "def get_config(:\n")
    raises = _write(tmp / "raises.py",
                    "def get_config():\n    x = 1\n    raise RuntimeError('boom')\n")
    no_function = _write(tmp / "no_function.py", "x = 1\n")
    a_file = _write(tmp / "a_file", "")
    tiny = tiny_overrides(**{"wandb.mode": "disabled"})
    default = ["--config", str(DEFAULT_CONFIG)]
    return {
        "negative seed": ([*default, *tiny, "--config.seed=-1", "--workdir", str(tmp / "w1")],
                          "seed=-1 is invalid: a non-negative 32-bit integer", tmp / "w1"),
        "seed beyond 32 bits": ([*default, *tiny, f"--config.seed={2**32}", "--workdir",
                                 str(tmp / "w2")], "non-negative 32-bit", tmp / "w2"),
        "distributed on one host": ([*default, *tiny, "--config.distributed=true", "--workdir",
                                     str(tmp / "w3")], "--config.distributed=false", tmp / "w3"),
        "config syntax error": (["--config", str(syntax), "--workdir", str(tmp / "w4")],
                                "syntax error at line 1", tmp / "w4"),
        "config raises": (["--config", str(raises), "--workdir", str(tmp / "w5")],
                          "raised RuntimeError at line 3: boom", tmp / "w5"),
        "no get_config": (["--config", str(no_function), "--workdir", str(tmp / "w6")],
                          "must define get_config()", tmp / "w6"),
        "workdir is a file": ([*default, *tiny, "--workdir", str(a_file)],
                              "is a file, not a directory", a_file / "config.json"),
        "workdir under a file": ([*default, *tiny, "--workdir", str(a_file / "run")],
                                 "a file is in the way", a_file / "run"),
        # /sys refuses new entries even to root, which chmod cannot do in a root CI container.
        "parent not writable": ([*default, *tiny, "--workdir", "/sys/pe_research_test/run"],
                                "choose a directory you can write to",
                                Path("/sys/pe_research_test")),
        "fine-tuning from nowhere": ([*default, *tiny, f"--config.train.init_from={tmp}/none",
                                      "--workdir", str(tmp / "w7")],
                                     "train.init_from=", tmp / "w7"),
        "run dir not writable": ([*default, *tiny, "--workdir", "/sys/kernel"],
                                 "cannot write /sys/kernel/.lock", Path("/sys/kernel/.lock")),
    }


def test_user_errors_are_one_line_with_exit_code_2(tmp_path, capsys, monkeypatch):
    """Every case through the CLI's entry point in this process (what ``pe-research`` runs)."""
    monkeypatch.delenv("PE_RESEARCH_DEBUG", raising=False)
    for name, (args, expected, absent) in _cases(tmp_path).items():
        code = main(["train", *args])
        out, err = capsys.readouterr()
        assert code == 2, f"{name}: exit {code}\n{err[-3000:]}"
        assert len(err.strip().splitlines()) == 1, f"{name}: {err[-3000:]}"
        assert expected in err and err.startswith("pe-research train: "), f"{name}: {err}"
        assert not absent.exists(), f"{name}: {absent} was created"
        assert out == "", f"{name}: {out}"


# A config error and an OS error, each in a process of its own: nothing else (an import's
# warning, a library's log line) reaches the terminal.
IN_A_PROCESS = ("negative seed", "parent not writable")


@pytest.mark.slow
def test_the_console_script_prints_only_that_line(tmp_path):
    cases = _cases(tmp_path)
    env = subprocess_env(PE_RESEARCH_DEBUG="")
    processes = {name: subprocess.Popen([*cli_command(), "train", *cases[name][0]], cwd=REPO,
                                        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                        text=True)
                 for name in IN_A_PROCESS}
    for name, process in processes.items():
        out, err = process.communicate(timeout=180)
        _, expected, absent = cases[name]
        assert process.returncode == 2, f"{name}: exit {process.returncode}\n{err[-3000:]}"
        assert len(err.strip().splitlines()) == 1, f"{name}: {err[-3000:]}"
        assert expected in err and err.startswith("pe-research train: "), f"{name}: {err}"
        assert not absent.exists(), f"{name}: {absent} was created"
        assert out == "", f"{name}: {out}"


def test_debug_shows_the_traceback(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("PE_RESEARCH_DEBUG", raising=False)
    config = _write(tmp_path / "syntax.py", "def get_config(:\n")
    args = ["train", "--config", str(config), "--workdir", str(tmp_path / "run")]
    assert main(args) == 2
    assert "syntax error at line 1" in capsys.readouterr().err
    with pytest.raises(Exception, match="syntax error at line 1"):
        main([*args, "--debug"])


def test_debug_environment_variable(tmp_path, monkeypatch):
    config = _write(tmp_path / "none.py", "x = 1\n")
    monkeypatch.setenv("PE_RESEARCH_DEBUG", "1")
    with pytest.raises(Exception, match="must define get_config"):
        main(["train", "--config", str(config), "--workdir", str(tmp_path / "run")])


@pytest.mark.parametrize(("code", "expected"), [
    (errno.ENOSPC, "no space left for /d/x (No space left on device); free disk space"),
    (errno.EACCES, "cannot write /d/x: Permission denied; choose a directory you can write"),
    (errno.ENOTDIR, "/d/x: a file is in the way (Not a directory)"),
    (errno.ENOENT, "/d/x does not exist; check the path"),
])
def test_os_errors_name_the_path_and_the_fix(code, expected):
    assert describe_os_error(OSError(code, os.strerror(code), "/d/x")).startswith(expected)


def test_the_packages_own_warnings_are_one_line_and_others_go_on_as_before(tmp_path, capsys,
                                                                           monkeypatch):
    """W&B missing (a warning of pe_research.runs.tracking) is one ``warning:`` line; a warning
    of another module reaches the handler in place before (here pytest's record)."""
    import sys
    import warnings

    from pe_research.core.console import own_warnings_on_one_line
    from pe_research.runs.tracking import make_writer

    monkeypatch.setitem(sys.modules, "wandb", None)  # `import wandb` fails: a warning
    with pytest.warns(UserWarning) as caught:
        with own_warnings_on_one_line():
            make_writer({"mode": "offline", "project": "p", "entity": "", "group": "",
                         "tags": (), "name": ""}, tmp_path).finish()
            warnings.warn("a warning of another module", UserWarning, stacklevel=1)
        warnings.warn("after the command", UserWarning, stacklevel=1)
    assert [str(w.message) for w in caught] == ["a warning of another module",
                                                "after the command"]
    err = capsys.readouterr().err
    assert err.startswith("warning: W&B disabled for this run (ModuleNotFoundError") and \
        err.count("\n") == 1, err
