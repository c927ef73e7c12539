"""One sign-off for a deployment: the JSON of several audits of one server (its load axis, its
prefix cache, its request parameters, its recorded traffic) merged into one checklist with one
verdict (``specproof signoff A.json B.json ...``).

Each audit's own sign-off (:mod:`.signoff`) answers every question yes, no or not tested; merged,
a question is **no** where any audit said no (that audit's detail, named by its file), **yes**
where no audit said no and one said yes (from the evidence it gathered), else **not tested** with
what would test it. A traffic audit answers the law's question from the tokens the server served.
The verdict is the most severe of the audits' (:func:`~specproof.properties.verdicts.most_severe`).
Audits of different servers, or of different builds or models of one (as the servers said them),
are refused: the sign-off is of one deployment.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from specproof.properties.engine.signoff import NO, NOT_TESTED, YES, Item
from specproof.properties.report_model import to_markdown
from specproof.properties.verdicts import Verdict, most_severe
from specproof.reference.errors import UsageError

LAW = "the law holds under the deployed parameters"


@dataclass
class Deployment:
    """The merged sign-off (module docstring)."""

    server: str
    files: list[str]
    verdicts: dict[str, str]
    items: list[Item] = field(default_factory=list)

    @property
    def verdict(self) -> Verdict:
        return most_severe(Verdict(v) for v in self.verdicts.values())

    def to_json(self) -> dict[str, Any]:
        return {
            "server": self.server,
            "verdict": self.verdict.value,
            "audits": self.verdicts,
            "signoff": [i.to_json() for i in self.items],
        }

    def blocks(self) -> list[Any]:
        """The sign-off in the report model (:mod:`...report_model`): the verdict, each audit's
        file and verdict, then every question with its answer and where the answer came from."""
        rows = [
            [str(i), it.question, f"**{it.answer}**" if it.answer == NO else it.answer, it.detail]
            for i, it in enumerate(self.items, 1)
        ]
        return [
            ("h1", f"Sign-off of a deployment: {self.server}"),
            ("p", f"**Verdict: {self.verdict.value}**"),
            ("table", (["audit", "verdict"], [[f, v] for f, v in self.verdicts.items()])),
            ("table", (["#", "question", "answer", "detail"], rows)),
        ]

    def markdown(self) -> str:
        return to_markdown(self.blocks())


def _traffic_item(doc: dict[str, Any]) -> Item:
    v = doc.get("verdict")
    tokens = doc.get("tokens", 0)
    if v == Verdict.LOSSY.value:
        finding = (doc.get("finding") or {}).get("text", "a deviation")
        return Item(LAW, NO, f"recorded traffic: {finding}")
    if v == Verdict.PASS.value:
        return Item(LAW, YES, f"recorded traffic: {doc.get('records', 0):,} requests, {tokens:,} tokens held")
    return Item(LAW, NOT_TESTED, f"recorded traffic ran short of its plan ({v})")


def _items(doc: dict[str, Any], path: str) -> list[Item]:
    if "signoff" in doc:
        return [Item(i["question"], i["answer"], i["detail"]) for i in doc["signoff"]]
    if "records" in doc and "source" in doc:  # a traffic audit
        return [_traffic_item(doc)]
    raise UsageError(f"{path}: not the JSON of an engine, endpoint or traffic audit (specproof audit --json)")


def _same_build(docs: Sequence[tuple[str, dict[str, Any]]]) -> None:
    """Refuse audits whose servers said different builds or models (an endpoint audit records
    what its server said under ``description.server``; an audit whose server said nothing, or a
    traffic audit, is not compared)."""
    for key in ("build", "model"):
        said: dict[str, list[str]] = {}
        for path, d in docs:
            value = ((d.get("description") or {}).get("server") or {}).get(key)
            if value is not None:
                said.setdefault(json.dumps(value, sort_keys=True), []).append(path)
        if len(said) > 1:
            parts = "; ".join(f"{', '.join(paths)}: {value}" for value, paths in said.items())
            raise UsageError(f"signoff: the audits are of different {key}s of the server ({parts})")


def merge(docs: Sequence[tuple[str, dict[str, Any]]]) -> Deployment:
    """The sign-off of the audits ``docs`` ((file, JSON) pairs) of one server (module docstring)."""
    if not docs:
        raise UsageError("signoff: name at least one audit's JSON")
    servers = {str(d["engine"]) for _, d in docs if "engine" in d}
    if len(servers) > 1:
        raise UsageError(
            f"signoff: the audits are of different servers or engines ({', '.join(sorted(servers))})"
        )
    _same_build(docs)
    server = servers.pop() if servers else "recorded traffic"
    verdicts = {path: str(d.get("verdict")) for path, d in docs}
    for path, v in verdicts.items():
        if v not in {x.value for x in Verdict}:
            raise UsageError(f"{path}: no verdict in this JSON")
    by_question: dict[str, list[tuple[str, Item]]] = {}
    for path, d in docs:
        for item in _items(d, path):
            by_question.setdefault(item.question, []).append((path, item))
    out = Deployment(server, [p for p, _ in docs], verdicts)
    for q, said in by_question.items():
        no = [(p, i) for p, i in said if i.answer == NO]
        yes = [(p, i) for p, i in said if i.answer == YES]
        if no:
            p, i = no[0]
            out.items.append(Item(q, NO, f"{p}: {i.detail}"))
        elif yes:
            p, i = yes[0]
            more = f" (and {len(yes) - 1} more audit(s))" if len(yes) > 1 else ""
            out.items.append(Item(q, YES, f"{p}: {i.detail}{more}"))
        else:
            p, i = said[0]
            out.items.append(Item(q, NOT_TESTED, i.detail))
    return out
