"""mistral.rs (``mistralrs`` 0.6.0) as an engine: draft-model speculation as a user runs it.

The runners live in mistral.rs's own environment, in a worker process each
(properties/servers/mistralrs_env.py, ``specproof mistralrs install``), on the project's tiny
llama pair in float32 (V = 16, end of sequence 0): ``mistralrs.draft``
(the tiny draft model, ``speculative_gamma`` 3) and ``mistralrs.plain`` (no speculation: the
control, and the draft engine's twin). ``target_law`` is the exact law of the same weights in
numpy (properties/servers/gguf_models.py) under :meth:`Sampling.law`; the control passing is what
says that this is the law the runner samples from. The end of sequence cannot be banned
(mistral.rs 0.6.0 accepts ``logit_bias`` and does not apply it: tests/test_mistralrs.py), so the
settings name it (``eos`` 0): a sample that ends on it is padded with it, the end absorbing in the
law.

Two things the adapter does for the contract, both said in every report:

* **No per-request seed.** mistral.rs draws from its runner's own generator (on a CPU it refuses
  to seed it), so the adapter keeps the first output drawn for each (prompt, M, seed) and returns
  it for every later call with that seed (docs/engine-audit.md, "An engine with no per-request
  seed"). The audit's seed checks then test this cache, not the engine; samples of different
  seeds are independent draws of the runner, which is all the law test needs.
* **max_tokens + 1.** mistral.rs 0.6.0 answers a completion request for ``max_tokens`` = k with
  k + 1 tokens (plain and speculative alike; tests/test_mistralrs.py checks it for k = 1, 2, 3,
  6), so the adapter asks for M - 1 to get the M the audit asks for.

Its answers carry no draft or acceptance counters, so speculation is not observable from them.

What a release was seen to do is kept per release (:data:`DRAFT_VERDICT`, :data:`EXTRA_TOKENS`,
:data:`LOGIT_BIAS_APPLIED`, :data:`PANICS_ON_LENGTH_CHANGE`, each measured on 0.6.0) and read for
the pinned one (``mistralrs_env.VERSION``) by :func:`seen_on`: under another pin nothing of 0.6.0
is assumed (the draft engine declares no verdict, and the adapter refuses to guess the length).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any, TypeVar

from specproof.properties.engine.adapters.tier import TierEngine
from specproof.properties.engine.contract import EngineSpec, Generation, Sampling
from specproof.properties.engine.knobs import KNOBS
from specproof.properties.servers import gguf_models as gm
from specproof.properties.servers import mistralrs_env, venvs
from specproof.reference.errors import UsageError

T = TypeVar("T")

VOCAB = len(gm.VOCAB)
PROMPTS = ((1, 2),)
#: M: room for the first token and a whole step of 3 drafts with its bonus token
TOKENS = 6
#: the settings audited: the end of sequence is the model's and cannot be banned
SETTINGS = (Sampling(1.0, eos=gm.EOS_ID), Sampling(0.7, eos=gm.EOS_ID))
#: one worker per runner, kept while an audit runs; an idle mistral.rs runner spins a core, so
#: every engine's audit closes them when it ends (its spec's ``close``: :func:`close_workers`)
_WORKERS = venvs.WorkerPool(mistralrs_env.Worker)
_worker = _WORKERS.get
close_workers = _WORKERS.close


def available() -> tuple[bool, str]:
    return mistralrs_env.usable()


#: What each mistral.rs release was seen to do, by release (tests/test_mistralrs.py checks the
#: pinned one's entries; a new pin needs its own, measured). The draft-model runner's verdict:
#: 0.6.0 replaces sampling by greedy decoding (contract_violation [ignores_seed])
DRAFT_VERDICT = {"0.6.0": "contract_violation"}
#: tokens a completion request for max_tokens = k answers beyond k (plain and speculative alike)
EXTRA_TOKENS = {"0.6.0": 1}
#: whether a request's logit_bias is applied (0.6.0 accepts it and does not apply it)
LOGIT_BIAS_APPLIED = {"0.6.0": False}
#: whether the speculative runner panics when the asked length changes between requests
PANICS_ON_LENGTH_CHANGE = {"0.6.0": True}


def seen_on(table: dict[str, T], what: str, version: str = mistralrs_env.VERSION) -> T:
    """``table``'s entry for ``version`` (the pinned release); a release it has no entry for is
    refused (:class:`~.mistralrs_env.MistralRSError`, naming ``what`` and the releases it has),
    never given another release's behaviour."""
    if version not in table:
        raise mistralrs_env.MistralRSError(
            f"{what}: recorded for mistralrs {', '.join(table)} only, not for {version}: measure it "
            "(tests/test_mistralrs.py) and add the release to the adapter's table"
        )
    return table[version]


