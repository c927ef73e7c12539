"""A narrow language model at any vocabulary, decoded by token-level speculative sampling: the
engine the audit's cost is measured on at real vocabularies (``specproof bench --section
tokens``, tests/test_real_vocab.py).

The model: each position's hidden state is ``tanh`` of a decayed sum of the embeddings of the
last :data:`WINDOW` tokens (width ``d``, 32 by default), its logits ``h W + b`` over ``V`` ids,
scaled so that its laws are about as sharp as a language model's (entropy about 4 nats at
V = 4,096, 7 at V = 151,936; ``scale`` 32 makes them as sharp as a chat model's, about 2).
A forward at one position costs what a real model's output layer costs per unit of width: a
``d x V`` product and a softmax over ``V``. The draft model is the same network with its output
matrix perturbed. Decoding drafts ``k`` tokens a step from the draft, verifies them in one
forward of the target, keeps draft ``i`` with probability ``min(1, p_i / q_i)``, else draws from
``norm(max(p_i - q_i, 0))``, and adds a bonus token after ``k`` accepted (Leviathan et al.,
Chen et al.; proofs_notes/token.md): lossless, so the audit must pass it.

It offers what an engine written for the audit offers: laws along a path in one forward
(``target_laws_along``, left out with ``teacher_forcing=False`` so that the audit reads one
law a position), the draft's laws, its steps and counters.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

#: tokens a hidden state looks back over, each weighted half the one after it
WINDOW = 4
_DECAY = 0.5 ** np.arange(WINDOW)  # the last token first


def _softmax(z: np.ndarray) -> np.ndarray:
    z = z - z.max(axis=-1, keepdims=True)
    np.exp(z, out=z)
    z /= z.sum(axis=-1, keepdims=True)
    return z


class NarrowLM:
    """The model (module docstring): ``law(context)`` and ``laws_along(context, n)``."""

    def __init__(self, vocab: int, width: int = 32, seed: int = 0, scale: float = 16.0) -> None:
        rng = np.random.default_rng([seed, vocab, width])
        self.vocab, self.width = vocab, width
        self.embed = rng.standard_normal((vocab, width)) / np.sqrt(width)
        self.out = rng.standard_normal((width, vocab)) * (scale / np.sqrt(width))
        self.bias = rng.standard_normal(vocab) * 0.5

    def perturbed(self, noise: float, seed: int) -> NarrowLM:
        """The same network with its output matrix perturbed (a draft model)."""
        rng = np.random.default_rng([seed, self.vocab])
        other = NarrowLM.__new__(NarrowLM)
        other.__dict__.update(self.__dict__)
        other.out = self.out + noise * rng.standard_normal(self.out.shape) * self.out.std()
        return other

    def hidden(self, context: Sequence[int], positions: int) -> np.ndarray:
        """The hidden states after the last ``positions`` prefixes of ``context`` (each at least one
        token long): ``[positions, width]``."""
        ids = np.asarray(context[-(positions + WINDOW - 1) :], dtype=np.int64)  # what they look at
        n = len(ids)
        emb = self.embed[ids]
        h = np.zeros((positions, self.width))
        for j in range(WINDOW):
            ends = np.arange(n - positions, n) - j  # the token j back from each prefix's end
            ok = ends >= 0
            h[ok] += _DECAY[j] * emb[ends[ok]]
        return np.tanh(h)

    def logits(self, context: Sequence[int], positions: int = 1) -> np.ndarray:
        return self.hidden(context, positions) @ self.out + self.bias


class NarrowPerPosition:
    """Token-level speculative sampling with ``k`` drafts a step on a :class:`NarrowLM` pair, at
    temperature ``temperature`` on both (module docstring), without ``target_laws_along``: the
    audit reads one law a position."""

    capabilities = frozenset({"counters", "steps", "sequential", "draft_law"})
    sequential_verification = True

    def __init__(self, target: NarrowLM, draft: NarrowLM, k: int = 4, temperature: float = 1.0) -> None:
        self.target, self.draft, self.k, self.temperature = target, draft, k, temperature
        self.vocab = target.vocab
        self.last_steps: list[int] = []
        self.last_counters: dict[str, int] = {}

    def _laws(self, lm: NarrowLM, context: Sequence[int], positions: int = 1) -> np.ndarray:
        return _softmax(lm.logits(context, positions) / self.temperature)

    def target_law(self, context: Sequence[int]) -> np.ndarray:
        return self._laws(self.target, context)[0]

    def draft_law(self, context: Sequence[int]) -> np.ndarray:
        return self._laws(self.draft, context)[0]

    def draft_laws_along(self, prompt_ids: list[int], tokens: list[int]) -> np.ndarray:
        seq = list(prompt_ids) + list(tokens)
        return self._laws(self.draft, seq[: len(seq) - 1] if tokens else seq, len(tokens))

    #: an end of sequence the engine stops on (None: it never stops early); an engine that has one
    #: declares the ``eos`` capability
    eos_id: int | None = None

    def verify_laws(self, context: list[int], drafts: int) -> np.ndarray:
        """The target's laws after the last ``drafts + 1`` prefixes of ``context`` (the committed
        tokens and the step's drafts): one forward."""
        return self._laws(self.target, context, drafts + 1)

    def stops_drafting(self, done: list[int], x: int) -> bool:
        """Whether a drafted ``x`` after the output ``done`` (the step's drafts included) ends the
        step's drafting, dropped (never, here: an end of sequence is drafted and verified like any
        token)."""
        return False

    def end(self, out: list[int]) -> int | None:
        """How many tokens of the output ``out`` it keeps, where it has ended (its first end of
        sequence); None where it has not."""
        if self.eos_id is not None and self.eos_id in out:
            return out.index(self.eos_id) + 1
        return None

    def acceptance(self, p: np.ndarray, q: np.ndarray, x: int) -> float:
        """The probability a draft ``x`` is kept: ``min(1, p(x) / q(x))``."""
        return min(1.0, float(p[x] / q[x]))

    def residual(self, p: np.ndarray, q: np.ndarray) -> np.ndarray:
        """The law a rejected draft is replaced from: ``norm(max(p - q, 0))``."""
        r = np.maximum(p - q, 0.0)
        return r / r.sum()

    @staticmethod
    def _draw(rng: np.random.Generator, p: np.ndarray) -> int:
        c = np.cumsum(p)
        return int(min(np.searchsorted(c, rng.random() * c[-1], side="right"), len(p) - 1))

    def streams(self, seed: int) -> tuple[np.random.Generator, np.random.Generator]:
        """The drafter's and the verifier's random streams of one generation: two of the seed's."""
        return np.random.default_rng([seed, 1]), np.random.default_rng([seed, 2])

    def draft_stream(self, seed: int, stream: np.random.Generator, step: int) -> np.random.Generator:
        """The drafter's stream at step ``step`` (0-based): the generation's own, continued."""
        return stream

    def verify_stream(self, seed: int, stream: np.random.Generator, step: int) -> np.random.Generator:
        """The verifier's stream at step ``step`` (0-based): the generation's own, continued."""
        return stream

    def generate(self, prompt_ids: list[int], max_new_tokens: int, seed: int) -> list[int]:
        drafting, rng = self.streams(seed)
        out, n0 = list(prompt_ids), len(prompt_ids)
        self.last_steps, drafted, accepted = [], 0, 0
        while len(out) - n0 < max_new_tokens:
            ctx, drafts, qs = list(out), [], []
            d_rng = self.draft_stream(seed, drafting, len(self.last_steps))
            rng = self.verify_stream(seed, rng, len(self.last_steps))
            for _ in range(self.k):
                q = self._laws(self.draft, ctx)[0]
                x = self._draw(d_rng, q)
                if self.stops_drafting(ctx[n0:], x):
                    break
                drafts.append(x)
                qs.append(q)
                ctx.append(x)
            ps = self.verify_laws(ctx, len(drafts))  # one forward over the drafts
            emitted: list[int] = []
            for i, (x, q) in enumerate(zip(drafts, qs)):
                if rng.random() < self.acceptance(ps[i], q, x):
                    emitted.append(x)
                    continue
                emitted.append(self._draw(rng, self.residual(ps[i], q)))
                break
            else:
                emitted.append(self._draw(rng, ps[len(drafts)]))
            k = self.end(out[n0:] + emitted)
            if k is not None:
                emitted = emitted[: k - (len(out) - n0)]  # the end ends the output
            drafted += len(drafts)
            accepted += len(emitted) - 1
            out += emitted
            self.last_steps.append(len(emitted))
            if k is not None:
                break
        self.last_counters = {"drafted": drafted, "accepted": accepted}
        return out[n0:][:max_new_tokens]


