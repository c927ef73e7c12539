"""Registered backends: verifiers the audit can name.

A backend is a verifier behind one of the contracts of :mod:`specproof.properties.conformance.contracts`
(``kind`` "chain" or "tree") together with what it claims: the proposal processes to audit it
under, the law it preserves ("target", or "greedy" for greedy decoding) and the verdict its
authors expect (``pass`` for a correct verifier, ``lossy`` or ``contract_violation`` for a
known-bad one). Names are ``<engine>.<rule>``; list them with ``specproof backends``.

A TARGET on the command line is a registered name, ``module:function`` or
``path/to/file.py:function``.
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
import os
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import torch

from specproof.properties._imports import import_where
from specproof.properties.conformance.backends import reference as _ref
from specproof.properties.conformance.backends import torch_chain as _tc
from specproof.reference.errors import SpecproofError, UsageError
from specproof.reference.processes import PROCESSES
from specproof.reference.rules import CHAINS, RULES

TREE_PROCESSES = tuple(p for p in PROCESSES if not PROCESSES[p].chain)
CHAIN_PROCESSES = tuple(p for p in PROCESSES if PROCESSES[p].chain)


@dataclass(frozen=True)
class Backend:
    name: str
    kind: str  # "chain" or "tree"
    fn: Callable[..., Any] = field(repr=False)
    processes: tuple[str, ...]
    expect: str = "pass"  # or "lossy", "contract_violation"; per process in expect_by_process
    law: str = "target"  # or "greedy"
    doc: str = ""
    group: str = "builtin"  # builtin, alternative, mutant, user
    expect_by_process: tuple[tuple[str, str], ...] = ()
    #: how fast it runs, which picks its plan in the main job: "batched" (tensor code),
    #: "python" (one row at a time) or "interpreted" (Triton's CPU interpreter)
    speed: str = "batched"

    def expected(self, process: str) -> str:
        return dict(self.expect_by_process).get(process, self.expect)

    def to_json(self) -> dict[str, object]:
        return {
            "name": self.name,
            "kind": self.kind,
            "processes": list(self.processes),
            "law": self.law,
            "expect": {p: self.expected(p) for p in self.processes},
            "group": self.group,
            "speed": self.speed,
            "doc": self.doc,
        }


class _Registry(dict[tuple[str, str], Backend]):
    """The backends by (kind, name). Reading it first registers the mutants and the installed
    third-party adapters (:func:`ensure_registered`): importing this module probes no package."""

    def _fill(self) -> None:
        if not _FILLING:
            _FILLING.append(True)
            ensure_registered()


def _filled(name: str) -> Callable[..., Any]:
    """The dict method ``name``, run after the registry's first fill."""
    method = getattr(dict, name)

    def run(self: _Registry, *args: Any) -> Any:
        self._fill()
        return method(self, *args)

    run.__name__ = name
    return run


for _read in ("__getitem__", "get", "__contains__", "__iter__", "__len__", "values", "items", "keys"):
    setattr(_Registry, _read, _filled(_read))


_FILLING: list[bool] = []  # set once the lazy part of the registry has been asked for
REGISTRY: dict[tuple[str, str], Backend] = _Registry()


def register(backend: Backend) -> Backend:
    if backend.kind not in ("chain", "tree"):
        raise UsageError(f"kind: must be 'chain' or 'tree', got {backend.kind!r}")
    for p in backend.processes:
        if p not in PROCESSES:
            raise UsageError(f"processes: unknown process {p!r}")
    REGISTRY[(backend.kind, backend.name)] = backend
    return backend


def _register_reference() -> None:
    for rule in RULES.values():
        law = "greedy" if rule.preserves == "greedy" else "target"
        if rule.applies_to(True):
            exact_chain = CHAINS <= rule.exact_for
            register(
                Backend(
                    f"reference.{rule.name}",
                    "chain",
                    _ref.chain_backend(rule),
                    CHAIN_PROCESSES,
                    "pass" if exact_chain else "lossy",
                    law,
                    f"the reference rule ({rule.note})",
                    expect_by_process=tuple(
                        (p, "pass" if p in rule.exact_for else "lossy") for p in CHAIN_PROCESSES
                    ),
                    speed="python",
                )
            )
        if not rule.chain_only:
            claimed = tuple(p for p in TREE_PROCESSES if p in rule.exact_for)
            processes = claimed or ("onehot_siblings",)
            register(
                Backend(
                    f"reference.{rule.name}",
                    "tree",
                    _ref.tree_backend(rule),
                    processes,
                    "pass" if claimed else "lossy",
                    law,
                    f"the reference rule ({rule.note})",
                    expect_by_process=tuple(
                        (p, "pass" if p in rule.exact_for else "lossy") for p in TREE_PROCESSES
                    ),
                    speed="python",
                )
            )


def _register_alternatives() -> None:
    for how, what in (("icdf", "inverse CDF"), ("gumbel", "Gumbel-max"), ("exprace", "an exponential race")):
        name = "torch.token" if how == "icdf" else f"torch.token_{how}"
        register(
            Backend(
                name,
                "chain",
                functools.partial(_tc.token_chain, how=how),
                CHAIN_PROCESSES,
                doc=f"batched token-level sampling; residual drawn by {what}",
                group="alternative",
            )
        )
    register(
        Backend(
            "torch.strict",
            "chain",
            _tc.strict_chain,
            CHAIN_PROCESSES,
            doc="batched strict variant: Y_i ~ p_i, accept while Y_i == X_i",
            group="alternative",
        )
    )
    register(
        Backend(
            "torch.block",
            "chain",
            _tc.block_chain,
            CHAIN_PROCESSES,
            doc="batched block verification",
            group="alternative",
        )
    )


