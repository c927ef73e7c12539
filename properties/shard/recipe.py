"""What a worker is told so that it builds its own replica: a recipe, never the replica itself.

An engine or a verifier holds weights, a GPU context, an HTTP client: none of it should cross the
wire, and none of it needs to. A worker receives how to build one and builds it where it runs:

* ``registered``: a name of the registry (``specproof backends``): the worker resolves the same
  name (``reference.draft.token``, ``hf.*``, ``vllm.*``, a verifier's ``torch.token``);
* ``target``: ``module:attr`` or ``path/to/file.py:attr`` (the path made absolute): the worker
  imports it as the driver did; for an engine, ``attr`` is an engine factory, an engine instance
  (the worker's import makes its own) or an :class:`EngineSpec`; for a verifier, the function;
* ``pickled``: a callable that pickles *by reference* (a module-level function, a
  ``functools.partial`` of one, an instance of a module-level class): the bytes of the standard
  pickle, so the worker imports the code and calls it;
* ``endpoint``: a served engine's URLs, profile, twin and client settings: each worker opens its
  own HTTP client to the same servers.

Refused, with the reason, before any worker starts: a lambda, a nested function or a closure,
an engine instance handed over as an object, anything defined in ``__main__`` or in a file loaded
by path that has no ``path.py:name`` to load it by (:class:`NotShippable`). Those would be
shipped by value (Ray's cloudpickle would try), which copies an engine's state instead of
building a replica, or fails on the worker.
"""

from __future__ import annotations

import dataclasses
import io
import os
import pickle
import sys
import types
from dataclasses import dataclass, field
from typing import Any

from specproof.properties._imports import import_where
from specproof.properties.engine.contract import Engine, EngineSpec, Sampling
from specproof.reference.errors import UsageError

#: module-name prefixes of code loaded from a file by path (properties/_imports.py): a worker
#: cannot import those by name, only by the file's path
BY_PATH = ("specproof_engine_", "specproof_user_")


class NotShippable(UsageError):
    """An engine or verifier that cannot be rebuilt on a worker from a recipe."""


# --------------------------------------------------------------------------- pickling by reference


class _ByReference(pickle.Pickler):
    """The standard pickler, noting every function or class it pickles from a module a worker
    could not import by name."""

    def __init__(self, buf: io.BytesIO) -> None:
        super().__init__(buf, protocol=pickle.HIGHEST_PROTOCOL)
        self.unimportable: list[str] = []

    def reducer_override(self, obj: Any) -> Any:
        if isinstance(obj, (type, types.FunctionType, types.BuiltinFunctionType)):
            module = getattr(obj, "__module__", None) or ""
            if module == "__main__" or module.startswith(BY_PATH):
                self.unimportable.append(f"{module}.{getattr(obj, '__qualname__', obj)}")
        return NotImplemented


def pickled_by_reference(obj: Any) -> bytes | str:
    """The standard pickle of ``obj`` (functions and classes by reference), or why there is none."""
    buf = io.BytesIO()
    p = _ByReference(buf)
    try:
        p.dump(obj)
    except Exception as e:  # a lambda, a local function, an open file, a CUDA context, ...
        return f"{type(e).__name__}: {e}"
    if p.unimportable:
        return f"it refers to {p.unimportable[0]}, which a worker cannot import by name"
    return buf.getvalue()


def absolute_target(target: str) -> str:
    """``path.py:attr`` with the path made absolute (workers start elsewhere); others as they are."""
    where, _, attr = target.rpartition(":")
    if where.endswith(".py") or os.sep in where:
        return f"{os.path.abspath(where)}:{attr}"
    return target


def load_target(target: str, what: str) -> Any:
    where, _, attr = target.rpartition(":")
    module = import_where(where, lambda problem: UsageError(f"{what}: {problem}"), "specproof_engine_")
    if not hasattr(module, attr):
        raise UsageError(f"{what}: {where!r} has no attribute {attr!r}")
    return getattr(module, attr)