class NarrowSpeculative(NarrowPerPosition):
    """The same engine with the target's laws along a path in one forward (teacher forcing)."""

    capabilities = frozenset({"counters", "steps", "sequential", "teacher_forcing", "draft_law"})

    def target_laws_along(self, prompt_ids: list[int], tokens: list[int]) -> np.ndarray:
        """The target's law after ``prompt + tokens[:d]`` for each ``d``: one forward."""
        seq = list(prompt_ids) + list(tokens)
        return self._laws(self.target, seq[: len(seq) - 1] if tokens else seq, len(tokens))


def narrow_spec(
    vocab: int,
    tokens: int,
    teacher_forcing: bool = True,
    width: int = 32,
    prompts: Sequence[Sequence[int]] = ((3, 1, 4),),
    temperatures: Sequence[float] = (1.0, 0.7),
    scale: float = 16.0,
) -> Any:
    """The :class:`~specproof.properties.engine.contract.EngineSpec` of the narrow engine at
    ``vocab`` ids, ``tokens`` new tokens a sample (one case per prompt and temperature).
    ``scale``: the logits' spread; 32 makes laws as sharp as a chat model's (about 2 nats at
    V = 32,768, 2.7 at 151,936), the default 16 about 6 and 7."""
    from specproof.properties.engine.contract import EngineSpec, Sampling

    kind = NarrowSpeculative if teacher_forcing else NarrowPerPosition
    target = NarrowLM(vocab, width, scale=scale)
    draft = target.perturbed(0.2, seed=1)

    def build(sampling: Sampling) -> NarrowPerPosition:
        return kind(target, draft, temperature=sampling.temperature)

    how = "laws along a path in one forward" if teacher_forcing else "one law a position"
    sharp = "" if scale == 16.0 else f"[scale={scale:g}]"
    return EngineSpec(
        f"narrow[V={vocab}]" + ("" if teacher_forcing else "[per-position]") + sharp,
        "user",
        f"a narrow model (width {width}) decoded by token-level speculative sampling; {how}",
        build,
        vocab,
        tuple(tuple(int(x) for x in p) for p in prompts),
        tuple(Sampling(t) for t in temperatures),
        tokens=tokens,
        expect="pass",
    )


