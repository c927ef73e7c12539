"""llama.cpp's ``llama-speculative`` example as engines: multi-draft stochastic verification.

Each engine runs the pinned llama.cpp build's ``llama-speculative`` (llama-cpp-python 0.3.36's
vendored tree, commit 0c1e57098; :mod:`specproof.properties.servers.llamacpp`, built once and
cached outside the clone) on the project's tiny GGUF target and draft
(:mod:`specproof.properties.servers.gguf_models`, seed 0: 16 tokens, one per letter, EOS id 0)::

    llama-speculative -m target.gguf -md draft.gguf -p <prompt as text> -n M --seed S
        -np N --spec-draft-n-max K --spec-draft-p-split P --ignore-eos
        --samplers temperature --temp T --top-k 0 --top-p 1 --min-p 0   (-c 256 -t 1 -fa off)

The prompt's ids are written as text (:func:`~specproof.properties.servers.gguf_models.to_text`;
with this vocabulary text and ids map one to one), the printed text is read back as ids and the
first M generated ids are returned (the example overshoots ``-n``: it stops once more than n
tokens were emitted). Nothing is drawn by the adapter: ``--seed`` seeds the target's sampler,
every branch's draft sampler and the verifier's own ``std::default_random_engine``; the same seed
gives byte-identical output. With T > 0 every token the example emits is drawn by that
``std::default_random_engine`` (``minstd_rand0``: a draft is accepted by its uniform, a token is
sampled from the target or residual law by its ``discrete_distribution``; the samplers' own draws
are discarded), whose state is the seed modulo ``2^31 - 1``, 0 counting as 1: the audit's 62-bit
seeds are therefore folded into ``[1, 2^31 - 2]``, where distinct seeds give distinct streams.

**EOS.** The example stops at EOS, and the engine contract needs exactly M tokens, so EOS is
banned on both sides, consistently: ``--ignore-eos`` (a logit bias of -inf on every end-of-
generation id, in the target's sampler and, cloned from it, the drafts') in ``generate``, and
``target_law`` is the target's law with EOS removed and renormalized. The audit then tests the
law llama.cpp is asked to sample, which is the target law conditioned on "not EOS".

**Sampling.** The neutral chain ``temperature`` alone (top-k 0, top-p 1, min-p 0): the sampled law
is ``softmax(logits / T)`` (llama-api notes: matches the numpy law to 4e-8 through the server;
the same ``common_sampler`` code here). Top-k, top-p and min-p are refused (:class:`BadParameterError`):
the example's residual subtracts the draft's candidate list from the target's entry by entry
after sorting both by id, which assumes the two lists hold the same ids, false once a truncating
sampler cuts them differently. Temperature 0 is greedy (the example's greedy verification).

``target_law(context)`` is the engine's own non-speculative law: the same weights (the GGUF file is
written from exactly these float32 arrays) run by the float64 numpy forward pass
(:func:`~specproof.properties.servers.gguf_models.next_token_law`), which llama.cpp's own
forward matches to 8e-8 per token on these models (``-fa off``, f32 KV cache, as here;
tests/test_llamacpp.py), then the same processing as the engine's sampler: temperature, EOS
removed. ``tests/test_llamacpp_engines.py`` cross-checks it against the example itself: its first
generated token is sampled from the target's processed law with no draft involved, and its
frequencies fit ``target_law`` of the prompt.

**What the example does** (``examples/speculative/speculative.cpp``, read at 0c1e57098): each
branch's draft token is the draft's *top candidate* after the chain (the draft sampler's own
sample is discarded); a branch splits at a depth when its f-th candidate (f = 1..7) has
probability above ``p_split`` and a free branch remains, the new branch taking that candidate;
drafting stops once K tokens are in the target batch. Verification at each depth picks a random
active branch, accepts its token with probability ``min(1, p(x) / q(x))`` with p and q the
processed target and draft laws, and on rejection replaces p by ``norm((p - q)+)`` and tries
the next branch; all rejected: a token from the residual. That is the rule for drafts *drawn
from q*, applied to drafts that are q's argmax, so the engine is lossy (proofs_notes/thirdparty.md,
"llama.cpp's llama-speculative"; the reference reproduction:
:data:`specproof.properties.oracle.findings.LLAMA_SPECULATIVE`). Greedy (T = 0) verification
compares the target's argmax with the drafts: lossless.

Counters per call (over all the tokens the run emitted, which can be a few more than M):
``last_counters`` = ``{"drafted": n_drafted, "accepted": n_accept}`` from the example's stderr
(``n_drafted`` counts draft depths, once per depth however many branches drafted there) and
``last_forwards`` = ``n_predict - n_accept``, the target forwards whose logits were verified (one
per round, the prompt's included).
"""