def function_target(fn: Any) -> str | None:
    """``module:name`` or ``path.py:name`` for a function a worker can load by name, else None."""
    from specproof.properties.conformance.backends import target_name

    name = target_name(fn)
    return None if name is None else absolute_target(name)


# --------------------------------------------------------------------------- engines


@dataclass(frozen=True)
class EngineRecipe:
    """How a worker builds its engine replica per sampling setting (module docstring)."""

    how: str  # registered, endpoint, target, object, function, pickled
    what: Any  # the name, the target, the pickle's bytes, or the endpoint's settings
    label: str  # the engine's name, for messages

    def build(self, sampling: Sampling) -> Engine:
        """The engine for ``sampling``, built here (on the worker)."""
        if self.how == "registered":
            from specproof.properties.engine.registry import ENGINES, ensure_registered

            ensure_registered()
            if self.what not in ENGINES:
                raise UsageError(f"engine {self.what!r} is not registered on this worker")
            return ENGINES[self.what].build(sampling)
        if self.how == "target":
            return _build_from_object(self.what, load_target(self.what, "engine"), sampling)
        if self.how == "object":
            return _build_from_object(self.label, pickle.loads(self.what), sampling)
        if self.how == "function":
            return load_target(self.what, "engine factory")(sampling)
        if self.how == "pickled":
            return pickle.loads(self.what)(sampling)
        if self.how == "endpoint":
            from specproof.properties.endpoint.engine import Endpoint

            endpoint = Endpoint(self.what["options"], profile=self.what["profile"]).open()
            return endpoint.engine(sampling)
        raise UsageError(f"unknown engine recipe {self.how!r}")

    def to_json(self) -> dict[str, Any]:
        shown = f"{len(self.what)} bytes" if isinstance(self.what, bytes) else self.what
        if self.how == "endpoint":
            shown = {"urls": list(self.what["options"].urls), "twin": self.what["options"].twin}
        return {"how": self.how, "what": shown}


def _build_from_object(target: str, obj: Any, sampling: Sampling) -> Engine:
    """What ``specproof audit engine module:attr`` accepts, built for one setting without the
    extra build the registry makes to read the vocabulary."""
    from specproof.properties.engine.registry import factory_builder

    if isinstance(obj, EngineSpec):
        return obj.build(sampling)
    if hasattr(obj, "generate") and hasattr(obj, "target_law"):
        return obj  # the worker's own import made it: a replica
    if callable(obj) and not isinstance(obj, type):
        build, _ = factory_builder(target, obj)
        return build(sampling)
    raise UsageError(f"engine: {target!r} is neither an engine, an engine factory nor an EngineSpec")


def engine_recipe(spec: EngineSpec, target: str | None = None, source: Any = None) -> EngineRecipe:
    """The recipe for ``spec``'s engines. ``target`` is what the user named (a registered name or
    ``module:attr``) and ``source`` the object the spec was made from (an engine factory, an
    EngineSpec), when known. In order: a registered engine by name; a served endpoint by its
    settings; the target; the source by name or by reference; the spec's ``build`` by name or by
    reference. Raises :class:`NotShippable` with the reason."""
    from specproof.properties.engine.registry import ENGINES, ensure_registered

    ensure_registered()
    own = ENGINES.get(spec.name)
    if own is not None and own.build is spec.build:
        return EngineRecipe("registered", spec.name, spec.name)
    owner = getattr(spec.build, "__self__", None)
    if owner is not None and type(owner).__module__ == "specproof.properties.endpoint.engine":
        from specproof.properties.endpoint.engine import Endpoint

        if isinstance(owner, Endpoint) and spec.build.__name__ == "engine":
            return EngineRecipe("endpoint", endpoint_settings(owner), spec.name)
    if target is not None and ":" in target:
        return EngineRecipe("target", absolute_target(target), spec.name)
    if source is not None and not isinstance(source, str):
        if hasattr(source, "generate") and hasattr(source, "target_law"):
            raise NotShippable(
                f"engine {spec.name!r} is an engine instance: workers build their own replica, so give "
                "its factory (a module-level function), a module:attr target or a registered name"
            )
        ref = function_target(source)
        if ref is not None:
            return EngineRecipe("target", ref, spec.name)
        data = pickled_by_reference(source)
        if isinstance(data, bytes):
            return EngineRecipe("object", data, spec.name)
    name = function_target(spec.build)
    if name is not None:
        return EngineRecipe("function", name, spec.name)
    data = pickled_by_reference(spec.build)
    if isinstance(data, bytes):
        return EngineRecipe("pickled", data, spec.name)
    if spec.group == "user" and ":" in spec.name and not spec.name.startswith(("endpoint ", "http")):
        # specproof.audit_engine("module:attr") / resolve_engine: the worker imports the same
        return EngineRecipe("target", absolute_target(spec.name), spec.name)
    raise NotShippable(
        f"engine {spec.name!r}: its build cannot be sent to workers ({data}). Workers build their own "
        "replica: give a registered name, a module:attr or path.py:attr target, or an EngineSpec whose "
        "build is a module-level function (or a functools.partial of one), not a lambda, a closure or "
        "an engine instance"
    )


