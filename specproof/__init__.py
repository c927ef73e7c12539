"""specproof: a correctness harness for speculative decoding.

The one way in from Python (docs/python-api.md; every name is imported on first use)::

    import specproof

    result = specproof.audit_chain(my_verify_chain, tv=0.05)      # a chain verifier
    result = specproof.audit_tree(my_verify_tree, processes=("wor_siblings",))
    result = specproof.audit_engine(my_engine, prompts=[(0, 6)], tokens=4)
    result.verdict, result.summary(), result.to_json()           # every result reads alike

    proof = specproof.check("mss", "wor_siblings", specproof.Instance(vocab=3, shape=(-1, 0, 0)))
    specproof.strategies.law_pairs(...)                           # hypothesis strategies

Verdicts are :class:`Verdict` values (a ``str`` enum: ``result.verdict == "pass"`` works);
every exception specproof raises derives from :class:`SpecproofError` (input errors are also
``ValueError``).

Sub-packages: :mod:`specproof.reference` (the specification), :mod:`specproof.optimized` (the
batched engine), :mod:`specproof.properties` (oracles, audits, conformance, the command line).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from specproof.reference.errors import ArgumentTypeError, UsageError

__version__ = "0.1.0"

if TYPE_CHECKING:  # pragma: no cover - for type checkers and readers; imported lazily at run time
    from specproof.properties.audit.results import AuditResult, CaseResult
    from specproof.properties.audit.stages import AuditConfig
    from specproof.properties.conformance.contracts import ContractViolation
    from specproof.properties.engine.audit import EngineAuditConfig
    from specproof.properties.engine.contract import Engine, EngineSpec, Sampling
    from specproof.properties.engine.results import EngineAuditResult
    from specproof.properties.oracle import strategies
    from specproof.properties.oracle.exact import Instance, ModelInstance, OracleResult, check
    from specproof.properties.verdicts import Verdict
    from specproof.reference.errors import SpecproofError, SpecproofInputError, UsageError
    from specproof.reference.rules import RULES, Rule

#: name -> (module, attribute) of the lazily imported public API
_LAZY: dict[str, tuple[str, str | None]] = {
    "Verdict": ("specproof.properties.verdicts", "Verdict"),
    "SpecproofError": ("specproof.reference.errors", "SpecproofError"),
    "SpecproofInputError": ("specproof.reference.errors", "SpecproofInputError"),
    "UsageError": ("specproof.reference.errors", "UsageError"),
    "ContractViolation": ("specproof.properties.conformance.contracts", "ContractViolation"),
    "AuditConfig": ("specproof.properties.audit.stages", "AuditConfig"),
    "AuditResult": ("specproof.properties.audit.results", "AuditResult"),
    "CaseResult": ("specproof.properties.audit.results", "CaseResult"),
    "EngineAuditConfig": ("specproof.properties.engine.audit", "EngineAuditConfig"),
    "EngineAuditResult": ("specproof.properties.engine.results", "EngineAuditResult"),
    "Engine": ("specproof.properties.engine.contract", "Engine"),
    "EngineSpec": ("specproof.properties.engine.contract", "EngineSpec"),
    "Sampling": ("specproof.properties.engine.contract", "Sampling"),
    "Instance": ("specproof.properties.oracle.exact", "Instance"),
    "ModelInstance": ("specproof.properties.oracle.exact", "ModelInstance"),
    "OracleResult": ("specproof.properties.oracle.exact", "OracleResult"),
    "check": ("specproof.properties.oracle.exact", "check"),
    "strategies": ("specproof.properties.oracle.strategies", None),
    "Rule": ("specproof.reference.rules", "Rule"),
    "RULES": ("specproof.reference.rules", "RULES"),
}

CHAIN_PROCESSES = ("iid_chain", "onehot_chain")


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        module, attr = _LAZY[name]
        mod = importlib.import_module(module)
        value = mod if attr is None else getattr(mod, attr)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'specproof' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(list(globals()) + list(_LAZY))


def _backend(fn: Any, kind: str, processes: Sequence[str] | None, law: str, name: str | None) -> Any:
    from specproof.properties.conformance.backends import Backend, resolve

    if isinstance(fn, str):
        return resolve(fn, kind, tuple(processes) if processes else None)
    if not callable(fn):
        raise ArgumentTypeError(f"fn: expected a callable verifier or a target name, got {type(fn).__name__}")
    if law not in ("target", "greedy"):
        raise UsageError(f"law: 'target' or 'greedy', got {law!r}")
    return Backend(
        name=name or str(getattr(fn, "__name__", "verifier")),
        kind=kind,
        fn=fn,
        processes=tuple(processes or ()),
        law=law,
        doc="a verifier audited from Python",
        group="user",
    )


def audit_chain(
    fn: Callable[..., Any] | str,
    *,
    processes: Sequence[str] = CHAIN_PROCESSES,
    law: str = "target",
    name: str | None = None,
    progress: Callable[[str, float], None] | None = None,
    **options: Any,
) -> AuditResult:
    """Audit a chain verifier ``fn(draft_token_ids [B,K], draft_probs [B,K,V] or None,
    target_probs [B,K+1,V], generator) -> output_token_ids [B,K+1]`` (or a registered name,
    ``module:function``, ``path.py:function``) under ``processes``; ``law="greedy"`` for a
    verifier that preserves greedy decoding. ``options`` are :class:`AuditConfig` fields
    (``alpha``, ``tv``, ``power``, ``seed``, ``samples``, ``budget_seconds``, ``shrink``,
    ``large_vocab_tv``, ``cases``, ...), with its defaults for those not given.
    ``progress(what, fraction)`` is called as the audit runs. Returns the :class:`AuditResult`
    (``verdict``, ``summary()``, ``to_json()``)."""
    return _audit(fn, "chain", processes, law, name, progress, options)


def audit_tree(
    fn: Callable[..., Any] | str,
    *,
    processes: Sequence[str],
    law: str = "target",
    name: str | None = None,
    progress: Callable[[str, float], None] | None = None,
    **options: Any,
) -> AuditResult:
    """Audit a tree verifier ``fn(parents [B,N], tokens [B,N], draft_probs [B,N,V] or None,
    target_probs [B,N,V], generator) -> (accepted_nodes [B,N], next_token [B])`` under the
    proposal ``processes`` it claims (e.g. ``("wor_siblings",)``); as :func:`audit_chain`."""
    if not processes:
        raise UsageError("processes: a tree audit needs the proposal processes the verifier claims")
    return _audit(fn, "tree", processes, law, name, progress, options)


def _audit(
    fn: Any,
    kind: str,
    processes: Sequence[str],
    law: str,
    name: str | None,
    progress: Callable[[str, float], None] | None,
    options: dict[str, Any],
) -> AuditResult:
    from specproof.properties.audit.stages import AuditConfig, audit
    from specproof.properties.conformance.backends import target_name
    from specproof.properties.plan import build_config

    backend = _backend(fn, kind, processes, law, name)
    result = audit(backend, build_config(AuditConfig, options), progress)
    result.target = fn if isinstance(fn, str) else target_name(fn)
    return result


def audit_engine(
    engine: Any,
    *,
    prompts: Sequence[Sequence[int]] | None = None,
    tokens: int | None = None,
    sampling: Sampling | None = None,
    name: str | None = None,
    expect: str | None = None,
    progress: Callable[[str, float], None] | None = None,
    **options: Any,
) -> EngineAuditResult:
    """Audit a whole speculative engine end to end. ``engine`` is an object with
    ``generate(prompt_ids, max_new_tokens, seed) -> list[int]``, ``target_law(context) ->
    probabilities`` and ``vocab`` (:class:`Engine`), a factory ``factory(temperature=, top_k=,
    top_p=) -> engine``, an :class:`EngineSpec`, or a registered engine's name (``specproof
    backends``). ``prompts``, ``tokens`` (the horizon M) and ``sampling`` replace the spec's own
    (for an engine instance, ``sampling`` says what it was asked to sample: its ``target_law``
    must apply the same). ``options`` are :class:`EngineAuditConfig` fields (``alpha``, ``tv``,
    ``power``, ``seed``, ``samples``, ``budget_seconds``, ``looks``, ...)."""
    from dataclasses import replace

    from specproof.properties.engine.audit import EngineAuditConfig
    from specproof.properties.engine.audit import audit_engine as _audit_engine
    from specproof.properties.engine.registry import resolve_engine, spec_from_object, with_options
    from specproof.properties.plan import build_config

    given = tuple(tuple(int(x) for x in p) for p in prompts) if prompts else None
    if isinstance(engine, str):
        spec = resolve_engine(engine)
    else:
        label = str(name or getattr(engine, "__name__", type(engine).__name__))
        spec = spec_from_object(label, engine, given, sampling=sampling)
    spec = with_options(spec, given, [sampling] if sampling else None, tokens)
    if name is not None or expect is not None:
        spec = replace(spec, name=name or spec.name, expect=expect or spec.expect)
    return _audit_engine(spec, build_config(EngineAuditConfig, options), progress)


__all__ = [
    "CHAIN_PROCESSES",
    "RULES",
    "AuditConfig",
    "AuditResult",
    "CaseResult",
    "ContractViolation",
    "Engine",
    "EngineAuditConfig",
    "EngineAuditResult",
    "EngineSpec",
    "Instance",
    "ModelInstance",
    "OracleResult",
    "Rule",
    "Sampling",
    "SpecproofError",
    "SpecproofInputError",
    "UsageError",
    "Verdict",
    "audit_chain",
    "audit_engine",
    "audit_tree",
    "check",
    "strategies",
]
