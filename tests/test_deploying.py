"""docs/deploying.md's commands, as written: the flags its llama-server lines give are the ones the
project's own tests serve with (``llamacpp.server_command``), and, with the pinned build, its
shell block runs (on free loopback ports, in a temporary folder) to the verdict the page states;
without ``--spec-type`` the same block stops in seconds with ``no_speculation`` and the hint."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest
from page_blocks import bash_blocks, run_block

from specproof.properties.servers import llamacpp
from specproof.properties.verdicts import Verdict

PAGE = Path(__file__).resolve().parent.parent / "docs" / "deploying.md"


def block() -> str:
    """The page's first bash block (llama-server)."""
    found = bash_blocks(PAGE)
    assert found, "docs/deploying.md has no bash block"
    return found[0]


def expanded() -> str:
    """The block with ``$COMMON`` written out and continuation lines joined."""
    text = block().replace("\\\n", " ")
    common = re.search(r'^COMMON="([^"]*)"', text, re.M)
    assert common, "the block sets COMMON"
    return re.sub(r"\s+", " ", text.replace("$COMMON", common.group(1)))


def test_the_page_serves_with_the_flags_the_tests_serve_with() -> None:
    """Every flag and value of the tested server command, the draft's included, is on the page's
    speculative server line; the twin's line has them too, without the draft."""
    lines = [ln for ln in expanded().split("& ") if "llama-server" in ln]
    assert len(lines) == 2, lines
    spec, twin = lines if "-md" in lines[0] else lines[::-1]
    cmd = llamacpp.server_command(Path("BIN"), Path("M"), 1, draft=Path("D"))
    skip = {"-m", "--port", "-md"}  # the paths and the port: the page's own variables
    i = 1
    while i < len(cmd):
        flag = cmd[i]
        value = cmd[i + 1] if i + 1 < len(cmd) and not cmd[i + 1].startswith("-") else None
        i += 2 if value is not None else 1
        if flag in skip:
            continue
        want = f"{flag} {value}" if value is not None else flag
        assert want in spec, f"the speculative server line lacks {want!r}"
    for flag in ("--spec-type draft-simple", "-md "):
        assert flag in spec and flag not in twin
    for pair in ("-fa off", "-ctk f32", "-ctv f32", "--metrics", "-np 1"):
        assert pair in twin


def _run(tmp_path: Path, script: str, timeout: float) -> tuple[subprocess.CompletedProcess[str], float]:
    return run_block(tmp_path, script, timeout)


@pytest.mark.llamacpp
def test_the_pages_commands_run_to_the_verdict_it_states(llamacpp_bin: Path, tmp_path: Path) -> None:
    """The block as written: `misreported` (exit 6), the law tests seeing nothing, the reported
    probabilities wrong; the JSON and the HTML report written where the page says."""
    done, _ = _run(tmp_path, block(), timeout=900)
    assert done.returncode == Verdict.MISREPORTED.exit_code, done.stdout[-3000:] + done.stderr[-3000:]
    result = json.loads((tmp_path / "audit.json").read_text())
    assert result["verdict"] == "misreported"
    assert "no deviation detected" in done.stdout, done.stdout[-3000:]
    assert "reported probabilities: WRONG" in done.stdout, done.stdout[-3000:]
    assert (tmp_path / "audit.html").read_text().lstrip().lower().startswith("<!doctype html")


@pytest.mark.llamacpp
def test_without_a_speculation_type_the_block_stops_at_once_with_the_cause(
    llamacpp_bin: Path, tmp_path: Path
) -> None:
    """The page's warning, shown: the same block without `--spec-type` (a draft model alone never
    drafts) reads `no_speculation` within 30 s of the audit's start, naming the flag."""
    script = block().replace(" --spec-type draft-simple", "")
    assert "--spec-type" not in script
    done, _ = _run(tmp_path, script, timeout=600)
    assert done.returncode == Verdict.NO_SPECULATION.exit_code, done.stdout[-3000:] + done.stderr[-3000:]
    assert "--spec-type draft-simple" in done.stdout
    result = json.loads((tmp_path / "audit.json").read_text())
    assert result["verdict"] == "no_speculation" and result["samples"] == 0
    assert result["seconds"] < 30, result["seconds"]


@pytest.mark.llamacpp
def test_the_llama_cpp_python_block_runs_to_a_pass(tmp_path: Path) -> None:
    """The page's second block as written: llama-cpp-python's server with prompt lookup and its
    twin, audited through text prompts and the token map `tiny-models` writes: `pass` (exit 0)."""
    from specproof.properties.servers import llamacpp_python

    if not llamacpp_python.is_installed():
        pytest.skip("llama-cpp-python is not installed (`specproof llamacpp install-python`)")
    script = bash_blocks(PAGE)[1]
    assert "--profile llamacpp-python" in script and "llama_cpp.server" in script
    done, _ = _run(tmp_path, script, timeout=900)
    assert done.returncode == Verdict.PASS.exit_code, done.stdout[-3000:] + done.stderr[-3000:]
    result = json.loads((tmp_path / "lcp.json").read_text())
    assert result["verdict"] == "pass" and result["samples"] >= 64, result["verdict"]
    from specproof.properties.servers import gguf_models

    assert json.loads((tmp_path / "vocab.json").read_text()) == list(gguf_models.VOCAB)


def test_the_pages_table_of_what_tiny_models_writes_is_what_it_writes(tmp_path: Path) -> None:
    """Every path the page's table of ``specproof tiny-models DIR`` names is written, and the
    command writes no top-level entry the table leaves out."""
    from specproof.properties.cli import main

    text = PAGE.read_text()
    part = text.split("## What `specproof tiny-models DIR` writes", 1)[1].split("\n## ", 1)[0]
    paths = re.findall(r"`(DIR/[^`]+)`", part)
    assert len(paths) >= 6, paths
    assert main(["tiny-models", str(tmp_path)]) == 0
    for p in paths:
        assert (tmp_path / p.removeprefix("DIR/")).exists(), p
    named = {p.removeprefix("DIR/").split("/")[0] for p in paths}
    assert {e.name for e in tmp_path.iterdir()} <= named