from __future__ import annotations

import atexit
import functools
import importlib.util
import shutil
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from specproof.properties.engine.contract import GREEDY, T07, T1, EngineSpec, Sampling
from specproof.properties.servers import gguf_models as gm
from specproof.properties.servers import llamacpp as lc
from specproof.reference.errors import BadParameterError, SpecproofInputError

VOCAB = len(gm.VOCAB)
MODEL_SEED = 0
#: "abc" (the notes' witness prompt) and "eain"
PROMPTS: tuple[tuple[int, ...], ...] = ((1, 2, 3), (5, 1, 9, 14))
N_DRAFT = 4  # --spec-draft-n-max: the depth of a chain; the number of tree tokens with branches
NEUTRAL = ("--samplers", "temperature", "--top-k", "0", "--top-p", "1", "--min-p", "0")
#: reruns of a run whose output the example's logging thread lost (same seed, same output): 18% of
#: runs lost it at a load average of 17 on 2 cores, where run_speculative's default of 5 failed
#: about one call in 5,000
ATTEMPTS = 30
_SEED_MOD = 2**31 - 2  # minstd_rand0 keeps the seed modulo 2^31 - 1 (0 as 1); see the docstring


def fold_seed(seed: int) -> int:
    """The ``--seed`` of an audit seed: in ``[1, 2^31 - 2]``, one minstd_rand0 stream per value."""
    return int(seed) % _SEED_MOD + 1


def available() -> tuple[bool, str]:
    """Whether the pinned build is cached and the gguf package is there (builds nothing)."""
    if importlib.util.find_spec("gguf") is None:
        return False, f"the tiny GGUF models need the gguf package (pip install gguf=={gm.GGUF_VERSION})"
    folder = lc.build_dir()
    if not lc.is_built(folder):
        return False, (
            f"the pinned llama.cpp build ({lc.VERSION}, commit {lc.LLAMA_CPP_COMMIT}) is not cached in "
            f"{folder}: build it once with `specproof llamacpp build` "
            "(11 to 15 min on 2 cores)"
        )
    return True, f"llama.cpp {lc.LLAMA_CPP_COMMIT} (llama-cpp-python {lc.VERSION})"


@functools.cache
def models() -> dict[str, Any]:
    """The tiny target and draft GGUF files of :data:`MODEL_SEED`, written once per process into a
    temporary folder removed at exit (80 KB each)."""
    folder = Path(tempfile.mkdtemp(prefix="specproof-llamacpp-"))
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    return gm.write_models(folder, seed=MODEL_SEED)


@functools.cache
def target_weights() -> dict[str, np.ndarray]:
    return gm.target_weights(MODEL_SEED)


def target_law(sampling: Sampling, context: Sequence[int]) -> list[float]:
    """The tiny target's next-token law after ``context`` as the engine samples it: temperature
    (0: one-hot at the argmax), EOS removed and renormalized (``--ignore-eos``); float64."""
    ctx = [int(x) for x in context]
    if not ctx:
        raise SpecproofInputError("context", "must hold at least one token")
    z = gm.logits(target_weights(), ctx)[-1]
    z[gm.EOS_ID] = -np.inf
    if sampling.greedy:
        out = np.zeros(VOCAB)
        out[int(np.argmax(z))] = 1.0
    else:
        w = np.exp((z - z.max()) / sampling.temperature)
        out = w / w.sum()
    return [float(v) for v in out]


