"""specproof: a correctness harness for speculative decoding.

The one way in from Python (docs/python-api.md; every name is imported on first use)::

    import specproof

    result = specproof.audit_chain(my_verify_chain, tv=0.05)      # a chain verifier
    result = specproof.audit_tree(my_verify_tree, processes=("wor_siblings",))
    result = specproof.audit_engine(my_engine, prompts=[(0, 6)], tokens=4)
    result = specproof.audit_endpoint("http://127.0.0.1:8080", twin="http://127.0.0.1:8081")
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

import contextlib
import importlib
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

from specproof.reference.errors import ArgumentTypeError, UsageError

__version__ = "0.1.0"

if TYPE_CHECKING:  # pragma: no cover - for type checkers and readers; imported lazily at run time
    from specproof.properties.audit.results import AuditResult, CaseResult
    from specproof.properties.audit.stages import AuditConfig
    from specproof.properties.conformance.contracts import ContractViolation
    from specproof.properties.endpoint.options import EndpointOptions
    from specproof.properties.engine.audit import EngineAuditConfig
    from specproof.properties.engine.contract import Engine, EngineSpec, Sampling
    from specproof.properties.engine.request import EngineRequest
    from specproof.properties.engine.results import EngineAuditResult
    from specproof.properties.oracle import strategies
    from specproof.properties.oracle.exact import Instance, ModelInstance, OracleResult, check
    from specproof.properties.shard.options import ShardOptions
    from specproof.properties.verdicts import Verdict
    from specproof.reference.errors import SpecproofError, SpecproofInputError, UsageError
    from specproof.reference.rules import RULES, Rule
    from specproof.reference.sampling import Grammar

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
    "Grammar": ("specproof.reference.sampling", "Grammar"),
    "EngineRequest": ("specproof.properties.engine.request", "EngineRequest"),
    "EndpointOptions": ("specproof.properties.endpoint.options", "EndpointOptions"),
    "ShardOptions": ("specproof.properties.shard.options", "ShardOptions"),
    "Instance": ("specproof.properties.oracle.exact", "Instance"),
    "ModelInstance": ("specproof.properties.oracle.exact", "ModelInstance"),
    "OracleResult": ("specproof.properties.oracle.exact", "OracleResult"),
    "check": ("specproof.properties.oracle.exact", "check"),
    "strategies": ("specproof.properties.oracle.strategies", None),
    "Rule": ("specproof.reference.rules", "Rule"),
    "RULES": ("specproof.reference.rules", "RULES"),
}

CHAIN_PROCESSES = ("iid_chain", "onehot_chain")
#: what the audits' ``progress`` takes: "auto", "on", "off", or a callable (what, fraction)
_Progress = str | Callable[[str, float], None] | None


@contextlib.contextmanager
def _bar(progress: _Progress, label: str) -> Iterator[Callable[[str, float], None] | None]:
    """The audit's progress callback for ``progress`` (a bar on stderr for "auto" at a terminal
    outside CI, and for "on"), ended with a newline."""
    if progress is None or callable(progress):
        yield progress
        return
    if progress not in ("auto", "on", "off"):
        raise UsageError(f"progress: 'auto', 'on', 'off' or a callable, got {progress!r}")
    from specproof.properties.cli.common import end_bar, progress_bar, show_progress

    show = show_progress(progress)
    try:
        yield progress_bar(show, label)
    finally:
        end_bar(show)


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
    progress: _Progress = "auto",
    workers: int | None = None,
    ray: str | None = None,
    **options: Any,
) -> AuditResult:
    """Audit a chain verifier ``fn(draft_token_ids [B,K], draft_probs [B,K,V] or None,
    target_probs [B,K+1,V], generator) -> output_token_ids [B,K+1]`` (or a registered name,
    ``module:function``, ``path.py:function``) under ``processes``; ``law="greedy"`` for a
    verifier that preserves greedy decoding. ``options`` are :class:`AuditConfig` fields
    (``alpha``, ``tv``, ``power``, ``seed``, ``samples``, ``budget_seconds``, ``shrink``,
    ``large_vocab_tv``, ``cases``, ...), with its defaults for those not given.
    ``progress``: ``"auto"`` (a bar on stderr at a terminal, not under CI), ``"on"``, ``"off"``,
    or a callable ``progress(what, fraction)``. ``workers`` (a local Ray instance with that many
    actors) or ``ray`` (a cluster's address) shard the sampling: the same result for any number
    of workers (docs/sharding.md). Returns the :class:`AuditResult` (``verdict``, ``summary()``,
    ``to_json()``)."""
    return _audit(fn, "chain", processes, law, name, progress, options, workers, ray)


def audit_tree(
    fn: Callable[..., Any] | str,
    *,
    processes: Sequence[str],
    law: str = "target",
    name: str | None = None,
    progress: _Progress = "auto",
    workers: int | None = None,
    ray: str | None = None,
    **options: Any,
) -> AuditResult:
    """Audit a tree verifier ``fn(parents [B,N], tokens [B,N], draft_probs [B,N,V] or None,
    target_probs [B,N,V], generator) -> (accepted_nodes [B,N], next_token [B])`` under the
    proposal ``processes`` it claims (e.g. ``("wor_siblings",)``); as :func:`audit_chain`."""
    if not processes:
        raise UsageError("processes: a tree audit needs the proposal processes the verifier claims")
    return _audit(fn, "tree", processes, law, name, progress, options, workers, ray)


def _audit(
    fn: Any,
    kind: str,
    processes: Sequence[str],
    law: str,
    name: str | None,
    progress: _Progress,
    options: dict[str, Any],
    workers: int | None = None,
    ray: str | None = None,
) -> AuditResult:
    from specproof.properties.audit.stages import AuditConfig, audit
    from specproof.properties.conformance.backends import target_name
    from specproof.properties.plan import build_config
    from specproof.properties.shard.options import ShardOptions, caller_for

    backend = _backend(fn, kind, processes, law, name)
    config = build_config(AuditConfig, options)
    shard = ShardOptions(workers, ray)
    with _bar(progress, backend.name) as bar, caller_for(backend, shard) as caller:
        result = audit(backend, config, bar, caller=caller)
    result.target = fn if isinstance(fn, str) else target_name(fn)
    return result


def audit_engine(
    engine: Any,
    *,
    prompts: Sequence[Sequence[int]] | None = None,
    tokens: int | None = None,
    sampling: Sampling | None = None,
    samplings: Sequence[Sampling] | None = None,
    temperatures: Sequence[float] | None = None,
    top_k: int | None = None,
    top_p: float | None = None,
    min_p: float | None = None,
    params: dict[str, Any] | Sequence[tuple[str, Any]] | None = None,
    token_map: Sequence[str] | None = None,
    name: str | None = None,
    expect: str | None = None,
    progress: _Progress = "auto",
    workers: int | None = None,
    ray: str | None = None,
    **options: Any,
) -> EngineAuditResult:
    """Audit a whole speculative engine end to end. ``engine`` is an object with
    ``generate(prompt_ids, max_new_tokens, seed) -> list[int]``, ``target_law(context) ->
    probabilities`` and ``vocab`` (:class:`Engine`), a factory ``factory(temperature=, top_k=,
    top_p=) -> engine``, an :class:`EngineSpec`, or a registered engine's name (``specproof
    backends``). The cases: ``prompts``, ``tokens`` (the horizon M) and the settings
    (``samplings``, or one ``sampling``: for an engine instance, what it was asked to sample,
    which its ``target_law`` must apply too) in place of the engine's own; ``temperatures``
    replace each setting's temperature; ``top_k``, ``top_p``, ``min_p`` and ``params`` (request
    parameters by name) are added to every setting. Every keyword is a field of
    :class:`EngineRequest` (or :class:`ShardOptions`: ``workers``, ``ray``); ``options`` are the
    plan's (:class:`EngineAuditConfig`: ``alpha``, ``tv``, ``power``, ``seed``, ``samples``,
    ``budget_seconds``, ``looks``, ...), each with the same default as from the command line and
    pytest. ``workers``/``ray`` draw the samples on Ray actors, each with its own copy of the
    engine (a name, a factory or a spec: an instance cannot be copied), as :func:`audit_chain`."""
    from specproof.properties.engine.config import EngineAuditConfig
    from specproof.properties.options import build
    from specproof.properties.run import ShardOptions, run_engine

    request = _engine_request(
        engine, prompts, tokens, sampling, samplings, temperatures, top_k, top_p, min_p, params, token_map,
        name, expect,
    )  # fmt: skip
    config = build(EngineAuditConfig, options)
    shard = build(ShardOptions, {"workers": workers, "ray": ray})
    with _bar(progress, str(name or _label(engine))) as bar:
        return run_engine(request, config, shard, bar)


def _label(engine: Any) -> str:
    return engine if isinstance(engine, str) else getattr(engine, "__name__", type(engine).__name__)


def _engine_request(
    target: Any,
    prompts: Any,
    tokens: Any,
    sampling: Any,
    samplings: Any,
    temperatures: Any,
    top_k: Any,
    top_p: Any,
    min_p: Any,
    params: Any,
    token_map: Any,
    name: Any,
    expect: Any,
) -> EngineRequest:
    """The facade's keywords as an :class:`EngineRequest` (``sampling`` is one of ``samplings``)."""
    from specproof.properties.options import build
    from specproof.properties.run import EngineRequest

    if sampling is not None and samplings is not None:
        raise UsageError("sampling, samplings: give one of them")
    pairs = tuple(params.items()) if isinstance(params, dict) else tuple(params or ())
    return build(
        EngineRequest,
        {
            "target": target,
            "prompts": None if prompts is None else tuple(tuple(int(x) for x in p) for p in prompts),
            "tokens": tokens,
            "samplings": (sampling,) if sampling is not None else samplings,
            "temperatures": None if temperatures is None else tuple(temperatures),
            "top_k": top_k,
            "top_p": top_p,
            "min_p": min_p,
            "params": pairs or None,
            "token_map": token_map,
            "name": name,
            "expect": expect,
        },
    )


