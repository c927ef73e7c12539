"""ONNX Runtime GenAI (``onnxruntime-genai`` 0.18.0) as an engine: its ``Generator`` and
``MtpGenerator`` as a user's script runs them.

The models run in ONNX Runtime GenAI's own environment, in a worker process each
(properties/servers/ort_env.py, ``specproof env install ort``), on the project's tiny llama pair
written as ONNX graphs by the project (V = 16, end of sequence 0, float32):

* ``ort.draft``: the target with the tiny draft model (``model.draft``, 3 tokens a step);
* ``ort.ngram``: the target with n-gram lookup (``ngram_size`` 2, 3 tokens a step), after a prompt
  that repeats itself so that the lookup finds drafts;
* ``ort.mtp``: ``og.MtpGenerator`` with a one-layer MTP head (3 tokens a step) on the target
  exported with its hidden state;
* ``ort.mtp.fp16``: the same with the main model's logits cast to float16 (on a CPU the MTP
  generator reads no float32 logits: ``ort.mtp`` raises on every call), and
  ``ort.mtp.fp16.top_k1`` at top-k 1, which the MTP generator samples from the whole softmax;
* ``ort.plain`` and ``ort.plain.fp16``: the two main models without speculation: the controls,
  and the twins of the engines above.

Per sample, ``GeneratorParams.set_search_options(do_sample=True, temperature=T, top_k=K,
top_p=P, random_seed=seed, max_length=len(prompt) + M)`` and a fresh generator run until it is
done: the engine draws everything. Each sample asks for exactly the audit's horizon as its
``max_length``: a speculative run capped shorter is not a prefix of a longer one of the same seed
(the draft length is cut at the cap, and the draws with it), so a sample is a function of (seed,
M), as the contract asks. ``target_law`` is the exact law of the same weights in float64 numpy
(properties/servers/gguf_models.py; rounded to float16 for the fp16 engines) under
:meth:`Sampling.law`: a path the engine cannot share. The controls passing is what says that this is
the law the graphs sample from.

The end of sequence (id 0) is the model's and cannot be turned off (genai has no ``ignore_eos``;
``min_length`` would mask it, changing the law), so the settings name it: ``Generator`` stops on a
sampled end of sequence without appending it (``MtpGenerator`` appends it), and a sample shorter
than M with no end of sequence in it gets one appended here; the audit pads it, the end being
absorbing in the law.

The engine's own counters, as they are: ``draft_tokens_proposed`` and ``draft_tokens_accepted``
(``get_speculative_stats()``, ``MtpGenerator.get_stats()``) and ``target_forward_passes``.

Where the library's own call raises while generating (``ort.mtp``), the worker answers so apart
and :class:`EngineRaised` is raised here: the engine's answer, which the audit reports as its
exception; any other failure of the worker is the tier's
:class:`~specproof.properties.servers.ort_env.ORTGenAIError`, an
error of the audit's side. The settings registered are T 1 and T 0.7 with top-k 8 (and top-k 1
and a repetition penalty where a generator takes them); top-p (:data:`TOP_P`) is audited apart at
a fixed size, since over a whole plan's contexts some law's cumulative mass comes within float32's
reach of any top-p.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

from specproof.properties.engine.adapters.tier import TierEngine
from specproof.properties.engine.contract import EngineSpec, Generation, Sampling
from specproof.properties.engine.knobs import KNOBS
from specproof.properties.servers import gguf_models as gm
from specproof.properties.servers import ort_env, venvs
from specproof.reference.errors import BadParameterError, SpecproofError

VOCAB = len(gm.VOCAB)
PROMPTS = ((1, 2, 3, 4),)
#: a prompt that repeats itself, so that 2-gram lookup proposes drafts from the first step on
LOOKUP_PROMPTS = ((4, 13, 6, 4, 13),)
#: M: the first token comes from the prompt's forward, then room for a whole step of 3 drafts and
#: its bonus token
TOKENS = 6
#: the settings audited: temperature 1, and 0.7 with top-k 8; the end of sequence is the model's
#: (module docstring). Top-p is audited apart, at a fixed size (:data:`TOP_P`): over a whole plan's
#: contexts some law has a cumulative mass within float32's reach of any top-p, where the law an
#: engine computing in float32 keeps is not pinned down, and the audit refuses to hold it to one
SETTINGS = (Sampling(1.0, eos=gm.EOS_ID), Sampling(0.7, top_k=8, eos=gm.EOS_ID))
#: top-p with top-k at T 0.7, audited at a fixed number of samples (tests/test_ort_genai.py)
TOP_P = Sampling(0.7, top_k=8, top_p=0.9, eos=gm.EOS_ID)
#: top-k 1 while sampling: the argmax, a point mass (the Generator decodes greedily)
TOP1 = Sampling(1.0, top_k=1, eos=gm.EOS_ID)
#: a repetition penalty over the prompt and the output (the Generator's and MtpGenerator's rows
#: put through it at every drafted position)
PENALTY = Sampling(1.0, repetition_penalty=1.5, eos=gm.EOS_ID)
#: one worker per mode, kept for the process; close them when done (:func:`close_workers`)
_WORKERS = venvs.WorkerPool(ort_env.Worker)
_worker = _WORKERS.get
close_workers = _WORKERS.close


@functools.lru_cache(maxsize=1)
def available() -> tuple[bool, str]:
    """Whether the environment is there (asked once a process: listing the engines asks for each)."""
    return ort_env.installed()


def ended(tokens: Sequence[int], m: int) -> tuple[int, ...]:
    """A sample as the audit reads it: ``tokens`` as the generator returned them, with the end of
    sequence appended where it stopped short of ``m`` tokens without it (``Generator`` does not
    append a sampled end of sequence)."""
    out = tuple(int(x) for x in tokens)
    if len(out) < m and gm.EOS_ID not in out:
        out += (gm.EOS_ID,)
    return out


class EngineRaised(SpecproofError, RuntimeError):
    """ONNX Runtime GenAI's own call raised while generating (the worker is fine): the engine's
    behaviour, which the audit reports as an exception of the engine (``contract_violation``), not
    as a fault of its own side."""


class ORTGenAIEngine(TierEngine):
    """One sampling setting of one mode (module docstring)."""

    capabilities = frozenset(
        {
            "generate_many",
            "batch",
            "counters",
            "steps",
            "twin",
            "describe",
            "draft_tokens",
            "eos",
            "prompt_len",
        }
    )
    vocab = VOCAB
    batch = 64
    eos_id = gm.EOS_ID
    seed_modulus = 2**31

    def __init__(self, mode: str, sampling: Sampling, twin: ORTGenAIEngine | None = None) -> None:
        if mode not in ort_env.MODES:
            raise BadParameterError("mode", f"{mode!r} is not one of {', '.join(ort_env.MODES)}")
        self.mode, self.sampling, self.twin = mode, sampling, twin
        self.knobs = KNOBS["onnxruntime_genai"].of(sampling)  # refuses what its search options cannot say
        if sampling.repetition_scope != "all":
            raise BadParameterError(
                "repetition_scope", "ONNX Runtime GenAI's repetition penalty counts the prompt's tokens too"
            )
        self.half = mode in ort_env.HALF
        self.draft_tokens: int | None = ort_env.DRAFT_TOKENS
        self.last_counters: dict[str, int] | None = {}
        #: target forwards of the last generate (None: plain decoding counts none)
        self.last_forwards: int | None = 0
        self.calls = 0

    def _sampling(self) -> dict[str, Any]:
        k = dict(self.knobs)
        k.pop("min_p", None)
        theta = self.sampling.repetition_penalty
        if theta not in (None, 1.0):
            k["repetition_penalty"] = theta
        return k

    def generate_many(
        self, prompt_ids: list[int], max_new_tokens: int, seeds: Sequence[int], report: bool = False
    ) -> list[Generation]:
        answer = _worker(self.mode).request(self.ask(prompt_ids, max_new_tokens, seeds, self._sampling()))
        if "raised" in answer:  # the engine's own exception, as a user's script would get it
            raise EngineRaised(f"onnxruntime-genai ({self.mode}) raised {answer['raised']}")
        self.calls += len(seeds)
        return [
            Generation(ended(s["tokens"], max_new_tokens), s["drafted"], s["accepted"], s["forwards"])
            for s in answer["samples"]
        ]

    def note(self, g: Generation) -> None:
        if "counters" in self.capabilities:  # plain decoding has none to offer
            self.last_counters = {"drafted": g.drafted or 0, "accepted": g.accepted or 0}
            self.last_forwards = g.forwards

    def target_law(self, context: Sequence[int], prompt_len: int | None = None) -> list[float]:
        z = ort_env.target_law_logits(context, self.half)
        return list(self.sampling.law(list(z), list(context), prompt_len))

    def describe(self) -> dict[str, Any]:
        return {
            "mode": self.mode,
            "onnxruntime_genai": _WORKERS.identity(self.mode, "onnxruntime_genai"),
            "commit": _WORKERS.identity(self.mode, "commit"),
            "max_draft_tokens": self.draft_tokens,
            "ngram_size": ort_env.NGRAM_SIZE if self.mode == "ngram" else None,
            "logits": "float16" if self.half else "float32",
            "search_options": self._sampling(),
            "max_length": "prompt + M, every sample",
            "samples_drawn": self.calls,
        }


class PlainEngine(ORTGenAIEngine):
    """A main model without speculation: no counters, no draft length, no twin."""

    capabilities = ORTGenAIEngine.capabilities - {"twin", "draft_tokens", "steps", "counters"}

    def __init__(self, mode: str, sampling: Sampling) -> None:
        super().__init__(mode, sampling)
        self.draft_tokens = None
        self.last_counters = None
        self.last_forwards = None


#: each engine's mode, the mode of its twin (None: it is a control), its prompts and settings
ENGINE_MODES: dict[str, tuple[str, str | None, tuple[tuple[int, ...], ...], tuple[Sampling, ...]]] = {
    "ort.draft": ("draft", "plain", PROMPTS, (*SETTINGS, TOP1, PENALTY)),
    "ort.ngram": ("ngram", "plain", LOOKUP_PROMPTS, (*SETTINGS, TOP1, PENALTY)),
    "ort.mtp": ("mtp", "plain", PROMPTS, SETTINGS),
    "ort.mtp.fp16": ("mtp16", "plain16", PROMPTS, (*SETTINGS, PENALTY)),
    "ort.mtp.fp16.top_k1": ("mtp16", "plain16", PROMPTS, (TOP1,)),
    "ort.plain": ("plain", None, PROMPTS, (*SETTINGS, TOP1, PENALTY)),
    "ort.plain.fp16": ("plain16", None, PROMPTS, (*SETTINGS, TOP1, PENALTY)),
}


def build(name: str, sampling: Sampling) -> ORTGenAIEngine:
    mode, twin = ENGINE_MODES[name][:2]
    if twin is None:
        return PlainEngine(mode, sampling)
    return ORTGenAIEngine(mode, sampling, PlainEngine(twin, sampling))


DOCS = {
    "ort.draft": (
        "pass",
        "onnxruntime-genai 0.18.0 Generator with the tiny draft model (model.draft, max_draft_tokens 3): "
        "accept with min(1, p/q), correction from (p - q)+; top-k 1 decodes greedily",
    ),
    "ort.ngram": (
        "pass",
        "onnxruntime-genai 0.18.0 Generator with n-gram lookup (ngram_size 2, 3 tokens): sample and match",
    ),
    "ort.mtp": (
        "contract_violation",
        "onnxruntime-genai 0.18.0 MtpGenerator on the float32 main model: every call raises (its host "
        "path casts the main logits to float32, which the CPU cast refuses as a cast to the same type)",
    ),
    "ort.mtp.fp16": (
        "pass",
        "onnxruntime-genai 0.18.0 MtpGenerator with a one-layer MTP head (3 tokens a step), the main "
        "model's logits in float16: accept with min(1, p/q), correction from (p - q)+",
    ),
    "ort.mtp.fp16.top_k1": (
        "lossy",
        "onnxruntime-genai 0.18.0 MtpGenerator at top_k 1: it samples whenever do_sample and the "
        "temperature is above 0, and top_k 1 cuts nothing there, so it samples the whole softmax where "
        "the Generator decodes greedily",
    ),
    "ort.plain": ("pass", "onnxruntime-genai 0.18.0 Generator without speculation: the control"),
    "ort.plain.fp16": (
        "pass",
        "onnxruntime-genai 0.18.0 Generator without speculation on the main model with float16 logits: "
        "the control of the MTP engines",
    ),
}


def engines() -> list[EngineSpec]:
    return [
        EngineSpec(
            name,
            "ort",
            doc,
            functools.partial(build, name),
            VOCAB,
            ENGINE_MODES[name][2],
            ENGINE_MODES[name][3],
            expect=expect,
            tokens=TOKENS,
            available=available,
            notes="its own environment: specproof env install ort (onnxruntime-genai 0.18.0, about 150 MB)",
            close=close_workers,  # its workers stopped when its audit ends
        )
        for name, (expect, doc) in DOCS.items()
    ]
