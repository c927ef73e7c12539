"""One way in: the engine and endpoint audits run from one set of values, whatever the door.

Python (``specproof.audit_engine``, ``specproof.audit_endpoint``), the command line (``specproof
audit engine|endpoint``) and the pytest plugin (``--specproof-engine``, ``--specproof-endpoint``)
each translate what they were given into the same values and call the same two functions:

* :class:`~specproof.properties.engine.request.EngineRequest`: the engine (or, for an endpoint,
  the cases) — prompts, horizon, settings, token texts, name, claim;
* :class:`~specproof.properties.endpoint.options.EndpointOptions`: how a served engine is
  reached — URLs, family, twin, vocabulary, concurrency, timeout, retries;
* :class:`~specproof.properties.shard.options.ShardOptions`: where the samples are drawn;
* :class:`~specproof.properties.engine.config.EngineAuditConfig`: the plan.

Each field's default is written once, in its class, with its command-line and pytest spellings
(:mod:`specproof.properties.options`); tests/test_doors.py sends every field through every door
and checks it arrives, and that an untouched door gives the class's default. Importing this
package imports nothing heavy; :func:`run_engine` and :func:`run_endpoint` import the audits when
they run.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from specproof.properties.endpoint.options import EndpointOptions
from specproof.properties.engine.config import EngineAuditConfig
from specproof.properties.engine.request import EngineRequest
from specproof.properties.shard.options import ShardOptions
from specproof.reference.errors import UsageError

if TYPE_CHECKING:
    from specproof.properties.endpoint.engine import Endpoint
    from specproof.properties.engine.contract import EngineSpec
    from specproof.properties.engine.results import EngineAuditResult

#: the classes whose fields the doors reach, each with the prefix of its pytest options
DOOR_CLASSES: dict[type, str] = {
    EngineRequest: "specproof-engine",
    EngineAuditConfig: "specproof-engine",
    EndpointOptions: "specproof-endpoint",
    ShardOptions: "specproof",
}

ProgressFn = Callable[[str, float], None]


def engine_spec(request: EngineRequest) -> EngineSpec:
    """The :class:`~specproof.properties.engine.contract.EngineSpec` a request names, with the
    request's prompts, settings, horizon, name and claim in place of the engine's own."""
    from specproof.properties.engine.registry import resolve_engine, spec_from_object, with_options

    target = request.target
    if target is None:
        raise UsageError("TARGET: missing; usage: specproof audit engine TARGET")
    if isinstance(target, str):
        spec = resolve_engine(target)
    else:
        label = str(request.name or getattr(target, "__name__", type(target).__name__))
        one = request.samplings[0] if request.samplings and len(request.samplings) == 1 else None
        spec = spec_from_object(label, target, request.prompts, sampling=one)
    settings = request.settings(spec.samplings) if request.asks_settings else None
    spec = with_options(spec, request.prompts, settings, request.tokens)
    if request.name is not None or request.expect is not None:
        spec = replace(spec, name=request.name or spec.name, expect=request.expect or spec.expect)
    return spec


def run_engine(
    request: EngineRequest,
    plan: EngineAuditConfig | None = None,
    shard: ShardOptions | None = None,
    progress: ProgressFn | None = None,
    announce: Callable[[str], None] | None = None,
    spec: EngineSpec | None = None,
) -> EngineAuditResult:
    """Audit the engine ``request`` names (``spec``: already resolved from it) under ``plan``,
    its samples drawn where ``shard`` says."""
    from specproof.properties.engine.audit import audit_engine
    from specproof.properties.shard.options import drawer_for

    spec = spec or engine_spec(request)
    with drawer_for(spec, shard or ShardOptions(), request.target) as drawer:
        result = audit_engine(spec, plan or EngineAuditConfig(), progress, announce, drawer=drawer)
        result.sharding = drawer.summary() if drawer is not None else None
    return result


def open_endpoint(
    options: EndpointOptions, request: EngineRequest, transports: dict[str, Any] | None = None
) -> Endpoint:
    """The served engine's servers, made and checked (:meth:`Endpoint.open`)."""
    from specproof.properties.endpoint.engine import Endpoint

    return Endpoint(options, token_map=request.token_map, transports=transports).open()


def endpoint_request_spec(endpoint: Endpoint, request: EngineRequest) -> EngineSpec:
    """The spec of an opened endpoint under the request's cases (T = 1 and 0.7 unless asked)."""
    from specproof.properties.endpoint.engine import endpoint_spec
    from specproof.properties.engine.contract import ENDPOINT_TOKENS, T07, T1

    if request.target is not None:
        raise UsageError("target: an endpoint audit is given its URLs (EndpointOptions.urls), not a TARGET")
    settings = request.settings((T1, T07)) if request.asks_settings else None
    tokens = request.tokens or ENDPOINT_TOKENS
    return endpoint_spec(endpoint, request.prompts, settings, tokens, request.name, request.expect)


def run_endpoint(
    options: EndpointOptions,
    request: EngineRequest | None = None,
    plan: EngineAuditConfig | None = None,
    shard: ShardOptions | None = None,
    progress: ProgressFn | None = None,
    announce: Callable[[str], None] | None = None,
    transports: dict[str, Any] | None = None,
) -> EngineAuditResult:
    """Audit the served engine ``options`` reach, under the cases of ``request`` and ``plan``;
    ``transports`` (URL -> httpx transport) reach servers without a socket (the stand-ins)."""
    from specproof.properties.engine.audit import audit_engine
    from specproof.properties.shard.options import drawer_for

    request = request or EngineRequest()
    with open_endpoint(options, request, transports) as endpoint:
        spec = endpoint_request_spec(endpoint, request)
        with drawer_for(spec, shard or ShardOptions()) as drawer:
            result = audit_engine(spec, plan or EngineAuditConfig(), progress, announce, drawer=drawer)
            result.sharding = drawer.summary() if drawer is not None else None
    return result


def run_traffic(
    path: str,
    options: EndpointOptions,
    plan: EngineAuditConfig | None = None,
    request: EngineRequest | None = None,
    progress: ProgressFn | None = None,
    transports: dict[str, Any] | None = None,
) -> Any:
    """Recorded traffic (a JSON-lines file, :mod:`specproof.properties.endpoint.traffic`) scored
    against the laws of ``options``' twin (or, with no twin, of its first URL: a server without
    speculation)."""
    import os
    from dataclasses import replace as with_

    from specproof.properties.endpoint.engine import Endpoint
    from specproof.properties.endpoint.traffic import audit_traffic, read_traffic, twin_laws

    if not os.path.isfile(path):
        raise UsageError(f"TRAFFIC: no file {path!r}")
    url = options.twin or (options.urls[0] if options.urls else None)
    if url is None:
        raise UsageError("--twin: give the speculation-off twin whose laws the recorded tokens are scored on")
    request = request or EngineRequest()
    law_options = with_(options, urls=(url,), twin=None)
    with Endpoint(law_options, token_map=request.token_map, transports=transports) as endpoint:
        endpoint.speculation_off = True  # the twin: its own laws, never a speculative server's
        records = read_traffic(path, endpoint.vocab)
        return audit_traffic(
            records, twin_laws(endpoint), endpoint.vocab, plan, source=path, progress=progress
        )


__all__ = [
    "DOOR_CLASSES",
    "EndpointOptions",
    "EngineAuditConfig",
    "EngineRequest",
    "ShardOptions",
    "engine_spec",
    "open_endpoint",
    "run_endpoint",
    "run_engine",
    "run_traffic",
]
