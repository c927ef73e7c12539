"""What an engine offers beyond ``generate`` and ``target_law``, declared and checked.

The engine audit reads a dozen optional things from an engine (:data:`CAPABILITIES`: its
counters, its steps, many samples at once, many laws at once, the prompt length its law needs,
its end of sequence, its twin, its reported probabilities, its description). Found by looking
them up, a misspelled name reads as "not offered" and changes the verdict without a word
(``last_counter`` for ``last_counters`` makes a speculating engine ``no_speculation``). So an
engine **declares** what it offers, in a class attribute, as Hypothesis's providers declare theirs::

    class MyEngine:
        capabilities = frozenset({"counters", "generate_many", "eos"})

and :func:`capabilities_of` checks the declaration when the engine is built
(:class:`CapabilityError`, a contract violation naming the attribute): every capability declared
is there with the right shape, and every attribute of a capability that is there is declared. An
engine that declares nothing (one written before declarations) is read as before, its
capabilities found from its attributes, but an attribute whose name is one letter or so away from
a capability's (``last_counter``, ``eos``) is refused with the name it should have, and so is a
``target_law`` whose second parameter is not named ``prompt_len``.
"""

from __future__ import annotations

import difflib
import functools
import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from specproof.reference.errors import SpecproofError


@dataclass(frozen=True)
class Capability:
    """One optional part of the engine contract: the attributes that carry it and what they are."""

    name: str
    attrs: tuple[str, ...]  # the engine offers it through any one of these attributes
    doc: str


CAPABILITIES: dict[str, Capability] = {
    c.name: c
    for c in (
        Capability(
            "counters",
            ("last_counters",),
            "after each generate, a dict with drafted and accepted: the draft tokens proposed and accepted",
        ),
        Capability(
            "steps",
            ("last_steps", "last_forwards"),
            "after each generate, the tokens emitted per target forward (or the number of forwards)",
        ),
        Capability(
            "generate_many",
            ("generate_many",),
            "generate_many(prompt_ids, max_new_tokens, seeds, report=False) -> list[Generation]",
        ),
        Capability("batch", ("batch",), "how many samples generate_many is best asked for at once (an int)"),
        Capability(
            "submit",
            ("submit_many",),
            "submit_many(prompt_ids, max_new_tokens, seeds) -> a handle whose result() gives what "
            "generate_many would (raising as it would); returns at once, the samples being drawn, so the "
            "audit asks for the next chunks before it scores the last (a server kept busy)",
        ),
        Capability(
            "draft_tokens",
            ("draft_tokens",),
            "draft_tokens: the most tokens one speculative step drafts (an int); the audit warns when "
            "M leaves no room for a whole step",
        ),
        Capability(
            "target_laws", ("target_laws",), "target_laws(contexts) -> one law per context, read at once"
        ),
        Capability(
            "prompt_len",
            (),
            "target_law(context, prompt_len=None): the law of output-scoped parameters needs where "
            "the prompt ends",
        ),
        Capability("eos", ("eos_id",), "eos_id: the end-of-sequence id samples may end on"),
        Capability("twin", ("twin",), "twin: the same engine with speculation off (an engine)"),
        Capability(
            "reports",
            ("reports_probabilities",),
            "reports_probabilities: generate_many(..., report=True) gives each token's probability",
        ),
        Capability("describe", ("describe",), "describe() -> dict: how the engine was reached"),
        Capability(
            "teacher_forcing",
            ("target_laws_along",),
            "target_laws_along(prompt_ids, tokens) -> the target's law after prompt + tokens[:d] for every "
            "d < len(tokens), at once ([len(tokens), V]): one forward over the emitted path",
        ),
        Capability(
            "sequential",
            ("sequential_verification",),
            "sequential_verification = True: each emitted token's law, given everything the engine did "
            "before it, is the target's (token-level and tree rejection sampling; not block verification): "
            "the token test may look at a token's index in its speculative step",
        ),
        Capability(
            "draft_law",
            ("draft_law",),
            "draft_law(context) -> the law the engine's drafts are drawn from after context (the token "
            "test's drift toward the draft); draft_laws_along(prompt_ids, tokens), where the engine has "
            "it, gives them for every prefix at once, as target_laws_along does",
        ),
        Capability(
            "acceptance",
            ("acceptance_rule",),
            "acceptance_rule = {'rule': 'token_chain', 'drafts': K}: every step drafts a chain of K tokens "
            "from draft_law and verifies them by token-level rejection sampling; with draft_law and the "
            "steps, the audit tests the acceptance the steps show against the rule's prediction",
        ),
        Capability(
            "stream",
            ("generate_stream",),
            "generate_stream(prompt_ids, max_new_tokens, seeds, report=False) -> list[Generation]: the "
            "same samples with their answers streamed, concatenated (the audit requires them equal to "
            "generate_many's)",
        ),
        Capability(
            "load",
            ("at_load",),
            "at_load(level) -> the same engine with level requests in flight at each call: alone at 1, "
            "beside background requests of its own above (the audit's load axis, --load)",
        ),
        Capability(
            "prefix_cache",
            ("at_cache",),
            "at_cache() -> the same engine with every generation reusing the server's cached prompt (the "
            "audit's prefix-cache axis, --prefix-cache)",
        ),
        Capability(
            "completions",
            ("at_completions",),
            "at_completions(n) -> the same engine asking for n completions a request: generate_many sends "
            "its seeds by consecutive groups of n, one request a group seeded by its first seed, and returns "
            "completion j of a group for its j-th seed, with choice = j (the audit's completions axis)",
        ),
        Capability(
            "metrics",
            ("server_metrics",),
            "server_metrics() -> {'drafted': int, 'accepted': int, 'retried': int}: the server's own "
            "cumulative speculation totals and the requests its client sent twice (the audit requires "
            "their growth over the sample stage to equal its answers' counters), or None where not served",
        ),
        Capability(
            "background",
            ("background",),
            "background() -> (records, laws): the background requests a loaded engine sent beside the "
            "audit's (traffic records) and laws(prompt, tokens, sampling) along their paths",
        ),
    )
}
#: every attribute name a capability is read through
ATTRIBUTES = {a: c.name for c in CAPABILITIES.values() for a in c.attrs}


