"""The registered engines, and resolving what a user names as an engine.

:data:`ENGINES` holds every engine the command line can name (``specproof backends`` lists
them, :func:`list_engines`), registered on first use, never at import (so importing this module
probes no installed package):

* ``reference.<proposer>.<rule>``: the reference loop (:mod:`.loops`) for every proposer and
  every rule declared exact for its process (expected: pass), and ``reference.direct``;
* ``mutant.*``: loops with one bug each and engines that break the contract (expected: lossy
  or contract_violation); ``alternative.*``: loops that look wrong but are lossless
  (:data:`.loops.MUTANT_DOCS`, :mod:`.param_mutants`, :mod:`.stop_mutants`,
  :mod:`.acceptance_mutants`, :mod:`.report_mutants`);
* ``hf.*``, ``vllm.*``, ``sglang.*``: third-party engines (:mod:`.adapters`), available where
  their package is installed;
* ``optimized.*``: the optimized decoding loop, when :mod:`specproof.optimized.decode` exists.

:func:`resolve_engine` turns a TARGET (a registered name, ``module:attr`` or ``path.py:attr``)
into an :class:`~.contract.EngineSpec`; :func:`spec_from_object` does it for an object.
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
import inspect
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from specproof.properties._imports import import_where
from specproof.properties.engine.contract import (
    DEFAULT_PROMPTS,
    DEFAULT_TOKENS,
    GREEDY,
    T07,
    T1,
    Engine,
    EngineSpec,
    Sampling,
    Seq,
)
from specproof.properties.engine.loops import (
    MUTANT_DOCS,
    REFERENCE_PROMPTS,
    direct_engine,
    engine_target,
    reference_engine,
)
from specproof.properties.verdicts import Planted
from specproof.reference.errors import BadParameterError, InternalError, SpecproofInputError, UsageError
from specproof.reference.proposers import PROPOSERS, Proposer
from specproof.reference.rules import RULES

ENGINES: dict[str, EngineSpec] = {}


def register(spec: EngineSpec) -> EngineSpec:
    if spec.name in ENGINES:
        raise UsageError(f"engine {spec.name!r} registered twice")
    ENGINES[spec.name] = spec
    return spec


def list_engines() -> list[dict[str, Any]]:
    """Every registered engine with its group, claim and availability (``specproof backends``)."""
    ensure_registered()
    return [s.to_json() for s in ENGINES.values()]


def _register_reference() -> None:
    register(
        EngineSpec(
            "reference.direct",
            "reference",
            "no speculation: every token drawn from the target's law (the calibration baseline)",
            direct_engine,
            engine_target().vocab,
            REFERENCE_PROMPTS,
            (T1, T07),
        )
    )
    for p, rule in _loops():
        register(
            _loop_spec(
                "reference",
                p,
                rule,
                f"reference/decode.py: {p.name} ({p.process.name}, shape {p.shape})",
                functools.partial(reference_engine, p, rule),
            )  # fmt: skip
        )


def _loops(rules: set[str] | None = None) -> list[tuple[Proposer, str]]:
    """Every proposer with every rule declared exact for its process (of ``rules``, when given)."""
    return [(p, r) for p in PROPOSERS.values() for r in p.exact_rules() if rules is None or r in rules]


def _loop_spec(group: str, p: Proposer, rule: str, what: str, build: Any, **kw: Any) -> EngineSpec:
    """A decoding loop of ``group`` for proposer ``p`` verified by ``rule``: greedy settings for a
    rule that preserves greedy decoding, T = 1 and 0.7 otherwise."""
    greedy = RULES[rule].preserves == "greedy"
    return EngineSpec(
        f"{group}.{p.name}.{rule}",
        group,
        f"{what} verified by {rule}",
        build,
        engine_target().vocab,
        REFERENCE_PROMPTS,
        (GREEDY,) if greedy else (T1, T07),
        **kw,
    )


def planted_engines() -> dict[str, Planted]:
    """Every planted engine and its correct twin, by name: the loops' (:data:`.loops.MUTANT_DOCS`)
    and the tables of :mod:`.param_mutants`, :mod:`.stop_mutants`, :mod:`.acceptance_mutants` and
    :mod:`.report_mutants` (the registry registers them; the docs' table is checked against it)."""
    from specproof.properties.engine import acceptance_mutants, param_mutants, report_mutants, stop_mutants

    return {
        **MUTANT_DOCS,
        **param_mutants.builders(),
        **stop_mutants.builders(),
        **acceptance_mutants.builders(),
        **report_mutants.builders(),
    }


def _register_mutants() -> None:
    for m in planted_engines().values():
        if m.build is None:
            raise InternalError(f"planted engine {m.name!r} has no builder")
        register(
            EngineSpec(
                m.name,
                m.name.split(".")[0],
                m.doc,
                m.build,
                engine_target().vocab,
                REFERENCE_PROMPTS,
                m.settings or (T1, T07),
                expect=m.expect.value,
            )
        )


# --------------------------------------------------------------------------- other engines


def _optimized_available() -> tuple[bool, str]:
    if importlib.util.find_spec("specproof.optimized.decode") is None:
        return False, "specproof.optimized.decode does not exist"
    module = importlib.import_module("specproof.optimized.decode")
    if not hasattr(module, "OptimizedEngine"):
        return False, "specproof.optimized.decode has no OptimizedEngine"
    return True, ""


def _optimized_rules() -> tuple[str, ...]:
    """The rules with an optimized kernel (``optimized.decode.KERNEL_RULES``); the kernels'
    set as documented there when the module cannot be imported."""
    try:
        module = importlib.import_module("specproof.optimized.decode")
        return tuple(module.KERNEL_RULES)
    except Exception:
        return ("token", "block", "mss", "rrs", "target_only", "greedy", "typical")


def _optimized_engine(proposer: Proposer, rule: str, sampling: Sampling) -> Engine:
    """``optimized.decode.OptimizedEngine`` on :func:`engine_target` with untrained drafters (as
    the reference engines), in float64."""
    if sampling.truncated:
        raise BadParameterError("sampling", "the optimized loop samples with a temperature only")
    module = importlib.import_module("specproof.optimized.decode")
    engine: Engine = module.OptimizedEngine(
        proposer.name, rule, engine_target(), temperature=sampling.temperature or 1.0, trained=False
    )
    return engine


def _register_optimized() -> None:
    """The optimized loop: every proposer x rule declared exact for its process that
    has an optimized kernel, audited like ``reference.*`` (imported lazily, when audited)."""
    kernels = set(_optimized_rules())  # imports optimized.decode first (see ensure_registered)
    for p, rule in _loops(kernels):
        register(
            _loop_spec(
                "optimized",
                p,
                rule,
                f"optimized/decode.py OptimizedEngine: {p.name} ({p.process.name})",
                functools.partial(_optimized_engine, p, rule),
                available=_optimized_available,
            )  # fmt: skip
        )


def _register_thirdparty() -> None:
    """The adapters' engines (:mod:`.adapters`), as the table of integrations names them
    (:data:`specproof.properties.integrations.INTEGRATIONS`: a new system's adapter joins there
    alone); each says itself whether its package is there."""
    from specproof.properties.integrations import INTEGRATIONS

    for integration in INTEGRATIONS:
        if integration.adapter:
            for spec in importlib.import_module(integration.adapter).engines():
                register(spec)


_REGISTERED = False


def ensure_registered() -> None:
    global _REGISTERED
    if _REGISTERED:
        return
    _REGISTERED = True
    # The optimized package first: its kernels run under Triton's interpreter only when it is
    # imported before the modules that import Triton on their own (see _register_optimized).
    _register_optimized()
    _register_reference()
    _register_mutants()
    _register_thirdparty()


# --------------------------------------------------------------------------- resolving a TARGET


class EngineTargetError(SpecproofInputError):
    """A TARGET of ``specproof audit engine`` that cannot be resolved."""

    def __init__(self, problem: str) -> None:
        super().__init__("TARGET", problem)


def _load(target: str) -> Any:
    where, _, attr = target.rpartition(":")
    module = import_where(where, EngineTargetError, "specproof_engine_")
    if not hasattr(module, attr):
        raise EngineTargetError(f"{where!r} has no attribute {attr!r}")
    return getattr(module, attr)


def _vocab_of(engine: Any, prompt: Seq) -> int:
    v = getattr(engine, "vocab", None)
    if isinstance(v, int) and v > 0:
        return v
    return len(engine.target_law(list(prompt)))


def spec_from_object(
    name: str,
    obj: Any,
    prompts: Sequence[Seq] | None = None,
    tokens: int | None = None,
    sampling: Sampling | None = None,
) -> EngineSpec:
    """An :class:`EngineSpec` from a user's object: a spec as is; an engine instance (audited
    under the one setting it was built with: ``sampling``, or its ``temperature`` attribute); or
    a factory called per setting (:func:`factory_builder`; T = 1 and 0.7 unless the audit or the
    factory's own ``samplings`` attribute says otherwise). Prompts: ``prompts``, else the object's
    own ``prompts`` attribute, else :data:`~.contract.DEFAULT_PROMPTS`; the horizon likewise
    (``tokens``, the object's ``tokens``, else 4)."""
    if isinstance(obj, EngineSpec):
        return obj
    own = getattr(obj, "prompts", None)
    prompts = tuple(tuple(int(x) for x in p) for p in (prompts or own or DEFAULT_PROMPTS))
    if not prompts or not all(prompts):
        raise EngineTargetError("prompts: an engine audit needs at least one non-empty prompt")
    tokens = int(tokens or getattr(obj, "tokens", None) or DEFAULT_TOKENS)
    if isinstance(obj, type):
        raise EngineTargetError(
            f"{name!r} is a class: pass an instance, or a factory function that returns one"
        )
    if hasattr(obj, "generate") and hasattr(obj, "target_law"):
        engine = obj
        setting = sampling or Sampling(getattr(engine, "temperature", 1.0) or 0.0)
        return EngineSpec(
            name,
            "user",
            f"{type(obj).__name__} instance",
            lambda s: engine,
            _vocab_of(engine, prompts[0]),
            prompts,
            (setting,),
            tokens=tokens,
            notes="an engine instance: audited under the setting it was built with",
        )
    if callable(obj):
        build, how = factory_builder(name, obj)
        own_settings = getattr(obj, "samplings", None)
        settings = (sampling,) if sampling else tuple(own_settings or (T1, T07))
        return EngineSpec(
            name,
            "user",
            f"{getattr(obj, '__name__', name)}({how})",
            build,
            _vocab_of(build(settings[0]), prompts[0]),
            prompts,
            settings,
            tokens=tokens,
        )
    raise EngineTargetError(f"{name!r} is neither an engine, an engine factory nor an EngineSpec")


def factory_builder(name: str, factory: Any) -> tuple[Any, str]:
    """How to call a user's engine factory per setting: ``factory(sampling=Sampling)`` when it
    takes a ``sampling`` argument (as an :class:`EngineSpec`'s ``build`` does), else with the
    setting's fields as keywords (``temperature=, top_k=, top_p=``, and ``min_p=`` when it takes
    one; a cut-off it does not take must not be asked)."""
    params: Mapping[str, inspect.Parameter]
    try:
        params = inspect.signature(factory).parameters
    except (TypeError, ValueError):
        params = {}
    takes_all = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())

    def build(s: Sampling) -> Engine:
        if "sampling" in params:
            e = factory(sampling=s)
        else:
            kwargs: dict[str, Any] = {"temperature": s.temperature, "top_k": s.top_k, "top_p": s.top_p}
            if "min_p" in params or takes_all:
                kwargs["min_p"] = s.min_p
            elif s.min_p:
                raise EngineTargetError(f"{name}(...) takes no min_p, and the audit asks min_p={s.min_p:g}")
            e = factory(**kwargs)
        if not (hasattr(e, "generate") and hasattr(e, "target_law")):
            raise EngineTargetError(f"{name}(...) returned {type(e).__name__}, not an engine")
        return e

    return build, "sampling=" if "sampling" in params else "temperature=, top_k=, top_p="


def resolve_engine(target: str) -> EngineSpec:
    """A registered name (``specproof backends``), or ``module:attr`` / ``path.py:attr``."""
    ensure_registered()
    if target in ENGINES:
        return ENGINES[target]
    if ":" not in target:
        close = [n for n in ENGINES if target in n][:5]
        hint = f"; did you mean {', '.join(close)}?" if close else ""
        raise EngineTargetError(
            f"{target!r} is neither a registered engine (specproof backends) nor module:attr{hint}"
        )
    return spec_from_object(target, _load(target))


def with_options(
    spec: EngineSpec,
    prompts: Sequence[Seq] | None = None,
    samplings: Sequence[Sampling] | None = None,
    tokens: int | None = None,
) -> EngineSpec:
    """The spec with the audit's options in place of its defaults."""
    changes: dict[str, Any] = {}
    if prompts:
        changes["prompts"] = tuple(tuple(p) for p in prompts)
    if samplings:
        changes["samplings"] = tuple(samplings)
    if tokens is not None:
        changes["tokens"] = tokens
    return replace(spec, **changes) if changes else spec