def audit_endpoint(
    url: str | Sequence[str],
    *,
    profile: str | None = None,
    twin: str | None = None,
    prompts: Sequence[Sequence[int]] | None = None,
    tokens: int | None = None,
    samplings: Sequence[Sampling] | None = None,
    temperatures: Sequence[float] | None = None,
    top_k: int | None = None,
    top_p: float | None = None,
    min_p: float | None = None,
    params: dict[str, Any] | Sequence[tuple[str, Any]] | None = None,
    vocab: int | None = None,
    token_map: Sequence[str] | None = None,
    concurrency: int | None = None,
    timeout: float | None = None,
    retries: int | None = None,
    loads: Sequence[int] | None = None,
    prefix_cache: bool | None = None,
    completions: int | None = None,
    adapter: Sequence[tuple[int, float]] | dict[int, float] | None = None,
    name: str | None = None,
    expect: str | None = None,
    progress: _Progress = "auto",
    workers: int | None = None,
    ray: str | None = None,
    target: str | None = None,
    **options: Any,
) -> EngineAuditResult:
    """Audit a served engine through its HTTP API (one URL, or several replicas of one
    deployment). ``profile`` names the server family (``llamacpp``, ``vllm``, ``sglang``,
    ``openai``, ``llamacpp-python``: how it is asked for tokens, counters and laws); ``twin`` is the
    same model served with speculation off, where the law is read and the control runs (else the
    law is read from the server itself, one token at a time). The cases as for
    :func:`audit_engine` (T = 1 and 0.7 by default); ``vocab``, ``concurrency``, ``timeout``,
    ``retries`` as :class:`EndpointOptions` says; ``loads``: requests in flight to audit every case
    at (docs/endpoint-audit.md, "Under load"); ``prefix_cache``: every case cold and after a
    prefix-cache hit (docs/endpoint-audit.md, "After a prefix-cache hit"); ``completions``: every
    case with one completion a request and with that many (docs/endpoint-audit.md, "Several
    completions a request"); ``adapter``: LoRA adapter scales every audited request asks for,
    ``{id: scale}`` or (id, scale) pairs (docs/endpoint-audit.md, "LoRA adapters"); ``options`` are
    :class:`EngineAuditConfig` fields. The result is the engine audit's, with the server's
    counters (``speculation``), its reported probabilities checked (``reports``) and the control
    (``control``);
    docs/endpoint-audit.md says how to launch each family. ``workers``/``ray``: each Ray actor
    opens its own client to the same servers. ``target``: the twin's former name, still taken.
    Safe to call inside a running event loop; :func:`audit_endpoint_async` awaits it."""
    from specproof.properties.engine.config import EngineAuditConfig
    from specproof.properties.options import build
    from specproof.properties.run import EndpointOptions, ShardOptions, run_endpoint

    twin = _twin_or_target(twin, target)
    urls = (url,) if isinstance(url, str) else tuple(url)
    endpoint = build(
        EndpointOptions,
        {
            "urls": urls,
            "profile": profile,
            "twin": twin,
            "vocab": vocab,
            "concurrency": concurrency,
            "timeout": timeout,
            "retries": retries,
            "loads": None if loads is None else tuple(loads),
            "prefix_cache": prefix_cache,
            "completions": completions,
            "adapter": _adapter(adapter),
        },
    )
    request = _engine_request(
        None, prompts, tokens, None, samplings, temperatures, top_k, top_p, min_p, params, token_map, name,
        expect,
    )  # fmt: skip
    config = build(EngineAuditConfig, options)
    shard = build(ShardOptions, {"workers": workers, "ray": ray})
    with _bar(progress, name or "endpoint") as bar:
        return run_endpoint(endpoint, request, config, shard, bar)