def _lazy(module: str, attr: str) -> Callable[..., Any]:
    """Import the optimized engine (and Triton) only when its backend is first called."""

    def call(*args: Any) -> Any:
        return getattr(importlib.import_module(module), attr)(*args)

    call.__name__ = attr
    return call


def _register_optimized() -> None:
    """The Triton engine (:mod:`specproof.optimized`), claiming what the reference rule claims."""
    kernels = [  # kind, rule, module, verifier, what
        ("chain", "token", "token", "token_verifier", "token-level verification"),
        ("chain", "block", "block", "block_verifier", "block verification"),
        ("chain", "typical", "typical", "typical_chain_verifier", "typical acceptance (not lossless)"),
        ("tree", "mss", "mss", "mss_verifier", "multi-draft sampling with replacement"),
        ("tree", "rrs", "rrs", "rrs_verifier", "recursive rejection sampling"),
        ("tree", "target_only", "target_only", "target_only_verifier", "the target-only rule"),
        (
            "tree",
            "target_only[threshold_single=0.3]",
            "target_only",
            "single_03_verifier",
            "the target-only rule, threshold_single 0.3 (not lossless)",
        ),
        (
            "tree",
            "target_only[threshold_acc=0.5]",
            "target_only",
            "acc_05_verifier",
            "the target-only rule, threshold_acc 0.5 (not lossless)",
        ),
        ("tree", "strict", "strict", "strict_verifier", "the strict variant (a target sample per node)"),
        ("tree", "greedy", "greedy", "greedy_verifier", "greedy verification"),
        ("tree", "typical", "typical", "typical_verifier", "typical acceptance (not lossless)"),
    ]
    for kind, rule, module, attr, what in kernels:
        ref = dict.__getitem__(REGISTRY, (kind, f"reference.{rule}"))  # no lazy fill while importing
        register(
            Backend(
                f"optimized.{rule}",
                kind,
                _lazy(f"specproof.optimized.{module}", attr),
                ref.processes,
                ref.expect,
                ref.law,
                f"Triton kernel: {what} (interpreter on CPU)",
                group="optimized",
                expect_by_process=ref.expect_by_process,
                speed="batched" if torch.cuda.is_available() else "interpreted",
            )
        )


_THIRDPARTY_DONE: list[bool] = []


def _register_thirdparty() -> None:
    """Adapters of installed third-party packages (:mod:`.thirdparty`), group "thirdparty": on
    first use (:func:`ensure_registered`), since finding them imports the packages."""
    if _THIRDPARTY_DONE:
        return
    _THIRDPARTY_DONE.append(True)
    from specproof.properties.conformance.backends.thirdparty import backend_specs

    for _adapter, spec in backend_specs():
        register(Backend(group="thirdparty", **spec))  # type: ignore[arg-type]


def ensure_registered() -> None:
    """Every backend in :data:`REGISTRY`: the mutants and the installed third-party adapters,
    which importing this module leaves out (importing probes no installed package)."""
    from specproof.properties.conformance import mutants  # noqa: F401  (registers mutant.*)

    _register_thirdparty()


_register_reference()
_register_alternatives()
_register_optimized()


class TargetError(SpecproofError, ValueError):
    """A TARGET that cannot be resolved (exit status 2)."""


def load_callable(target: str) -> Callable[..., Any]:
    """``module:function`` or ``path/to/file.py:function``."""
    if ":" not in target:
        raise TargetError(
            f"TARGET: {target!r} is neither a registered backend (see `specproof backends`) "
            "nor module:function nor path/to/file.py:function"
        )
    where, _, attr = target.rpartition(":")
    module = import_where(where, lambda problem: TargetError(f"TARGET: {problem}"), "specproof_user_")
    fn = getattr(module, attr, None)
    if fn is None or not callable(fn):
        raise TargetError(f"TARGET: {where!r} has no callable {attr!r}")
    return fn


def target_name(fn: Any) -> str | None:
    """How to name ``fn`` again as a TARGET (``module:function``, or ``path/to/file.py:function``
    for a function defined in a script), so that an audit's JSON can be replayed; None for what
    cannot be imported by name (a lambda, a nested function, a callable object)."""
    qual = getattr(fn, "__qualname__", None)
    module = getattr(fn, "__module__", None)
    if not isinstance(qual, str) or "<" in qual or "." in qual or not module:
        return None
    if module != "__main__" and not module.startswith(("specproof_user_", "specproof_engine_")):
        return f"{module}:{qual}"
    code = getattr(fn, "__code__", None)
    path = getattr(code, "co_filename", None)
    return f"{path}:{qual}" if path and path.endswith(".py") and os.path.isfile(path) else None


def _ensure_mutants() -> None:
    ensure_registered()


def resolve(target: str, kind: str, processes: tuple[str, ...] | None = None) -> Backend:
    """The backend a TARGET names, for a chain or tree audit."""
    _ensure_mutants()
    if (kind, target) in REGISTRY:
        b = REGISTRY[(kind, target)]
        if processes:
            b = replace(b, processes=processes)
        return b
    other = "tree" if kind == "chain" else "chain"
    if (other, target) in REGISTRY:
        raise TargetError(f"TARGET: {target!r} is a {other} backend; run `specproof audit {other} {target}`")
    fn = load_callable(target)
    if processes is None:
        if kind == "tree":
            raise TargetError(
                "--process: a tree audit needs the proposal process the verifier claims "
                f"({', '.join(TREE_PROCESSES)})"
            )
        processes = CHAIN_PROCESSES
    return Backend(target, kind, fn, processes, "pass", "target", "a user verifier", "user", speed="batched")


def all_backends() -> list[Backend]:
    _ensure_mutants()
    return list(REGISTRY.values())