class CapabilityError(SpecproofError):
    """An engine's declaration and its attributes disagree (a contract violation)."""


@dataclass(frozen=True)
class Offered:
    """What one engine offers, checked (:func:`capabilities_of`)."""

    names: frozenset[str]
    declared: bool  # the engine declared them (else they were found from its attributes)

    def __contains__(self, name: object) -> bool:
        return name in self.names


def takes_prompt_len(fn: Callable[..., Any]) -> bool:
    """Whether a law function takes ``prompt_len`` (by name, or any keyword). Asked for every
    sample the audit reads: the answer is kept per function (a bound method's, its function's:
    binding drops ``self`` only), as reading a signature costs about as much as scoring a short
    sample's laws."""
    key = getattr(fn, "__func__", fn)
    try:
        return _takes_prompt_len(key)
    except TypeError:  # not hashable: read each time
        return _takes_prompt_len.__wrapped__(fn)


@functools.lru_cache(maxsize=512)
def _takes_prompt_len(fn: Callable[..., Any]) -> bool:
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False
    return "prompt_len" in params or any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())


def _second_parameter(fn: Callable[..., Any]) -> str | None:
    """The name of a law function's parameter after the context, if it has one that is not
    ``prompt_len`` and takes a value without a default (the prompt length under another name)."""
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        return None
    plain = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    if len(plain) >= 2 and plain[1].name != "prompt_len":
        return plain[1].name
    return None


def _present(engine: Any, cap: Capability) -> bool:
    if cap.name == "prompt_len":
        return takes_prompt_len(engine.target_law)
    return any(getattr(engine, a, None) is not None for a in cap.attrs)


def capabilities_of(engine: Any) -> Offered:
    """The capabilities ``engine`` offers, its declaration checked against its attributes; raises
    :class:`CapabilityError` naming the attribute that disagrees (module docstring)."""
    for fn_name in ("target_law", "target_laws"):
        fn = getattr(engine, fn_name, None)
        other = None if fn is None else _second_parameter(fn)
        if other is not None:
            raise CapabilityError(
                f"{fn_name}({other}=...): the audit passes the prompt length by keyword, as prompt_len=; "
                f"name the parameter prompt_len (or give it a default), else it never receives it"
            )
    declared = getattr(type(engine), "capabilities", None)
    if declared is None:
        declared = getattr(engine, "capabilities", None)
    if declared is None:
        _no_near_misses(engine)
        found = frozenset(c.name for c in CAPABILITIES.values() if _present(engine, c))
        return Offered(found, declared=False)
    names = frozenset(declared)
    unknown = sorted(names - set(CAPABILITIES))
    if unknown:
        close = difflib.get_close_matches(unknown[0], list(CAPABILITIES), n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise CapabilityError(
            f"capabilities: {unknown[0]!r} is not a capability{hint}; known: {', '.join(CAPABILITIES)}"
        )
    for name in sorted(names):
        cap = CAPABILITIES[name]
        if not _present(engine, cap):
            where = " or ".join(cap.attrs) if cap.attrs else "a prompt_len parameter of target_law"
            raise CapabilityError(f"capabilities: declares {name!r} but has no {where} ({cap.doc})")
    for cap in CAPABILITIES.values():
        if cap.name not in names and cap.attrs and _present(engine, cap):
            attr = next(a for a in cap.attrs if getattr(engine, a, None) is not None)
            raise CapabilityError(
                f"capabilities: has {attr} but does not declare {cap.name!r}: declare it, or the audit "
                "would not read it"
            )
    return Offered(names, declared=True)


def _no_near_misses(engine: Any) -> None:
    """Refuse an undeclared engine's attribute named almost like a capability's."""
    own = [a for a in dir(engine) if not a.startswith("_")]
    known = set(ATTRIBUTES) | {"generate", "target_law", "vocab", "capabilities", "temperature", "prompts"}
    for name in own:
        if name in known:
            continue
        close = difflib.get_close_matches(name, list(ATTRIBUTES), n=1, cutoff=0.85)
        if close and close[0] not in own:
            raise CapabilityError(
                f"{name}: not part of the engine contract; did you mean {close[0]} (capability "
                f"{ATTRIBUTES[close[0]]!r}: {CAPABILITIES[ATTRIBUTES[close[0]]].doc})? Declare what the "
                "engine offers in a class attribute capabilities = frozenset({...})"
            )