class NarrowEnding(NarrowSpeculative):
    """The narrow engine with an end of sequence (id 0) that carries a few percent of the mass:
    its samples end early and its tokens are scored by the ``eos`` statistic too."""

    capabilities = NarrowSpeculative.capabilities | {"eos"}
    eos_id = 0


class NarrowEndingDropsEos(NarrowEnding):
    """A planted bug: the draft loop breaks on an end-of-sequence draft and drops it (as a loop
    that stops drafting at the end of generation does) while the verifier keeps the draft's law:
    the end's mass moves at drafted positions, by about ``min(p, q)`` of it."""

    def stops_drafting(self, done: list[int], x: int) -> bool:
        return x == self.eos_id  # bug: the end's draft dropped


class NarrowDraftsReseeded(NarrowSpeculative):
    """A planted bug: the drafter's generator rebuilt from the request's seed every ``every`` steps
    (as a sampler state kept per batch slot and reset when the request is rescheduled would), the
    verifier's stream apart: the drafts of step ``t`` reuse the uniforms of step ``t - every``,
    which the tokens since then have partly revealed, so a draft is no longer a fresh draw of the
    draft's law given the past. Each token's marginal looks right; the transforms at one index
    of the step depend on those ``every`` steps before (``index.repeat[every]``)."""

    def __init__(self, target: NarrowLM, draft: NarrowLM, every: int, temperature: float = 1.0) -> None:
        super().__init__(target, draft, temperature=temperature)
        self.every = every

    def draft_stream(self, seed: int, stream: np.random.Generator, step: int) -> np.random.Generator:
        if step % self.every == 0:
            self._rebuilt = self.streams(seed)[0]  # bug: the drafter's generator rebuilt from the seed
        return self._rebuilt


class NarrowVerifierReseeded(NarrowSpeculative):
    """A planted bug: the verifier's generator (the acceptance tests and the residual draws) rebuilt
    from the request's seed every ``every`` steps, the drafter's stream apart: the acceptance tests
    of step ``t`` reuse the uniforms of step ``t - every``."""

    def __init__(self, target: NarrowLM, draft: NarrowLM, every: int, temperature: float = 1.0) -> None:
        super().__init__(target, draft, temperature=temperature)
        self.every = every

    def verify_stream(self, seed: int, stream: np.random.Generator, step: int) -> np.random.Generator:
        if step % self.every == 0:
            return self.streams(seed)[1]  # bug: the verifier's generator rebuilt from the seed
        return stream


