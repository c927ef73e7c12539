"""Adapters of third-party verifiers and tree builders onto specproof's contracts.

Each adapter module wraps one package's function behind a contract of
:mod:`specproof.properties.conformance.contracts` (chain or tree verifier) or of
:mod:`specproof.properties.conformance.buffers` (tree builder), declares what it claims (the processes to
audit it under and the verdict its authors expect) and imports its package only when called.
:data:`ADAPTERS` lists them with the package each needs; :func:`availability` says which are
importable here and, for the others, why not. Nothing here is installed by the default suite:
each package is an optional extra with its own tox environment (docs/conformance.md).

The verdict an adapter *expects* is the one its package claims (lossless for a rejection
sampler, lossy where the package documents a relaxation such as typical acceptance); the
conformance table reports what the audit found against it.
"""

from __future__ import annotations

import importlib
import importlib.metadata
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Adapter:
    module: str  # our adapter module, under this package
    package: str  # the distribution it needs
    imports: str  # a module whose import proves it usable, or a file of the distribution
    what: str
    needs_cuda: bool = False  # its kernels exist only for CUDA
    install: str = ""  # how to install it, when not `pip install specproof[<module>]`


ADAPTERS: tuple[Adapter, ...] = (
    Adapter("hf", "transformers", "transformers.generation.utils", "HF transformers speculative sampling"),
    Adapter(
        "medusa",
        "medusa-llm",
        "medusa.model.utils",
        "Medusa-1 (FasterDecoding) buffers and posterior",
        install="pip install --no-deps medusa-llm==0.1",
    ),
    Adapter(
        "eagle",
        "eagle-llm",
        "eagle.model.utils",
        "EAGLE-1 (SafeAILab) buffers and posterior",
        install="pip install transformers; pip install --no-deps eagle-llm==1.2.1",
    ),
    Adapter(
        "sglang",
        "sglang",
        "sglang/kernels/ops/speculative/reject_sampling.py",
        "SGLang's Triton chain sampler (token-level and block verification)",
        install="pip install --no-deps sglang==0.5.23",
    ),
    Adapter(
        "vllm",
        "vllm",
        "vllm/v1/worker/gpu/spec_decode/rejection_sampler_utils.py",
        "vLLM's V1 rejection sampler and model runner V2 verifier (Triton)",
        install="pip install --no-deps vllm==0.33.0",
    ),
    Adapter(
        "sglang_cuda",
        "sglang",
        "sglang.kernels.ops.speculative.sampling",
        "SGLang's CUDA tree sampler (target-only)",
        needs_cuda=True,
        install="sglang with its CUDA kernels, on a CUDA machine",
    ),
    Adapter(
        "flashinfer",
        "flashinfer-python",
        "flashinfer.sampling",
        "FlashInfer's chain speculative sampling (CUDA)",
        needs_cuda=True,
        install="pip install flashinfer-python==0.7.4, on a CUDA machine",
    ),
)


def availability(adapter: Adapter) -> tuple[bool, str]:
    """(usable, the version or the reason it is not)."""
    try:
        version = importlib.metadata.version(adapter.package)
    except importlib.metadata.PackageNotFoundError:
        how = adapter.install or f"pip install specproof[{adapter.module}]"
        return False, f"{adapter.package} is not installed ({how})"
    if adapter.needs_cuda:
        import torch

        if not torch.cuda.is_available():
            return False, f"{adapter.package} {version} is installed but its kernels need CUDA, absent here"
    if adapter.imports.endswith(".py"):
        path = importlib.metadata.distribution(adapter.package).locate_file(adapter.imports)
        if not Path(str(path)).is_file():
            return False, f"{adapter.package} {version} has no {adapter.imports}"
        # Adapters that load files with stand-ins say here whether that still works.
        probe = getattr(importlib.import_module(f"{__name__}.{adapter.module}"), "probe", None)
        if probe is not None:
            try:
                probe()
            except Exception as e:
                return (
                    False,
                    f"{adapter.package} {version}: its files do not load as the adapter expects: {e}",
                )
        return True, version
    try:
        importlib.import_module(adapter.imports)
    except Exception as e:  # a broken install is reported, not raised
        return False, f"{adapter.package} {version} is installed but `import {adapter.imports}` fails: {e}"
    return True, version


def backend_specs() -> list[tuple[Adapter, dict[str, object]]]:
    """The backend specs of every adapter whose package is usable here."""
    out: list[tuple[Adapter, dict[str, object]]] = []
    for adapter in ADAPTERS:
        ok, _ = availability(adapter)
        if ok:
            module = importlib.import_module(f"{__name__}.{adapter.module}")
            out.extend((adapter, spec) for spec in module.backends())
    return out
