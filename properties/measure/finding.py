"""The shape of a finding in a third-party engine: what a maintainer needs to act on one.

Each :class:`Finding` names the engine and the version it was found in, the source lines of the
defect (:class:`Where`: file, line and a fragment of that line, checked against the installed
source by tests/test_findings_pages.py wherever the source is on the machine), the measurement
JSON that holds the evidence (:class:`Evidence`: which rows of which file under
docs/measurements/), the specproof command that shows it, the tests that reproduce it (run by
``specproof findings reproduce SLUG``), a standalone reproduction where one can run without
specproof, the fix, and the upstream thread where one exists. The pages under docs/findings/
are written from this table and the JSON (:mod:`.pages`); the reasoning behind each cause is in
proofs_notes/thirdparty.md, the section :attr:`Finding.note` names.
"""

from __future__ import annotations

from dataclasses import dataclass

#: the date the newest releases on the package registry were last looked up
CHECKED = "2026-12-06"


@dataclass(frozen=True)
class Where:
    """One place in the engine's source at the finding's version.

    ``root`` says where that source lies on a machine that has the engine: ``py:PKG`` (an
    importable package; ``path`` is relative to the folder above it), ``env:NAME:PKG`` (a package
    inside the pinned environment NAME), ``sdist:llama.cpp`` (llama.cpp as vendored in the
    llama-cpp-python source archive specproof builds from), or ``""`` (compiled code whose source
    is not installed: read at the release tag, or at :attr:`read_at`). An empty ``text`` marks a
    place named for orientation (a function's start, a class): its line is not checked."""

    path: str
    line: int
    symbol: str
    text: str  # a fragment of line ``line``, to check the line still says it
    root: str = ""
    read_at: str = ""  # the commit read where the release's own source is not public


@dataclass(frozen=True)
class Evidence:
    """Rows of one measurement file: ``rows`` are the engine (or backend) names of its audits."""

    json: str  # a file under docs/measurements/
    rows: tuple[str, ...]


@dataclass(frozen=True)
class Finding:
    slug: str
    title: str
    system: str  # the engine as its users name it
    package: str  # the registry name of what was audited
    version: str
    commit: str  # the source commit where the release names one, else ""
    verdict: str  # what the audit says of the defective configuration
    where: tuple[Where, ...]
    evidence: tuple[Evidence, ...]
    command: str  # the specproof command that shows it
    tests: tuple[str, ...]  # pytest node ids that reproduce it (they assert the defect)
    note: str  # the section of proofs_notes/thirdparty.md with the reasoning
    newest: str  # the newest release on the registry at CHECKED
    on_newest: str = ""  # what the reproduction gave on the newest release, where it is not the pinned one
    upstream: str = "not reported upstream"
    scripts: tuple[str, ...] = ()  # standalone reproductions under docs/findings/repro/
    patch: str = ""  # where the project's fix is written, if it has one
    needs: str = ""  # what `findings reproduce` needs installed, in words
