"""The pinned environments, one shape for all: ``install(progress)`` makes it (cached outside the
clone, reused by a second call) and returns where it is; ``info()`` says where it is and whether it
is installed. :mod:`specproof.properties.integrations` names them; ``specproof env install NAME``
and ``specproof env info NAME`` call them."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any


class PinnedEnvironment:
    """An environment kept by one module of :mod:`specproof.properties.servers` with ``install``,
    ``installed`` and ``venv_dir`` (vLLM's CPU build, OpenVINO GenAI, mistral.rs, ONNX Runtime GenAI)."""

    module = ""

    def _mod(self) -> Any:
        return importlib.import_module(f"specproof.properties.servers.{self.module}")

    def install(self, progress: Callable[[str], None]) -> str:
        return str(self._mod().install(progress=progress))

    def info(self) -> dict[str, Any]:
        mod = self._mod()
        ok, why = mod.installed()
        return {"installed": ok, "detail": why, "venv": str(mod.venv_dir())}


class VLLMCPU(PinnedEnvironment):
    module = "vllm_cpu"


class OpenVINO(PinnedEnvironment):
    module = "openvino_env"


class MistralRS(PinnedEnvironment):
    module = "mistralrs_env"

    def install(self, progress: Callable[[str], None]) -> str:
        """Make the environment and check that its wheel runs here: a CPU that cannot run it is
        said and is not a failed install (the tier's tests skip, saying so); any other failure
        to run is."""
        mod = self._mod()
        where = super().install(progress)
        ok, why = mod.usable()
        if ok:
            return where
        if mod.cpu_cannot_run():
            return (
                f"{where}\nmistral.rs {mod.VERSION} is installed, and this CPU cannot run its wheel: {why}. "
                "Its tier is not tested on this machine: tests/test_mistralrs.py skips, saying so."
            )
        raise mod.MistralRSError(f"the environment was built and does not run: {why}")

    def info(self) -> dict[str, Any]:
        out = super().info()
        ok, why = self._mod().usable()  # the wheel may not run on this CPU
        return {**out, "usable": ok, "usable_detail": why}


class ORTGenAI(PinnedEnvironment):
    module = "ort_env"


class LlamaCpp(PinnedEnvironment):
    """llama-server built from the pinned source, and llama-cpp-python on a library built from it
    (installed into the running environment)."""

    def install(self, progress: Callable[[str], None]) -> str:
        from specproof.properties.servers import llamacpp, llamacpp_python

        built = llamacpp.ensure_built(progress=progress)
        llamacpp_python.ensure_installed(progress=progress)
        return str(built)

    def info(self) -> dict[str, Any]:
        from specproof.properties.servers import llamacpp, llamacpp_python

        server, python = llamacpp.info(), llamacpp_python.info()
        ok = bool(llamacpp.is_built()) and bool(llamacpp_python.is_installed())
        return {"installed": ok, "server": server, "python": python}