def reseeded_spec(vocab: int, tokens: int, every: int, verifier: bool = False) -> Any:
    """The spec of :class:`NarrowDraftsReseeded` (or, with ``verifier``,
    :class:`NarrowVerifierReseeded`) at ``vocab`` ids, one prompt at T = 1: randomness that
    repeats every ``every`` steps of one generation (expected lossy)."""
    from specproof.properties.engine.contract import EngineSpec, Sampling

    kind = NarrowVerifierReseeded if verifier else NarrowDraftsReseeded
    target = NarrowLM(vocab)
    draft = target.perturbed(0.2, seed=1)
    who = "verifier's" if verifier else "drafter's"
    return EngineSpec(
        f"narrow[V={vocab}].{'verifier' if verifier else 'drafts'}_reseeded_every_{every}",
        "user",
        f"a narrow model decoded by token-level speculative sampling; the {who} generator rebuilt "
        f"from the request's seed every {every} steps",
        lambda s: kind(target, draft, every, temperature=s.temperature),
        vocab,
        ((3, 1, 4),),
        (Sampling(1.0),),
        tokens=tokens,
        expect="lossy",
    )


def ending_spec(vocab: int, tokens: int, boost: float = 4.0, drops_eos_draft: bool = False) -> Any:
    """The spec of :class:`NarrowEnding` at ``vocab`` ids (the end's logit raised by ``boost``),
    one prompt at T = 1: an exact engine for the false alarms of audits with an end of sequence;
    with ``drops_eos_draft``, :class:`NarrowEndingDropsEos` (expected lossy)."""
    from specproof.properties.engine.contract import EngineSpec, Sampling

    kind = NarrowEndingDropsEos if drops_eos_draft else NarrowEnding

    target = NarrowLM(vocab)
    target.bias = target.bias.copy()
    target.bias[0] += boost
    draft = target.perturbed(0.2, seed=1)
    return EngineSpec(
        f"calibration.ending[V={vocab}]" + (".drops_eos_draft" if drops_eos_draft else ""),
        "user",
        "a narrow model with an end of sequence (a few percent of the mass), token-level speculative "
        "sampling" + ("; the draft loop drops an end-of-sequence draft" if drops_eos_draft else "; exact"),
        lambda s: kind(target, draft, temperature=s.temperature),
        vocab,
        ((3, 1, 4),),
        (Sampling(1.0),),
        tokens=tokens,
        expect="lossy" if drops_eos_draft else "pass",
    )


#: the texts of the stopping engine's ids (four letters in turn) and its stop string, which spans
#: two tokens: it completes where a token of text "b" follows one of text "a"
STOP_TEXTS = ("a", "b", "c", "d")
STOP_STRING = "ab"


class NarrowStopping(NarrowSpeculative):
    """The narrow engine under a request with stop strings (``stopping``: a setting with ``stop``
    and ``texts``): its output ends at the first token whose text completes one, wherever in a
    step's block it lies (reference/sampling.py)."""

    def __init__(self, target: NarrowLM, draft: NarrowLM, stopping: Any, temperature: float = 1.0) -> None:
        super().__init__(target, draft, temperature=temperature)
        self.stopping = stopping

    def end(self, out: list[int]) -> int | None:
        k: int | None = self.stopping.end(out)
        return k


class NarrowStoppingDropsStop(NarrowStopping):
    """A planted bug: the draft loop breaks on a draft whose text completes a stop string and drops
    it (as a loop that stops drafting once the drafts end the generation does), while the verifier
    keeps the draft's law: the stopping tokens' mass moves at drafted positions."""

    def stops_drafting(self, done: list[int], x: int) -> bool:
        return self.stopping.end([*done, x]) == len(done) + 1  # bug: the stopping draft dropped


def stopping_spec(vocab: int, tokens: int, drops_stop_draft: bool = False) -> Any:
    """The spec of :class:`NarrowStopping` at ``vocab`` ids (id ``i``'s text is
    ``STOP_TEXTS[i % 4]``, the stop string :data:`STOP_STRING`), one prompt at T = 1: an exact
    engine whose samples end on a stop string; with ``drops_stop_draft``,
    :class:`NarrowStoppingDropsStop` (expected lossy)."""
    from specproof.properties.engine.contract import EngineSpec, Sampling

    kind = NarrowStoppingDropsStop if drops_stop_draft else NarrowStopping
    target = NarrowLM(vocab)
    draft = target.perturbed(0.2, seed=1)
    texts = tuple(STOP_TEXTS[i % len(STOP_TEXTS)] for i in range(vocab))
    setting = Sampling(1.0, stop=(STOP_STRING,), texts=texts)
    return EngineSpec(
        f"calibration.stopping[V={vocab}]" + (".drops_stop_draft" if drops_stop_draft else ""),
        "user",
        "a narrow model whose output ends on a stop string spanning two tokens, token-level speculative "
        "sampling"
        + ("; the draft loop drops a draft that completes the stop" if drops_stop_draft else "; exact"),
        lambda s: kind(target, draft, s, temperature=s.temperature),
        vocab,
        ((3, 1, 4),),
        (setting,),
        tokens=tokens,
        expect="lossy" if drops_stop_draft else "pass",
    )