class SpeculativeEngine:
    """``llama-speculative`` under the engine contract (module docstring)."""

    def __init__(
        self, sampling: Sampling, parallel: int = 1, p_split: float = 0.1, n_draft: int = N_DRAFT
    ) -> None:
        if sampling.top_k is not None or (sampling.top_p or 1.0) < 1 or getattr(sampling, "min_p", None):
            raise BadParameterError(
                "sampling",
                "llama-speculative is audited with the temperature sampler alone (its residual assumes "
                "the target's and draft's candidate lists hold the same ids, which truncation breaks)",
            )
        self.sampling, self.parallel, self.p_split, self.n_draft = sampling, parallel, p_split, n_draft
        self.temperature = sampling.temperature
        self.vocab = VOCAB
        self.binaries = lc.ensure_built(progress=lambda m: None)
        self.files = models()
        self.last_forwards: int | None = None
        self.last_counters: dict[str, int] = {}

    def args(self, max_new_tokens: int, seed: int) -> list[str]:
        """The example's options after ``-m -md -p`` (and ``-c 256 -t 1 -fa off``)."""
        return [
            "-n", str(max_new_tokens),
            "--seed", str(fold_seed(seed)),
            "-np", str(self.parallel),
            "--spec-draft-n-max", str(self.n_draft),
            "--spec-draft-p-split", f"{self.p_split:g}",
            "--ignore-eos",
            "--temp", f"{self.sampling.temperature:g}",
            *NEUTRAL,
        ]  # fmt: skip

    def generate(self, prompt_ids: list[int], max_new_tokens: int, seed: int) -> list[int]:
        prompt = [int(x) for x in prompt_ids]
        run = lc.run_speculative(
            self.binaries,
            self.files["target"],
            self.files["draft"],
            gm.to_text(prompt),
            self.args(max_new_tokens, seed),
            attempts=ATTEMPTS,
        )
        ids = gm.detokenize(run.text)
        if ids[: len(prompt)] != prompt:
            raise lc.LlamaRunError(f"llama-speculative echoed {ids[: len(prompt)]} for the prompt {prompt}")
        new = ids[len(prompt) :]
        if len(new) < max_new_tokens:
            raise lc.LlamaRunError(
                f"llama-speculative emitted {len(new)} tokens, {max_new_tokens} asked: {new}"
            )
        s = run.stats
        self.last_counters = {"drafted": s.get("n_drafted", 0), "accepted": s.get("n_accept", 0)}
        self.last_forwards = s["n_predict"] - s["n_accept"] if "n_predict" in s and "n_accept" in s else None
        return new[:max_new_tokens]

    def target_law(self, context: Sequence[int]) -> list[float]:
        return target_law(self.sampling, context)

    def describe(self) -> dict[str, Any]:
        return {
            "program": "llama-speculative",
            "llama_cpp_commit": lc.LLAMA_CPP_COMMIT,
            "llama_cpp_python": lc.VERSION,
            "args": self.args(0, 0)[4:],
            "models": f"specproof tiny GGUF target and draft, seed {MODEL_SEED}",
        }


def _spec(name: str, doc: str, samplings: tuple[Sampling, ...], expect: str, **options: Any) -> EngineSpec:
    return EngineSpec(
        name,
        "llamacpp",
        doc,
        functools.partial(SpeculativeEngine, **options),
        VOCAB,
        PROMPTS,
        samplings,
        expect=expect,
        available=available,
        notes=f"llama.cpp {lc.LLAMA_CPP_COMMIT}; EOS banned (--ignore-eos) in generate and target_law",
    )


def engines() -> list[EngineSpec]:
    return [
        _spec(
            "llamacpp.speculative.np1",
            "llama-speculative -np 1 (one draft branch, depth 4): drafts are the draft model's argmax, "
            "verified as if sampled (accept min(1, p/q), residual (p - q)+)",
            (T1, T07),
            "lossy",
            parallel=1,
        ),
        _spec(
            "llamacpp.speculative.np3",
            "llama-speculative -np 3 --spec-draft-p-split 0.1 (up to three branches, 4 tree tokens): "
            "the top candidates of q, verified in random order with min(1, p/q) against q itself",
            (T1, T07),
            "lossy",
            parallel=3,
            p_split=0.1,
        ),
        _spec(
            "llamacpp.speculative.np1.greedy",
            "llama-speculative -np 1 --temp 0: greedy verification "
            "(the target's argmax compared with the drafts)",
            (GREEDY,),
            "pass",
            parallel=1,
        ),
    ]