def max_tokens_for(m: int) -> int:
    """What to ask the pinned mistral.rs for to get ``m`` tokens (0.6.0 answers max_tokens + 1:
    :data:`EXTRA_TOKENS`)."""
    extra = seen_on(EXTRA_TOKENS, "tokens answered beyond max_tokens")
    if m < 1 + extra:
        raise UsageError(
            f"tokens: mistral.rs {mistralrs_env.VERSION} answers at least {1 + extra} tokens "
            f"(max_tokens + {extra}), M = {m} asked"
        )
    return m - extra


class MistralRSEngine(TierEngine):
    """One sampling setting of one runner (module docstring)."""

    capabilities = frozenset({"generate_many", "batch", "twin", "describe", "draft_tokens", "eos"})
    vocab = VOCAB
    batch = 32
    eos_id = gm.EOS_ID

    def __init__(self, mode: str, sampling: Sampling, twin: MistralRSEngine | None = None) -> None:
        self.mode, self.sampling, self.twin = mode, sampling, twin
        self.knobs = KNOBS["mistralrs"].of(sampling)  # refuses what its request cannot say
        self.draft_tokens = mistralrs_env.DRAFT_TOKENS if mode != "plain" else None
        self._drawn: dict[tuple[tuple[int, ...], int, int], tuple[int, ...]] = {}
        self.calls = 0

    def generate_many(
        self, prompt_ids: list[int], max_new_tokens: int, seeds: Sequence[int], report: bool = False
    ) -> list[Generation]:
        key = tuple(int(x) for x in prompt_ids)
        new = list(dict.fromkeys(s for s in seeds if (key, max_new_tokens, s) not in self._drawn))
        if new:
            answer = _worker(self.mode).request(
                {
                    "op": "generate",
                    "prompt": list(key),
                    "tokens": max_tokens_for(max_new_tokens),
                    "n": len(new),
                    "sampling": self.knobs,
                }
            )
            for s, got in zip(new, answer["samples"]):
                self._drawn[(key, max_new_tokens, s)] = tuple(got["tokens"])
            self.calls += len(new)
        return [Generation(self._drawn[(key, max_new_tokens, s)]) for s in seeds]

    def describe(self) -> dict[str, Any]:
        return {
            "runner": self.mode,
            "mistralrs": _WORKERS.identity(self.mode, "mistralrs"),
            "speculative_gamma": self.draft_tokens,
            "dtype": "f32",
            "request": self.knobs,
            "seeds": "none per request: the first output drawn for each seed is kept and returned again",
            "max_tokens": f"M - {EXTRA_TOKENS.get(mistralrs_env.VERSION)} asked: mistral.rs "
            f"{mistralrs_env.VERSION} answers max_tokens + {EXTRA_TOKENS.get(mistralrs_env.VERSION)} tokens",
            "samples_drawn": self.calls,
        }


class PlainEngine(MistralRSEngine):
    """The runner without speculation: no draft length, no twin."""

    capabilities = MistralRSEngine.capabilities - {"twin", "draft_tokens"}


def build(mode: str, sampling: Sampling) -> MistralRSEngine:
    if mode == "plain":
        return PlainEngine("plain", sampling)
    return MistralRSEngine(mode, sampling, PlainEngine("plain", sampling))


DOCS = {
    "draft": (
        DRAFT_VERDICT.get(mistralrs_env.VERSION),  # no claim for a release not measured
        f"mistral.rs {mistralrs_env.VERSION} Runner with the tiny draft model, speculative_gamma 3 (on "
        "0.6.0 every sample is the target's greedy path whatever the temperature: sampling replaced by "
        "greedy decoding)",
    ),
    "plain": ("pass", f"mistral.rs {mistralrs_env.VERSION} Runner without speculation: the control"),
}


def engines() -> list[EngineSpec]:
    return [
        EngineSpec(
            f"mistralrs.{mode}",
            "mistralrs",
            doc,
            functools.partial(build, mode),
            VOCAB,
            PROMPTS,
            SETTINGS,
            expect=expect,
            tokens=TOKENS,
            available=available,
            notes="its own environment: specproof mistralrs install (about 80 MB); no per-request seed "
            "(the first draw per seed is kept)",
            close=close_workers,  # its workers stopped when its audit ends
        )
        for mode, (expect, doc) in DOCS.items()
    ]
