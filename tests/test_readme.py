"""README's Python blocks run as they stand, in order, in one namespace.

Every ```python block of README.md is executed unless the line before it is an HTML comment
starting with ``<!-- not run`` (a block that needs pytest's fixtures or a third-party package
says so there). A block that raises fails this test with the block's first line. The blocks
assert their own claims (verdicts, exactness), so a README that drifts from the code fails here.
"""

from __future__ import annotations

import pathlib
import re

import pytest

README = pathlib.Path(__file__).resolve().parent.parent / "README.md"
BLOCK = re.compile(r"(?P<before>[^\n]*)\n```python\n(?P<code>.*?)\n```", re.S)


def blocks() -> list[tuple[int, str]]:
    text = README.read_text()
    out = []
    for m in BLOCK.finditer(text):
        if m.group("before").strip().startswith("<!-- not run"):
            continue
        line = text[: m.start("code")].count("\n") + 1
        out.append((line, m.group("code")))
    return out


def test_readme_has_python_blocks_to_run():
    assert len(blocks()) >= 5


@pytest.mark.slow
def test_readme_python_blocks_run(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    namespace: dict[str, object] = {"__name__": "readme"}
    for line, code in blocks():
        try:
            exec(compile(code, f"README.md:{line}", "exec"), namespace)
        except Exception as e:  # report which block broke
            raise AssertionError(f"README.md block at line {line} failed: {type(e).__name__}: {e}") from e
