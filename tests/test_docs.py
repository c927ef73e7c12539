"""README and docs/: their Python blocks run as they stand, and their links resolve.

Every ```python block of README.md and of every Markdown page under docs/ is executed, per file,
in order, in one namespace per file, unless the line before it is an HTML comment starting with
``<!-- not run`` (a block that needs pytest's fixtures, a third-party package or a GPU says so
there). A block that raises fails the test of its file with the file and the block's line. The
blocks assert their own claims (verdicts, exactness), so a page that drifts from the code fails
here. The blocks run in a temporary folder in which ``docs`` points at the repository's docs/,
so a path such as ``docs/examples/top_p_rule.py`` resolves and nothing is written to the
checkout.

The cheap checks (not marked slow): README keeps at least five runnable blocks; every link of
README and docs/ points inside the repository (no URL) to a file or folder that exists, and every
``#anchor`` to a heading of that page; every page under docs/ is reachable from README.
"""

from __future__ import annotations

import pathlib
import re
from urllib.parse import unquote

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
DOCS = ROOT / "docs"
BLOCK = re.compile(r"(?P<before>[^\n]*)\n```python\n(?P<code>.*?)\n```", re.S)
FENCE = re.compile(r"^(```|~~~).*?^\1[^\n]*$", re.S | re.M)
INLINE_CODE = re.compile(r"`[^`\n]*`")
LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
SCHEME = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:")


def pages() -> list[pathlib.Path]:
    """README.md, then every Markdown page under docs/, in a stable order."""
    return [README, *sorted(DOCS.rglob("*.md"))]


def rel(page: pathlib.Path) -> str:
    return page.relative_to(ROOT).as_posix()


def blocks(page: pathlib.Path) -> list[tuple[int, str]]:
    """The runnable ```python blocks of ``page``: (line of the block's first code line, code)."""
    text = page.read_text()
    out = []
    for m in BLOCK.finditer(text):
        if m.group("before").strip().startswith("<!-- not run"):
            continue
        line = text[: m.start("code")].count("\n") + 1
        out.append((line, m.group("code")))
    return out


def prose(text: str) -> str:
    """``text`` without fenced code blocks and inline code spans (links there are not links)."""
    return INLINE_CODE.sub("", FENCE.sub("", text))


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lowercase, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link's text only
    text = text.strip().lower().replace("`", "")
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(page: pathlib.Path) -> set[str]:
    """Every heading anchor of ``page``, with GitHub's -1, -2 ... for repeated headings."""
    seen: dict[str, int] = {}
    out = set()
    for line in FENCE.sub("", page.read_text()).splitlines():
        m = re.match(r"#{1,6}\s+(.*?)\s*#*\s*$", line)
        if not m:
            continue
        base = slug(m.group(1))
        n = seen.get(base, 0)
        seen[base] = n + 1
        out.add(base if n == 0 else f"{base}-{n}")
    return out


def links(page: pathlib.Path) -> list[str]:
    return LINK.findall(prose(page.read_text()))


def broken_links(page: pathlib.Path) -> list[str]:
    """What is wrong with each link of ``page``: outside the repository, missing, bad anchor."""
    problems = []
    for target in links(page):
        if SCHEME.match(target) or target.startswith("//"):
            problems.append(f"{target}: points outside the repository")
            continue
        path, _, anchor = target.partition("#")
        dest = (page.parent / unquote(path)).resolve() if path else page
        if not dest.is_relative_to(ROOT):
            problems.append(f"{target}: points outside the repository")
        elif not dest.exists():
            problems.append(f"{target}: no such file")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            problems.append(f"{target}: no heading #{anchor} in {rel(dest)}")
    return problems


def test_readme_has_python_blocks_to_run():
    assert len(blocks(README)) >= 5


def test_readme_stays_under_200_lines():
    """README is what a newcomer reads in ten minutes: what it is, the set-up, a tour, one line per
    finding; the rest lives under docs/."""
    lines = README.read_text().splitlines()
    assert len(lines) < 200, f"README.md has {len(lines)} lines; move detail under docs/"


@pytest.mark.parametrize("page", pages(), ids=rel)
def test_links_stay_inside_the_repository_and_resolve(page):
    assert not broken_links(page), f"{rel(page)}: " + "; ".join(broken_links(page))


def test_every_docs_page_is_reachable_from_readme():
    reached, todo = set(), [README]
    while todo:
        page = todo.pop()
        for target in links(page):
            path = target.partition("#")[0]
            if not path or SCHEME.match(path):
                continue
            dest = (page.parent / unquote(path)).resolve()
            if dest.suffix == ".md" and dest.is_file() and dest not in reached and dest.is_relative_to(DOCS):
                reached.add(dest)
                todo.append(dest)
    top = {p for p in DOCS.glob("*.md")}
    linked_from_readme = {(README.parent / t.partition("#")[0]).resolve() for t in links(README)}
    unlinked = sorted(rel(p) for p in top - linked_from_readme)
    assert not unlinked, f"not linked from README: {unlinked}"
    missing = set(DOCS.rglob("*.md")) - reached
    assert not missing, f"not reachable from README: {sorted(rel(p) for p in missing)}"


def test_every_docs_page_opens_with_a_title():
    for page in sorted(DOCS.rglob("*.md")):
        first = page.read_text().lstrip().splitlines()[0]
        if page.parent.name == "measurements" and page.name != "README.md":
            continue  # raw outputs of commands, kept as they were written
        assert first.startswith("# "), f"{rel(page)} does not start with a title"


@pytest.mark.slow
@pytest.mark.parametrize("page", [p for p in pages() if blocks(p)], ids=rel)
def test_python_blocks_run(page, tmp_path, monkeypatch, capsys):
    (tmp_path / "docs").symlink_to(DOCS, target_is_directory=True)
    monkeypatch.chdir(tmp_path)
    namespace: dict[str, object] = {"__name__": f"docs:{rel(page)}"}
    for line, code in blocks(page):
        try:
            exec(compile(code, f"{rel(page)}:{line}", "exec"), namespace)
        except Exception as e:  # report which block broke
            raise AssertionError(f"{rel(page)} block at line {line} failed: {type(e).__name__}: {e}") from e


def test_ci_runs_the_test_command_readme_gives():
    """.ci/run's command is README's, to the letter (a drift would test something README
    does not promise)."""
    ci = (ROOT / ".ci" / "run").read_text().splitlines()
    command = ci[ci.index("# README's test command:") + 1]
    assert f"\n{command}\n" in (ROOT / "README.md").read_text()