def _twin_or_target(twin: str | None, target: str | None) -> str | None:
    """The twin's URL, given as ``twin`` or by its former name ``target`` (not two different ones)."""
    if target is not None and twin is not None and twin != target:
        raise UsageError("twin, target: target is the twin's former name; give twin only")
    return twin if target is None else target


def _adapter(adapter: Sequence[tuple[int, float]] | dict[int, float] | None) -> Any:
    """LoRA adapter scales as :class:`EndpointOptions` holds them: ``{id: scale}`` or pairs."""
    if adapter is None:
        return None
    return tuple(adapter.items()) if isinstance(adapter, dict) else tuple(adapter)


def audit_traffic(
    records: str | Sequence[Any],
    *,
    twin: str | None = None,
    engine: Any = None,
    profile: str | None = None,
    vocab: int | None = None,
    token_map: Sequence[str] | None = None,
    concurrency: int | None = None,
    timeout: float | None = None,
    retries: int | None = None,
    adapter: Sequence[tuple[int, float]] | dict[int, float] | None = None,
    progress: _Progress = "auto",
    **options: Any,
) -> Any:
    """Score what a server served (``records``: a JSON-lines file of ``{"prompt": [...],
    "tokens": [...], "sampling": {...}}``, or a list of ``specproof.properties.endpoint.traffic.Record``)
    token by token against the laws of its speculation-off ``twin`` (a URL, by ``profile``'s
    recipe) or of an ``engine`` object here (its ``target_laws_along`` or ``target_law``). No seeds
    are needed; ``adapter``: the twin's LoRA adapter scales for records that name none (a record's
    own ``lora`` field wins); ``options`` are :class:`EngineAuditConfig` fields (alpha, tv, power,
    seed). Returns the traffic result (``verdict``, ``summary()``, ``to_json()``)."""
    from specproof.properties.endpoint.traffic import audit_traffic as _audit
    from specproof.properties.endpoint.traffic import engine_laws, read_traffic
    from specproof.properties.engine.config import EngineAuditConfig
    from specproof.properties.options import build
    from specproof.properties.run import EndpointOptions, EngineRequest, run_traffic

    config = build(EngineAuditConfig, options)
    with _bar(progress, "traffic") as bar:
        if engine is not None:
            if twin is not None:
                raise UsageError("twin, engine: the laws come from one of them")
            if adapter is not None:
                raise UsageError("adapter: goes with a twin URL (an engine object's laws are its own)")
            v = int(vocab or getattr(engine, "vocab", 0) or 0)
            if v < 1:
                raise UsageError("vocab: give the vocabulary size (the engine has no vocab attribute)")
            recs = read_traffic(records, v) if isinstance(records, str) else list(records)
            return _audit(recs, engine_laws(engine), v, config, progress=bar)
        if not isinstance(records, str):
            raise UsageError("records: from a twin URL, give the JSON-lines file's path")
        endpoint = build(
            EndpointOptions,
            {"profile": profile, "twin": twin, "vocab": vocab, "concurrency": concurrency, "timeout": timeout,
             "retries": retries, "adapter": _adapter(adapter)},
        )  # fmt: skip
        request = build(EngineRequest, {"token_map": token_map})
        return run_traffic(records, endpoint, config, request, bar)


async def audit_endpoint_async(url: str | Sequence[str], **kwargs: Any) -> EngineAuditResult:
    """:func:`audit_endpoint` awaited from a running event loop (an async service, a notebook):
    the audit runs in a worker thread, the loop stays free. The same keywords."""
    import asyncio
    import functools

    return await asyncio.to_thread(functools.partial(audit_endpoint, url, **kwargs))


__all__ = [
    "CHAIN_PROCESSES",
    "RULES",
    "AuditConfig",
    "AuditResult",
    "CaseResult",
    "ContractViolation",
    "EndpointOptions",
    "Engine",
    "EngineAuditConfig",
    "EngineRequest",
    "EngineAuditResult",
    "EngineSpec",
    "Grammar",
    "Instance",
    "ModelInstance",
    "OracleResult",
    "Rule",
    "Sampling",
    "SpecproofError",
    "ShardOptions",
    "SpecproofInputError",
    "UsageError",
    "Verdict",
    "audit_chain",
    "audit_endpoint",
    "audit_endpoint_async",
    "audit_engine",
    "audit_traffic",
    "audit_tree",
    "check",
    "strategies",
]
