"""specproof: a correctness harness for speculative decoding.

The one way in from Python (README, "Use from Python"; every name is imported on first use)::

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
    from specproof.properties.audit.stages import AuditConfig, AuditResult, CaseResult
    from specproof.properties.conformance.contracts import ContractViolation
    from specproof.properties.engine.audit import EngineAuditConfig, EngineAuditResult
    from specproof.properties.engine.registry import Engine, Sampling
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
    "AuditResult": ("specproof.properties.audit.stages", "AuditResult"),
    "CaseResult": ("specproof.properties.audit.stages", "CaseResult"),
    "EngineAuditConfig": ("specproof.properties.engine.audit", "EngineAuditConfig"),
    "EngineAuditResult": ("specproof.properties.engine.audit", "EngineAuditResult"),
    "Engine": ("specproof.properties.engine.registry", "Engine"),
    "Sampling": ("specproof.properties.engine.registry", "Sampling"),
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
        backend = resolve(fn, kind, tuple(processes) if processes else None)
        return backend
    if not callable(fn):
        raise ArgumentTypeError(f"fn: expected a callable verifier or a target name, got {type(fn).__name__}")
    if law not in ("target", "greedy"):
        raise UsageError(f"law: 'target' or 'greedy', got {law!r}")
    procs = tuple(processes or ())
    return Backend(
        name=name or str(getattr(fn, "__name__", "verifier")),
        kind=kind,
        fn=fn,
        processes=procs,
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
    alpha: float = 1e-6,
    tv: float = 0.01,
    power: float = 0.99,
    seed: int = 0,
    samples: int | None = None,
    budget_seconds: float = 900.0,
    progress: Callable[[str, float], None] | None = None,
    **options: Any,
) -> AuditResult:
    """Audit a chain verifier ``fn(draft_token_ids [B,K], draft_probs [B,K,V] or None,
    target_probs [B,K+1,V], generator) -> output_token_ids [B,K+1]`` (or a registered name,
    ``module:function``, ``path.py:function``) under ``processes``; ``law="greedy"`` for a
    verifier that preserves greedy decoding. Further :class:`AuditConfig` fields as keywords
    (``large_vocab_tv``, ``batch``, ``probes``, ``call_timeout``, ``shrink``, ``cases``, ...).
    Returns the :class:`AuditResult` (``verdict``, ``summary()``, ``to_json()``)."""
    return _audit(
        fn, "chain", processes, law, name, alpha, tv, power, seed, samples, budget_seconds, progress, options
    )


def audit_tree(
    fn: Callable[..., Any] | str,
    *,
    processes: Sequence[str],
    law: str = "target",
    name: str | None = None,
    alpha: float = 1e-6,
    tv: float = 0.01,
    power: float = 0.99,
    seed: int = 0,
    samples: int | None = None,
    budget_seconds: float = 900.0,
    progress: Callable[[str, float], None] | None = None,
    **options: Any,
) -> AuditResult:
    """Audit a tree verifier ``fn(parents [B,N], tokens [B,N], draft_probs [B,N,V] or None,
    target_probs [B,N,V], generator) -> (accepted_nodes [B,N], next_token [B])`` under the
    proposal ``processes`` it claims (e.g. ``("wor_siblings",)``); as :func:`audit_chain`."""
    if not processes:
        raise UsageError("processes: a tree audit needs the proposal processes the verifier claims")
    return _audit(
        fn, "tree", processes, law, name, alpha, tv, power, seed, samples, budget_seconds, progress, options
    )


def _audit(
    fn: Any,
    kind: str,
    processes: Sequence[str],
    law: str,
    name: str | None,
    alpha: float,
    tv: float,
    power: float,
    seed: int,
    samples: int | None,
    budget_seconds: float,
    progress: Callable[[str, float], None] | None,
    options: dict[str, Any],
) -> AuditResult:
    from specproof.properties.audit.stages import AuditConfig, audit

    backend = _backend(fn, kind, processes, law, name)
    config = AuditConfig(
        alpha=alpha, tv=tv, power=power, seed=seed, samples=samples, budget_seconds=budget_seconds, **options
    )
    result = audit(backend, config, progress)
    result.target = fn if isinstance(fn, str) else None
    return result


def audit_engine(
    engine: Any,
    *,
    prompts: Sequence[Sequence[int]] = ((0, 1),),
    tokens: int = 4,
    sampling: Sampling | None = None,
    name: str | None = None,
    expect: str = "pass",
    progress: Callable[[str, float], None] | None = None,
    **options: Any,
) -> EngineAuditResult:
    """Audit a whole speculative engine end to end: ``engine`` has ``generate(prompt_ids,
    max_new_tokens, seed) -> list[int]``, ``target_law(context) -> probabilities`` and
    ``vocab`` (the contract of :mod:`specproof.properties.engine.registry`), or is a registered
    engine's name (``specproof backends``). ``sampling`` says what the engine was asked to
    sample (temperature, top-k, top-p; greedy at temperature 0): its ``target_law`` must apply
    the same. Further :class:`EngineAuditConfig` fields as keywords (``alpha``, ``tv``,
    ``power``, ``seed``, ``samples``, ``budget_seconds``, ...)."""
    from specproof.properties.engine.audit import EngineAuditConfig
    from specproof.properties.engine.audit import audit_engine as _audit_engine
    from specproof.properties.engine.registry import ENGINES, EngineSpec, Sampling, list_engines

    if isinstance(engine, str):
        list_engines()  # registers the built-in engines
        if engine not in ENGINES:
            raise UsageError(f"engine: {engine!r} is not registered (see `specproof backends`)")
        spec = ENGINES[engine]
    else:
        for attr in ("generate", "target_law", "vocab"):
            if not hasattr(engine, attr):
                raise ArgumentTypeError(
                    f"engine: has no {attr!r}; an engine needs generate, target_law and vocab"
                )
        setting = sampling or Sampling()
        spec = EngineSpec(
            name=name or type(engine).__name__,
            group="user",
            doc="an engine audited from Python",
            build=lambda s: engine,
            vocab=int(engine.vocab),
            prompts=tuple(tuple(int(x) for x in p) for p in prompts),
            samplings=(setting,),
            expect=expect,
            tokens=tokens,
        )
    return _audit_engine(spec, EngineAuditConfig(**options), progress)


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
