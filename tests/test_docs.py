"""The documents a newcomer reads: the README is a map, every document's ``pe-research``
commands run as written, and every link between the documents resolves."""

from __future__ import annotations

import ast
import re
import shlex
from pathlib import Path

import pytest
from conftest import REPO, chdir_with_corpus

from pe_research.cli.app import COMMANDS
from pe_research.config import base_config, flat_config, load_config, to_dict
from pe_research.positional import SCHEMES, default_pe_config
from pe_research.tasks import TASKS, default_task_config

README = REPO / "README.md"
DOCUMENTS = sorted([README, *(REPO / "docs").rglob("*.md"), REPO / "benchmarks" / "RESULTS.md"])
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
PATH = re.compile(r"(?<![\w/.])((?:configs|docs|experiments|benchmarks|tests|pe_research)/"
                  r"[\w/.-]*\w\.(?:py|md|txt))")


def code_blocks(text: str, language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", text, flags=re.DOTALL)


def commands(block: str) -> list[list[str]]:
    """The shell commands of a bash block, continuation lines joined, a quoted string over
    several lines kept whole (as a shell reads it), comments dropped."""
    joined = re.sub(r"\\\n\s*", " ", block)
    found, pending = [], ""
    for line in joined.splitlines():
        if not pending and (not line.strip() or line.strip().startswith("#")):
            continue
        pending = f"{pending}\n{line}" if pending else line
        try:
            found.append(shlex.split(pending, comments=True))
        except ValueError:  # a quote still open: the command goes on
            continue
        pending = ""
    assert not pending, f"a quote is never closed: {pending}"
    return found


SHELL_OPERATORS = {"&&", "||", ";", "|"}


def cli_calls(words: list[str]) -> list[list[str]]:
    """Every ``pe-research`` call in a command's words: after environment variables, ``srun``,
    a ``.venv/bin/`` path or ``&&``, and inside a quoted command (``ssh --command='...'``);
    each up to the next shell operator."""
    calls = []
    for index, word in enumerate(words):
        if Path(word).name == "pe-research":
            end = next((i for i in range(index, len(words)) if words[i] in SHELL_OPERATORS),
                       len(words))
            calls.append(words[index:end])
        elif "pe-research" in word and re.search(r"\s", word):
            calls += cli_calls(shlex.split(re.sub(r"^-[\w-]*=", "", word)))
    return calls


def known_keys() -> set[str]:
    """Every config key: the schema's, every scheme's ``model.pe`` block, every task's."""
    keys = set(flat_config(to_dict(base_config())))
    for name in SCHEMES:
        keys |= {f"model.pe.{key}" for key in flat_config(dict(default_pe_config(name)))}
    for name in TASKS:
        keys |= {f"task.{key}" for key in default_task_config(name)}
    return keys


def slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces as hyphens."""
    text = re.sub(r"[`*]", "", heading.strip().lower())
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    text = re.sub(r"```.*?```", "", path.read_text(), flags=re.DOTALL)
    return {slug(line.lstrip("#")) for line in text.splitlines() if line.startswith("#")}


def test_the_readme_is_a_map_with_contents():
    text = README.read_text()
    assert len(text.splitlines()) <= 300
    assert "## Contents" in text and "make demo" in text and "make test" in text
    for target in re.findall(r"- \[[^\]]+\]\((#[\w-]+)\)", text):
        assert target[1:] in anchors(README), target


def checked_calls(document: Path) -> list[list[str]]:
    """The ``pe-research`` calls of a document's bash blocks, each checked: a real subcommand,
    real config keys, and a training config that validates with its overrides."""
    keys, calls = known_keys(), []
    for block in code_blocks(document.read_text(), "bash"):
        for words in commands(block):
            for call in cli_calls(words):
                assert call[1] in COMMANDS, call
                overrides = [w for w in call if w.startswith("--config.")]
                for override in overrides:
                    key = override.split("=", 1)[0].removeprefix("--config.")
                    assert key in keys, f"{document.name}: {override}"
                if call[1] == "train":  # a whole training config: it must validate
                    load_config(REPO / call[call.index("--config") + 1], overrides)
                calls.append(call)
    return calls


@pytest.fixture
def in_a_checkout_with_the_corpus(tmp_path, monkeypatch):
    """Where the documents' commands run: the language-model configs read the corpus their
    documents write first (`pe-research data stdlib --to data/python_stdlib.txt`), which a fresh
    clone lacks until then."""
    chdir_with_corpus(tmp_path, monkeypatch)


def test_the_readme_shows_the_main_subcommands(in_a_checkout_with_the_corpus):
    assert {"train", "eval", "compare", "sweep", "analyze"} <= {
        call[1] for call in checked_calls(README)}


@pytest.mark.parametrize("document", DOCUMENTS, ids=lambda p: str(p.relative_to(REPO)))
def test_every_documents_commands_use_real_subcommands_and_config_keys(
        document, in_a_checkout_with_the_corpus):
    checked_calls(document)


def test_calls_are_found_after_variables_launchers_operators_and_inside_quotes():
    block = ("XLA_FLAGS=--x=8 pe-research train --config configs/default.py \\\n"
             "  --config.train.steps=5  # a comment\n"
             "# pe-research nothing\n"
             "srun .venv/bin/pe-research eval runs/a && pe-research compare 'runs/*'\n"
             "ssh host --command='\n  cd repo && .venv/bin/pe-research sweep \\\n"
             "    configs/sweeps/demo.py --jobs 2'\n"
             "bash -c 'pe-research eval runs/b --config.eval.lengths=\"(4, 8)\"'\n")
    calls = [call for words in commands(block) for call in cli_calls(words)]
    assert calls == [
        ["pe-research", "train", "--config", "configs/default.py", "--config.train.steps=5"],
        [".venv/bin/pe-research", "eval", "runs/a"], ["pe-research", "compare", "runs/*"],
        [".venv/bin/pe-research", "sweep", "configs/sweeps/demo.py", "--jobs", "2"],
        ["pe-research", "eval", "runs/b", "--config.eval.lengths=(4, 8)"]]
    with pytest.raises(AssertionError, match="never closed"):
        commands("pe-research train '--config.x=1\n")


def test_the_readmes_python_parses_and_shows_exactly_the_exported_api():
    import pe_research

    shown = set()
    for block in code_blocks(README.read_text(), "python"):
        for node in ast.walk(ast.parse(block)):
            if isinstance(node, ast.ImportFrom) and node.module == "pe_research":
                shown |= {alias.name for alias in node.names}
    assert shown == set(pe_research.__all__)


@pytest.mark.parametrize("document", DOCUMENTS, ids=lambda p: str(p.relative_to(REPO)))
def test_links_and_named_paths_resolve(document):
    text = document.read_text()
    for target in LINK.findall(text):
        if re.match(r"[a-z]+:", target):  # http:, mailto:
            continue
        path, _, anchor = target.partition("#")
        resolved = (document.parent / path).resolve() if path else document
        assert resolved.exists(), f"{document.name}: {target}"
        if anchor and resolved.suffix == ".md":
            assert anchor in anchors(resolved), f"{document.name}: {target}"
    for named in PATH.findall(text):
        assert (REPO / named).exists() or "runs/" in named, f"{document.name} names {named}"


def test_a_broken_link_is_seen(tmp_path):
    document = tmp_path / "a.md"
    document.write_text("# Title\n\nsee [b](b.md) and [here](#title) and [there](#nowhere)\n")
    targets = LINK.findall(document.read_text())
    assert targets == ["b.md", "#title", "#nowhere"]
    assert not (tmp_path / "b.md").exists()
    assert "title" in anchors(document) and "nowhere" not in anchors(document)


TIMING = re.compile(r"RESULTS\.md|history\.md|\d\s*(?:ms/step|steps/s|tokens/s)\b|\d+(?:\.\d+)?x "
                    r"(?:faster|slower)")


def test_the_code_says_why_not_how_fast():
    """Measured timings live in docs/performance.md and benchmarks/, not in the package's
    docstrings and comments (strings the program prints are not comments)."""
    found = []
    for path in sorted((REPO / "pe_research").rglob("*.py")):
        text = path.read_text()
        docstrings = [ast.get_docstring(node) or "" for node in ast.walk(ast.parse(text))
                      if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef)]
        comments = [line.split("#", 1)[1] for line in text.splitlines() if "#" in line]
        found += [f"{path.name}: {match}" for part in docstrings + comments
                  for match in TIMING.findall(part)]
    assert found == []
    assert TIMING.findall("ten per call: 5.2x faster (benchmarks/RESULTS.md), 1.03 ms/step")