def endpoint_settings(endpoint: Any) -> dict[str, Any]:
    """What a worker opens its own copy of an opened
    :class:`~specproof.properties.endpoint.engine.Endpoint` from (its own clients to the same
    servers): the options, the vocabulary read, and the profile as learned."""
    options = dataclasses.replace(endpoint.options, vocab=endpoint.vocab)
    return {"options": options, "profile": endpoint.profile}


# --------------------------------------------------------------------------- verifiers


@dataclass(frozen=True)
class BackendRecipe:
    """How a worker rebuilds a verifier :class:`~specproof.properties.conformance.backends.Backend`:
    its fields, and how to get its function (registered, target or pickled)."""

    how: str
    what: Any
    fields: dict[str, Any] = field(default_factory=dict)  # the Backend's fields but fn

    @property
    def label(self) -> str:
        return str(self.fields.get("name", "?"))

    def build(self) -> Any:
        from specproof.properties.conformance.backends import Backend, load_callable, resolve

        if self.how == "registered":
            fn = resolve(self.what, self.fields["kind"]).fn
        elif self.how == "target":
            fn = load_callable(self.what)
        elif self.how == "pickled":
            fn = pickle.loads(self.what)
        else:
            raise UsageError(f"unknown verifier recipe {self.how!r}")
        return Backend(fn=fn, **self.fields)


def backend_recipe(backend: Any) -> BackendRecipe:
    """The recipe for a verifier backend; raises :class:`NotShippable` with the reason."""
    from dataclasses import fields as dc_fields

    from specproof.properties.conformance.backends import REGISTRY, ensure_registered

    kept = {f.name: getattr(backend, f.name) for f in dc_fields(backend) if f.name != "fn"}
    ensure_registered()
    own = REGISTRY.get((backend.kind, backend.name))
    if own is not None and own.fn is backend.fn:
        return BackendRecipe("registered", backend.name, kept)
    name = function_target(backend.fn)
    if name is not None:
        return BackendRecipe("target", name, kept)
    data = pickled_by_reference(backend.fn)
    if isinstance(data, bytes):
        return BackendRecipe("pickled", data, kept)
    if ":" in backend.name and backend.group == "user":
        return BackendRecipe("target", absolute_target(backend.name), kept)
    raise NotShippable(
        f"verifier {backend.name!r}: its function cannot be sent to workers ({data}). Give a registered "
        "name or a module:function / path.py:function target, or a module-level function"
    )


def worker_paths() -> list[str]:
    """The driver's import path, for workers on this machine (a user's module found from the
    working folder); a path a worker does not have is skipped there, and a working folder that no
    longer exists (removed under a running driver) is left out rather than failing the start."""
    try:
        here = [os.getcwd()]
    except FileNotFoundError:
        here = []
    return [*here, *[p for p in sys.path if p]]
