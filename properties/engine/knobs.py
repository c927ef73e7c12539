"""A :class:`~specproof.properties.engine.contract.Sampling` setting in an engine's own knobs.

Writing an adapter means saying the audit's setting in the engine's words, and engines spell
"off" differently. Top-k off is ``0`` in vLLM's ``SamplingParams``, llama.cpp and ONNX Runtime
GenAI (where ``1`` is greedy decoding), ``-1`` in SGLang, ``None`` in HF ``generate`` and
mistral.rs, and ``2**31 - 1`` (its default) in OpenVINO GenAI; top-p off is ``1.0`` everywhere;
min-p off is ``0.0``. Temperature 0 is greedy decoding in vLLM, SGLang and llama.cpp, but HF
``generate`` and OpenVINO GenAI want ``do_sample=False`` instead (with sampling on, they refuse
temperature 0), and ONNX Runtime GenAI samples only with ``do_sample=True``. A wrong "off" is a
silent bug of the adapter, not of the engine: ``top_k=-1`` read as "keep the last token", a top-k
of 0 read as "keep none".

:data:`KNOBS` holds each engine's spelling; :meth:`Knobs.of` maps a setting, and refuses a
parameter the engine's knobs cannot say (a :class:`BadParameterError` naming it) rather than
dropping it, since an adapter that drops a parameter audits another law than the one asked.
The law each setting must give is :meth:`Sampling.law
<specproof.reference.sampling.Sampling.law>` (docs/engine-audit.md shows it on an example).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from specproof.reference.errors import BadParameterError
from specproof.reference.sampling import Sampling

#: top-k off in OpenVINO GenAI (``GenerationConfig.top_k``'s default: the largest size_t it keeps)
OPENVINO_TOP_K_OFF = 2**31 - 1


@dataclass(frozen=True)
class Knobs:
    """How one engine spells the sampling parameters: the value of each when off, and whether
    greedy decoding is temperature 0 (``"temperature"``) or a switch (``"do_sample"``)."""

    top_k_off: int | None = 0
    top_p_off: float | None = 1.0
    min_p_off: float | None = 0.0
    greedy: str = "temperature"
    #: the parameters of :class:`Sampling` the engine's knobs can say (``eos`` is the model's)
    says: frozenset[str] = frozenset({"temperature", "top_k", "top_p", "min_p"})

    def of(self, s: Sampling) -> dict[str, Any]:
        """``s`` in these knobs: ``temperature``, ``top_k``, ``top_p`` and ``min_p`` (each its
        "off" value where not asked), plus ``do_sample`` for a switch-greedy engine."""
        for name, _ in s.asked():
            if name not in self.says and name != "eos":
                raise BadParameterError(name, "asked, but this engine's sampling knobs cannot say it")
        out: dict[str, Any] = {
            "temperature": s.temperature,
            "top_k": self.top_k_off if s.top_k is None else s.top_k,
            "top_p": self.top_p_off if s.top_p is None else s.top_p,
            "min_p": self.min_p_off if not s.min_p else s.min_p,
        }
        if self.greedy == "do_sample":
            out["do_sample"] = not s.greedy
            if s.greedy:
                out["temperature"] = 1.0  # unused when not sampling; 0 is refused by such engines
        return out


#: each engine's spelling (module docstring)
KNOBS: dict[str, Knobs] = {
    "vllm": Knobs(top_k_off=0),
    "sglang": Knobs(top_k_off=-1),
    "llamacpp": Knobs(top_k_off=0),
    "hf": Knobs(top_k_off=None, top_p_off=None, min_p_off=None, greedy="do_sample"),
    "mistralrs": Knobs(top_k_off=None, top_p_off=None, min_p_off=None),
    "openvino_genai": Knobs(
        top_k_off=OPENVINO_TOP_K_OFF,
        min_p_off=None,
        greedy="do_sample",
        says=frozenset({"temperature", "top_k", "top_p"}),
    ),
    # ONNX Runtime GenAI's search options: top_k 0 is off (1 is greedy decoding), top_p 1 is off; its
    # repetition_penalty the adapter passes itself
    "onnxruntime_genai": Knobs(
        min_p_off=None,
        greedy="do_sample",
        says=frozenset({"temperature", "top_k", "top_p", "repetition_penalty"}),
    ),
}
