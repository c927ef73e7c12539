"""The sign-off: an engine audit read as the checklist a deployer signs a speculative deployment
off with, item by item, each ``yes``, ``no`` (with the witness) or ``not tested`` (and why).
Never silently absent: an item the audit did not run says so and names what would run it.

Each item is read from the audit's own result (:class:`EngineAuditResult`), nothing is measured
again. The items, in order:

1. speculation ran (the engine's counters);
2. the law holds under the deployed parameters (the law tests of every case);
3. the same alone and at production concurrency (the load axis, ``--load 1 --load N``);
4. seeds are honoured under load (the load axis's seed checks);
5. stops inside an accepted block (end of sequence or stop strings where a case names them);
6. streaming equals the whole answer;
7. constrained decoding (a grammar) keeps its law;
8. a prefix-cache hit behaves as a cold request;
9. several completions of a request are independent samples of the law (``--completions N``);
10. reported probabilities are the law's;
11. acceptance as the declared rule predicts (not tested where no rule is declared);
12. acceptance alike at every place of a workload axis (the load or prefix-cache axis);
13. the tolerance comes from a speculation-off control;
14. the engine keeps the contract (same seed, same tokens; ids and lengths).

Each plug-in of the audit (:mod:`.plugins`) names its item (``signoff``), a test requires it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from specproof.properties.verdicts import CheckStatus, Verdict

if TYPE_CHECKING:
    from specproof.properties.engine.results import EngineAuditResult

YES, NO, NOT_TESTED = "yes", "no", "not tested"


@dataclass(frozen=True)
class Item:
    """One question of the checklist and its answer."""

    question: str
    answer: str  # YES, NO or NOT_TESTED
    detail: str

    def to_json(self) -> dict[str, Any]:
        return {"question": self.question, "answer": self.answer, "detail": self.detail}


def _law(r: EngineAuditResult) -> Item:
    q = "the law holds under the deployed parameters"
    settings = sorted({c.case.sampling.label for c in r.cases})
    if r.verdict == Verdict.LOSSY:
        bad = r.completions.rejected if r.completions is not None else []
        if bad:  # the cause is the dependence; a law test that also saw it follows
            t = bad[0]
            head = f"{t.case}: NOT INDEPENDENT (p = {t.pvalue:.3g})"
            return Item(q, NO, f"{head}; {r.short_witness()}")
        return Item(q, NO, r.short_witness())
    if not r.cases or r.samples == 0:
        return Item(
            q,
            NOT_TESTED,
            "no law-test sample was drawn" + (f" ({r.violation_text()})" if r.violation else ""),
        )
    if r.verdict in (Verdict.UNDERPOWERED, Verdict.INTERRUPTED) or r.short:
        return Item(q, NOT_TESTED, "the law tests ran short of their plan: " + (r.fault or "the budget"))
    n = len(r.cases)
    head = f"no deviation in {n} case{'' if n == 1 else 's'} ({', '.join(settings)})"
    if any(c.token_detects for c in r.cases):  # the token test: a TV per token
        tv = max(c.token_detects["mean"] for c in r.cases if c.token_detects)
        return Item(q, YES, f"{head}; each detects a per-token TV of {tv:.3g} (sharpening)")
    tv = max(c.detectable_tv for c in r.cases)
    return Item(q, YES, f"{head}; each detects a joint TV of {tv:.3g} of its M tokens (cells test)")


def _speculation(r: EngineAuditResult) -> Item:
    q = "speculation ran"
    s = r.speculation
    if s.status == CheckStatus.UNOBSERVABLE:
        return Item(q, NOT_TESTED, "the engine reports no draft or acceptance counters")
    return Item(q, YES if s.status == CheckStatus.RAN else NO, s.line().split(": ", 1)[-1])


def _load(r: EngineAuditResult) -> list[Item]:
    q1 = "the same law alone and at production concurrency"
    q2 = "seeds are honoured with other requests in flight"
    load = r.load
    if load is None:
        why = "no load axis asked (--load 1 --load N)"
        return [Item(q1, NOT_TESTED, why), Item(q2, NOT_TESTED, why)]
    levels = ", ".join(map(str, load.levels))
    if r.factor or load.background_lossy:
        first = Item(q1, NO, r.factor or load.background_text)
    elif r.verdict == Verdict.LOSSY:
        first = Item(q1, NO, f"lossy at every level ({levels}): {r.short_witness()}")
    elif r.samples and not r.short and r.verdict not in (Verdict.UNDERPOWERED, Verdict.INTERRUPTED):
        first = Item(q1, YES, f"levels {levels} held; background requests: {load.background_text}")
    else:
        first = Item(q1, NOT_TESTED, f"levels {levels} ran short of their plan")
    bad = load.violation
    if bad is not None and first.answer == YES:  # the law tests saw nothing; the seeds did
        first = Item(
            q1,
            YES,
            f"{first.detail}; but a request's tokens change with others in flight (seeds not honoured, "
            "next item): the law held at the tests' power, what a request returns still depends on the batch",
        )
    if not load.seeds:
        second = Item(q2, NOT_TESTED, load.stopped or "no seed was checked (--report-samples 0)")
    elif bad is not None:
        second = Item(q2, NO, bad.line())
    else:
        second = Item(q2, YES, "; ".join(s.line() for s in load.seeds))
    return [first, second]


def _stops(r: EngineAuditResult) -> Item:
    q = "stops inside an accepted block end the answer where the law says"
    ending = [c for c in r.cases if c.case.sampling.ends]
    if not ending:
        return Item(
            q,
            NOT_TESTED,
            "no case names an end of sequence or stop strings (--param eos=ID, --param stop=TEXT;TEXT)",
        )
    if r.verdict == Verdict.LOSSY or (r.violation or {}).get("kind") in ("after_eos", "after_stop"):
        return Item(q, NO, r.short_witness() or r.violation_text())
    what = sorted({"stop strings" if c.case.sampling.stop else "end of sequence" for c in ending})
    return Item(
        q,
        YES,
        f"{' and '.join(what)} in {len(ending)} cases: samples end at the first token that ends them, "
        "nothing follows, and the stopped samples' law holds",
    )


def _by_status(q: str, check: Any, good: CheckStatus) -> Item:
    """A check's own status and line as the item's answer: not tested where it did not run,
    yes where it reads ``good``, else no."""
    detail = check.line().split(": ", 1)[-1]
    if check.status in (CheckStatus.NOT_OFFERED, CheckStatus.STOPPED):
        return Item(q, NOT_TESTED, detail)
    return Item(q, YES if check.status == good else NO, detail)


def _streaming(r: EngineAuditResult) -> Item:
    return _by_status("a streamed answer equals the whole answer", r.streaming, CheckStatus.EQUAL)


def _grammar(r: EngineAuditResult) -> Item:
    q = "constrained decoding keeps its law"
    with_grammar = [c for c in r.cases if c.case.sampling.grammar is not None]
    if not with_grammar:
        return Item(q, NOT_TESTED, "no case asks for a grammar (--param regex=... with --token-map)")
    bad = [c for c in with_grammar if c.rejected or c.token_finding]
    if bad:
        return Item(q, NO, r.short_witness())
    return Item(q, YES, f"{len(with_grammar)} cases with a grammar held")


def _reports(r: EngineAuditResult) -> Item:
    return _by_status("reported probabilities are the law's", r.reports, CheckStatus.CONSISTENT)


def _control(r: EngineAuditResult) -> Item:
    q = "the tolerance comes from a speculation-off control"
    c = r.control
    if c is None or c.tolerance is None:
        return Item(q, NOT_TESTED, "no twin (--twin URL, or an engine's twin)")
    return Item(q, YES if c.numeric else NO, c.line().split(": ", 1)[-1])


def _contract(r: EngineAuditResult) -> Item:
    q = "the engine keeps the contract (a seed's tokens, ids, lengths)"
    if r.violation and r.verdict == Verdict.CONTRACT_VIOLATION:
        return Item(q, NO, r.violation_text())
    if r.violation:
        return Item(q, NO, r.violation_text())
    return Item(q, YES, "same seed, same tokens; every id in range, every sample of the asked length")


def signoff(r: EngineAuditResult) -> list[Item]:
    """The checklist of one audit (module docstring); after a fault of the audit's own side (a
    worker crashed: verdict ``error``) no answer is yes, each says what stopped it."""
    items = _items(r)
    if r.verdict != Verdict.ERROR:
        return items
    why = f"the audit ended on a fault of its own side: {(r.worker_fault or 'error').splitlines()[0]}"
    return [Item(i.question, NOT_TESTED, why) if i.answer == YES else i for i in items]


def _items(r: EngineAuditResult) -> list[Item]:
    return [
        _speculation(r),
        _law(r),
        *_load(r),
        _stops(r),
        _streaming(r),
        _grammar(r),
        _prefix_cache(r),
        _completions(r),
        _reports(r),
        _acceptance(r),
        _acceptance_axis(r),
        *(Item(*rep.item()) for rep in r.plugins.values() if hasattr(rep, "item")),
        _control(r),
        _contract(r),
    ]


def _prefix_cache(r: EngineAuditResult) -> Item:
    q = "a prefix-cache hit behaves as a cold request"
    warm = [c for c in r.cases if c.case.cache == "warm"]
    if not warm:
        return Item(q, NOT_TESTED, "no prefix-cache axis asked (--prefix-cache, profile llamacpp)")
    if "prefix-cache" in r.factor:
        return Item(q, NO, f"{r.factor}: {r.short_witness()}")
    if any(c.rejected or c.token_finding for c in warm):
        return Item(q, NO, f"lossy cold and warm alike: {r.short_witness()}")
    if r.violation is not None and "cache" in str(r.violation.get("case", "")):
        return Item(q, NO, r.violation_text())
    drawn = sum(c.n for c in warm)
    hits = r.plugins.get("cache")
    if hits is None or not hits.hits:
        return Item(
            q,
            NOT_TESTED,
            f"the law held in {drawn} warm samples, but no request was counted as a cache hit (the "
            "server's cached prompt tokens: llama-server's timings.cache_n, vLLM's "
            "usage.prompt_tokens_details with --enable-prompt-tokens-details): was the cache used?",
        )
    return Item(
        q,
        YES,
        f"{len(warm)} cases after a prefix-cache hit, {drawn} samples ({hits.hits} of {hits.counted} warm "
        "requests counted as hits): the law held, as cold",
    )


def _completions(r: EngineAuditResult) -> Item:
    q = "several completions of a request are independent samples of the law"
    c = r.completions
    if c is None:
        return Item(q, NOT_TESTED, "no completions axis asked (--completions N)")
    if c.rejected:
        return Item(q, NO, f"{c.factor()}: {r.short_witness()}")
    several = [x for x in r.cases if (x.case.completions or 1) > 1]
    if any(x.rejected or x.token_finding for x in several):
        return Item(q, NO, f"lossy with {c.completions} completions a request: {r.short_witness()}")
    if r.verdict in (Verdict.UNDERPOWERED, Verdict.INTERRUPTED) or r.short or not c.tests:
        return Item(q, NOT_TESTED, "the completions axis ran short of its plan")
    drawn = sum(x.n for x in several)
    return Item(
        q, YES, f"{c.completions} completions a request, {drawn} samples: independent, and the law held"
    )


def _acceptance(r: EngineAuditResult) -> Item:
    q = "acceptance as the rule predicts"
    if r.metrics.status == CheckStatus.DIFFER:  # what the dashboard reads is not what the answers said
        return Item(q, NO, r.metrics.line().split(": ", 1)[-1])
    item = _acceptance_rule(r, q)
    if r.metrics.status != CheckStatus.NOT_OFFERED:
        item = Item(item.question, item.answer, f"{item.detail}; {r.metrics.line()}")
    return item


def _acceptance_rule(r: EngineAuditResult, q: str) -> Item:
    acc = r.acceptance
    counters = r.speculation.line().split(": ", 1)[-1]
    if acc is None:  # acceptance alike across an axis is its own item: no rule, nothing predicted
        return Item(
            q,
            NOT_TESTED,
            "the engine declares no acceptance rule with its draft law (acceptance_rule, draft_law); "
            f"counters: {counters}",
        )
    detail = acc.line().split(": ", 1)[-1]
    if acc.status == CheckStatus.NOT_RUN:
        return Item(q, NOT_TESTED, acc.why)
    return Item(q, NO if acc.status == CheckStatus.LOW or acc.contradicted else YES, detail)


def _acceptance_axis(r: EngineAuditResult) -> Item:
    q = "acceptance alike at every place of a workload axis (alone and loaded, cold and warm)"
    axis = r.axis_acceptance
    if axis is None:
        return Item(q, NOT_TESTED, "no workload axis asked (--load 1 --load N, --prefix-cache)")
    if axis.status == CheckStatus.NOT_RUN:
        return Item(q, NOT_TESTED, axis.why)
    return Item(q, NO if axis.status == CheckStatus.LOW else YES, axis.line().split(": ", 1)[-1])


def markdown(r: EngineAuditResult) -> str:
    """The sign-off as a Markdown section: a table of the questions and their answers."""
    lines = [f"## Sign-off: {r.engine}", "", f"Verdict: **{r.verdict.value}**.", ""]
    lines += ["| # | question | answer | detail |", "|---:|---|---|---|"]
    for i, item in enumerate(signoff(r), 1):
        answer = f"**{item.answer}**" if item.answer == NO else item.answer
        lines.append(f"| {i} | {item.question} | {answer} | {item.detail.replace('|', '/')} |")
    return "\n".join(lines) + "\n"
