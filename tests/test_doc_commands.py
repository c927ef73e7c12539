"""Every ``specproof ...`` command README.md and docs/ write parses with the real parser.

The commands are read from the pages' shell blocks (```bash, ```sh, ```console and ``` without a
language), a line at a time, a trailing backslash joining the next; the text after `` #`` is a
comment; a pipe's right side, redirections (``> FILE``) and a trailing ``&`` are the shell's,
not the command's. Each is split as a shell would and given to :func:`specproof.properties.cli.build_parser`
(its ``parse_args``: nothing runs). A flag a page writes that the parser does not know, a value it
refuses (a choice, a switch given a value) or a subcommand that does not exist fails here with the
page, the line and argparse's own message. Inline commands (between backticks in the prose) that
start ``specproof ``, give at least one flag and hold no placeholder are read too (prose that names
a subcommand, `specproof replay`, is not a command line).
"""

from __future__ import annotations

import contextlib
import io
import pathlib
import re
import shlex

import pytest

from specproof.properties.cli import build_parser

ROOT = pathlib.Path(__file__).resolve().parent.parent
#: a fenced block: its language and body (fences are paired in order, so the closing fence of a
#: block in another language is never read as the opening of a shell block)
FENCE = re.compile(r"^```(?P<lang>[\w+-]*)[^\n]*\n(?P<body>.*?)^```[ \t]*$", re.S | re.M)
SHELL_LANGS = {"bash", "sh", "console", "shell", ""}
INLINE = re.compile(r"`(specproof [^`]+)`")
#: words that stand for something the reader supplies: an inline command holding one is not parsed
PLACEHOLDER = re.compile(r"\.\.\.|[A-Z]{3,}(?![a-z])|<[^>]+>|\bN\b")


def pages() -> list[pathlib.Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def commands(page: pathlib.Path) -> list[tuple[int, str]]:
    """(line, command) for every specproof command of the page's shell blocks and prose."""
    text = page.read_text()
    out: list[tuple[int, str]] = []
    for m in FENCE.finditer(text):
        if m.group("lang") not in SHELL_LANGS:
            continue
        first = text[: m.start("body")].count("\n") + 1
        lines = m.group("body").splitlines()
        i = 0
        while i < len(lines):
            line, at = lines[i], first + i
            while line.rstrip().endswith("\\") and i + 1 < len(lines):
                i += 1
                line = line.rstrip()[:-1] + " " + lines[i].strip()
            i += 1
            line = line.strip().removeprefix("$ ")
            for part in re.split(r"\s(?:&&|\|\||;)\s", line):
                part = part.split(" #", 1)[0].strip()
                part = re.split(r"\s\|\s", part)[0]  # what a pipe feeds is another command
                part = re.sub(r"\s+\d?>>?\s*\S+", "", part).removesuffix("&").strip()  # redirections, &
                words = part.split()
                # a line the command printed ("specproof e2e: ...") is output, not a command
                if words[:1] == ["specproof"] and len(words) > 1 and not words[1].endswith(":"):
                    out.append((at, part))
    for m in INLINE.finditer(text):
        command = m.group(1).strip()
        if " --" in command and not PLACEHOLDER.search(command):
            out.append((text[: m.start()].count("\n") + 1, command))
    return out


CASES = [(p, at, c) for p in pages() for at, c in commands(p)]


def test_the_pages_write_commands():
    assert len(CASES) > 40, len(CASES)


@pytest.mark.parametrize(
    ("page", "line", "command"),
    CASES,
    ids=[f"{p.relative_to(ROOT)}:{at}" for p, at, _ in CASES],
)
def test_every_documented_command_parses(page, line, command):
    argv = shlex.split(command)[1:]
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            build_parser().parse_args(argv)
    except SystemExit as e:
        if e.code not in (0, None):
            pytest.fail(f"{page.relative_to(ROOT)}:{line}: {command}\n{err.getvalue().strip()}")


#: documented commands cheap enough to run here, in their page's order, with the exit status the
#: page implies (1: the audit finds the planted bug; 0 otherwise); each must still be on its page
RUN = [
    ("README.md", "specproof audit --help", 0),
    ("docs/engine-audit.md", "specproof backends --kind engine", 0),
    (
        "docs/engine-audit.md",
        "specproof audit engine mutant.temperature_target_only --tv 0.1 --seed 3 --json e.json",
        1,
    ),
    ("docs/engine-audit.md", "specproof replay e.json -o test_engine_witness.py", 0),
]


def test_the_cheap_documented_commands_run_as_written(tmp_path, monkeypatch, capsys):
    """The commands of :data:`RUN`, as their pages write them, run in one folder one after the
    other (the replay reads the audit's JSON): each exits as the page implies, and the replay
    writes its test."""
    from specproof.properties.cli import main

    monkeypatch.chdir(tmp_path)
    for page, command, status in RUN:
        assert command in [c for _, c in commands(ROOT / page)], f"{page} no longer writes {command!r}"
        assert main(shlex.split(command)[1:]) == status, command
    assert (tmp_path / "test_engine_witness.py").read_text().startswith('"""Replay of the engine audit')
    capsys.readouterr()


def test_the_documented_prefix_cache_audit_runs_the_axis(tmp_path, capsys):
    """docs/endpoint-audit.md's ``--prefix-cache`` line, as the page writes it, against the correct
    stand-in and its twin (their URLs put for the page's 127.0.0.1:8080 and :8081) with a small
    fixed size appended: it audits every case cold and after a prefix-cache hit, counts the warm
    requests' hits, passes, and its plan line states the fixed size it ran (not the planner's)."""
    import json

    from specproof.properties.cli import main
    from specproof.properties.endpoint.standin import StandIn

    page = ROOT / "docs" / "endpoint-audit.md"
    (command,) = [
        c for _, c in commands(page) if c.startswith("specproof audit endpoint") and "--prefix-cache" in c
    ]
    assert "http://127.0.0.1:8080" in command and "--twin http://127.0.0.1:8081" in command, command
    out = tmp_path / "prefix.json"
    with StandIn(loop="laws") as server, StandIn(speculative=False, loop="laws") as twin:
        line = command.replace("http://127.0.0.1:8080", server.url).replace("http://127.0.0.1:8081", twin.url)
        argv = shlex.split(line)[1:] + ["--samples", "4", "--report-samples", "4", "--json", str(out)]
        assert main(argv) == 0
    printed = capsys.readouterr().out
    data = json.loads(out.read_text())
    assert data["verdict"] == "pass"
    assert [c["case"]["cache"] for c in data["cases"]] == ["cold", "warm"] * 2
    hits = data["plugins"]["cache"]
    assert hits["hits"] == hits["counted"] == hits["warm"] > 0, hits
    assert "256 tokens per case at most, a fixed size (4 samples of M = 64)" in printed, printed
