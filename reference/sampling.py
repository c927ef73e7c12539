"""The law a sampling request asks for: every request parameter applied to the target's logits,
with the true context, at every position.

A request's parameters turn the target's raw logits ``z`` after a context into the law sampled
from. Some read only the logits (temperature, the cut-offs), some read the context: the
penalties count the tokens in it, bad words, no-repeat n-grams and a grammar look at its tail or
its state, ``min_new_tokens`` counts how many tokens were generated. Speculative decoding must
apply all of them at every draft position with that position's own context (the prefix and the
drafts before it) -- the public bugs of this class apply them once per step, at the bonus token
only, or not at all at draft positions (proofs_notes/sampling_params.md, which proves the loop
lossless when each node's law is this one, and names the tests).

The order (:func:`processed_law`), with ``out`` the generated tokens after the prompt and
``ctx`` the whole context, prompt included:

1. ``logit_bias``: ``z[x] += b`` (``-inf`` bans ``x``);
2. ``repetition_penalty`` theta > 0 over the tokens of ``ctx`` (or of ``out``, by
   ``repetition_scope``): a positive ``z[x]`` is divided by theta, a negative one multiplied;
3. ``presence_penalty`` and ``frequency_penalty`` over ``out`` (or ``ctx``):
   ``z[x] -= presence * [c(x) > 0] + frequency * c(x)``;
4. the bans: ``no_repeat_ngram_size`` n (a token that would repeat an n-gram of ``ctx``),
   ``bad_words`` (the last token of a banned sequence whose other tokens end ``ctx``),
   ``min_new_tokens`` (``eos`` while ``len(out) < min_new_tokens``), the grammar (a token with no
   transition from the state ``out`` reached, or leading nowhere accepting; ``eos`` unless the
   state accepts);
5. ``softmax(z / temperature)`` (greedy at temperature 0: one-hot at the argmax, ties to the
   smallest id), then top-k, top-p, min-p, renormalized.

This is HF transformers' order of its processors and warpers, with OpenAI's presence and
frequency penalties placed beside its repetition penalty. Engines differ (llama.cpp applies the
cut-offs before the temperature and counts the last ``repeat_last_n`` tokens; vLLM's repetition
penalty counts prompt and output, SGLang's the output only): an engine declares its semantics
through ``repetition_scope`` and ``presence_scope``, and a served engine's law is read from the
server itself, never from here.

Generation ends (:meth:`Sampling.end`) at the first ``eos`` generated, or at the first token whose
text completes one of the ``stop`` strings in the text of ``out`` (the tokens' texts are
``texts``; a stop string may span several tokens). The end is absorbing: once ``out`` has ended,
the law is one-hot at the token that ended it, so a sample padded with that token to any horizon
has the law of the stopped one (proofs_notes/stops.md). Nothing past the ending token belongs to
the output: a server that returns more has broken the contract.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field, fields
from typing import Any

import numpy as np

from .errors import AmbiguousLawError, BadParameterError, SpecproofInputError, UsageError

Seq = tuple[int, ...]
SCOPES = ("all", "output")


@dataclass(frozen=True)
class Grammar:
    """A regular language over token ids: a deterministic automaton ``step[state][token] ->
    state`` from ``start``; the output must stay inside it and may end only in an ``accepting``
    state. Only states from which an accepting state is reachable count (:attr:`live`), so a
    token that leads where no output can end is banned too."""

    step: tuple[tuple[tuple[int, int], ...], ...]  # per state: (token, next state) pairs
    start: int
    accepting: frozenset[int]
    source: str = ""  # the pattern it was built from, for messages

    def next(self, state: int | None, token: int) -> int | None:
        if state is None:
            return None
        return dict(self.step[state]).get(token)

    def state(self, out: Sequence[int]) -> int | None:
        """The state after ``out`` (None once it left the language)."""
        s: int | None = self.start
        for x in out:
            s = self.next(s, x)
        return s

    @property
    def live(self) -> frozenset[int]:
        return _live_states(self)

    @classmethod
    def from_regex(cls, pattern: str, token_text: Sequence[str]) -> Grammar:
        """The token-level automaton of a regex over text, token ``i`` reading
        ``token_text[i]`` (its characters in turn). The regex-to-automaton step is interegular's."""
        import interegular
        from interegular.fsm import anything_else

        try:
            fsm = interegular.parse_pattern(pattern).to_fsm()
        except Exception as e:  # the library's own parse errors, of several classes
            raise BadParameterError("grammar", f"cannot read the regex {pattern!r}: {e}") from e
        states = sorted(fsm.states)
        index = {s: i for i, s in enumerate(states)}

        def walk(state: Any, text: str) -> Any:
            for ch in text:
                sym = fsm.alphabet[ch] if ch in fsm.alphabet else fsm.alphabet[anything_else]
                state = fsm.map.get(state, {}).get(sym)
                if state is None:
                    return None
            return state

        step = []
        for s in states:
            pairs = []
            for tok, text in enumerate(token_text):
                t = walk(s, text) if text else None
                if t is not None:
                    pairs.append((tok, index[t]))
            step.append(tuple(pairs))
        accepting = frozenset(index[s] for s in fsm.finals)
        return cls(tuple(step), index[fsm.initial], accepting, pattern)


def _live_states(g: Grammar) -> frozenset[int]:
    live = set(g.accepting)
    changed = True
    while changed:
        changed = False
        for s, pairs in enumerate(g.step):
            if s not in live and any(t in live for _, t in pairs):
                live.add(s)
                changed = True
    return frozenset(live)


@dataclass(frozen=True)
class Sampling:
    """A sampling request (module docstring). The defaults change nothing: temperature 1 and
    every other parameter off. ``eos`` is the model's end-of-sequence id, needed by
    ``min_new_tokens`` and by a grammar (which allows ``eos`` in its accepting states). ``stop``
    are stop strings over the generated text, ``texts`` the tokens' texts by id they are read
    through (module docstring)."""

    temperature: float = 1.0
    top_k: int | None = None
    top_p: float | None = None
    min_p: float | None = None
    repetition_penalty: float | None = None
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    logit_bias: tuple[tuple[int, float], ...] = ()
    bad_words: tuple[Seq, ...] = ()
    no_repeat_ngram_size: int = 0
    min_new_tokens: int = 0
    eos: int | None = None
    grammar: Grammar | None = None
    repetition_scope: str = "all"
    presence_scope: str = "output"
    stop: tuple[str, ...] = ()
    texts: tuple[str, ...] = field(default=(), repr=False)  # the tokens' texts, for ``stop``
    extra: dict[str, Any] = field(default_factory=dict, compare=False, hash=False)  # server-only fields

    def __post_init__(self) -> None:
        _check(self)

    # -- what the request is ------------------------------------------------------------------

    @property
    def greedy(self) -> bool:
        return self.temperature == 0

    @property
    def truncated(self) -> bool:
        """Whether any cut-off (top-k, top-p, min-p) is asked beside the temperature."""
        return self.top_k is not None or (self.top_p or 1.0) < 1 or bool(self.min_p)

    @property
    def contextual(self) -> bool:
        """Whether the law depends on the context beyond the logits (penalties, bans, grammar)."""
        return bool(
            self.repetition_penalty not in (None, 1.0)
            or self.presence_penalty
            or self.frequency_penalty
            or self.bad_words
            or self.no_repeat_ngram_size
            or self.min_new_tokens
            or self.grammar is not None
        )

    @property
    def ends(self) -> bool:
        """Whether a sample may end before the horizon (an ``eos`` or a stop string)."""
        return self.eos is not None or bool(self.stop)

    def end(self, out: Sequence[int]) -> int | None:
        """How many tokens of the generated ``out`` the output keeps: up to and including the
        first ``eos``, or the first token whose text completes a stop string; None when ``out``
        has not ended."""
        text = ""
        for k, x in enumerate(out):
            if x == self.eos:
                return k + 1
            if self.stop:
                if not 0 <= x < len(self.texts):
                    raise SpecproofInputError("out", f"id {x} has no text (texts holds {len(self.texts)})")
                before = len(text)
                text += self.texts[x]
                # only a match that ends inside this token's text is new
                lo = max(0, before - max(len(t) for t in self.stop) + 1)
                if any(t in text[lo:] for t in self.stop):
                    return k + 1
        return None

    def stopped_by(self, out: Sequence[int]) -> str | None:
        """The stop string that ended ``out`` (the first of ``stop`` in its text up to its end),
        or None where it did not end on one."""
        k = self.end(out) if self.stop else None
        if k is None:
            return None
        text = "".join(self.texts[x] for x in out[:k])
        return next((t for t in self.stop if t in text), None)

    @property
    def output_scoped(self) -> bool:
        """Whether the law needs to know where the prompt ends (a parameter that counts or reads
        only the generated tokens)."""
        return bool(
            ((self.presence_penalty or self.frequency_penalty) and self.presence_scope == "output")
            or (self.repetition_penalty not in (None, 1.0) and self.repetition_scope == "output")
            or self.min_new_tokens
            or self.grammar is not None
        )

    @property
    def plain(self) -> bool:
        """Temperature alone (the reference loop's own setting)."""
        return not (self.truncated or self.contextual or self.logit_bias)

    @property
    def label(self) -> str:
        if self.greedy and self.plain:
            return "greedy"
        parts = ["greedy" if self.greedy else f"T={self.temperature:g}"]
        for name, value in self.asked():
            if name != "temperature":
                parts.append(f"{name}={_short(value)}")
        return ",".join(parts)

    def asked(self) -> list[tuple[str, Any]]:
        """The parameters that differ from their neutral value, in field order."""
        out = []
        for f in fields(self):
            if f.name in ("extra", "repetition_scope", "presence_scope", "texts"):
                continue
            v = getattr(self, f.name)
            if v != f.default:
                out.append((f.name, v))
        return out

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"temperature": self.temperature, "top_k": self.top_k, "top_p": self.top_p}
        for name, value in self.asked():
            if name in out:
                continue
            out[name] = value.source if isinstance(value, Grammar) else _jsonable(value)
        if self.contextual:
            out.update(repetition_scope=self.repetition_scope, presence_scope=self.presence_scope)
        return out

    def check_vocab(self, vocab: int) -> None:
        """Ids named by the request lie in ``[0, vocab)``; raises :class:`BadParameterError`."""
        for name, ids in (
            ("logit_bias", [t for t, _ in self.logit_bias]),
            ("bad_words", [t for w in self.bad_words for t in w]),
            ("eos", [] if self.eos is None else [self.eos]),
        ):
            bad = [t for t in ids if not 0 <= t < vocab]
            if bad:
                raise BadParameterError(name, f"id {bad[0]} outside the vocabulary [0, {vocab})")
        if self.stop and len(self.texts) != vocab:
            raise BadParameterError(
                "texts", f"holds {len(self.texts)} token texts for a vocabulary of {vocab}"
            )

    # -- the law ------------------------------------------------------------------------------

    def law(
        self,
        logits: Sequence[float],
        context: Sequence[int] = (),
        prompt_len: int | None = None,
        margin: float | None = 1e-5,
    ) -> list[float]:
        """The processed law after ``context`` whose first ``prompt_len`` tokens are the prompt
        (all of it when None: nothing generated yet). See :func:`processed_law`. A top-p cut
        within ``margin`` of a cumulative mass is ambiguous in float32 (an engine may keep one
        token more or fewer): that raises :class:`BadParameterError` rather than give a law the
        engine cannot be held to."""
        ctx = tuple(context)
        return processed_law(logits, self, ctx, len(ctx) if prompt_len is None else prompt_len, margin)


def _short(value: Any) -> str:
    if isinstance(value, Grammar):
        return repr(value.source)
    if isinstance(value, float):
        return f"{value:g}"
    return str(value).replace(" ", "")


def _jsonable(value: Any) -> Any:
    if isinstance(value, tuple):
        return [_jsonable(v) for v in value]
    return value


def _check(s: Sampling) -> None:
    """Each parameter in its documented range; raises :class:`BadParameterError` naming it."""
    if not (isinstance(s.temperature, (int, float)) and s.temperature >= 0):
        raise BadParameterError("temperature", f"must be a number >= 0, got {s.temperature!r}")
    if s.top_k is not None and (not isinstance(s.top_k, int) or s.top_k < 1):
        raise BadParameterError("top_k", f"must be an integer >= 1, got {s.top_k!r}")
    if s.top_p is not None and not (0 < s.top_p <= 1):
        raise BadParameterError("top_p", f"must lie in (0, 1], got {s.top_p!r}")
    if s.min_p is not None and not (isinstance(s.min_p, (int, float)) and 0 <= s.min_p < 1):
        raise BadParameterError("min_p", f"must lie in [0, 1), got {s.min_p!r}")
    if s.repetition_penalty is not None and not s.repetition_penalty > 0:
        raise BadParameterError("repetition_penalty", f"must be > 0 (1 is off), got {s.repetition_penalty!r}")
    for name in ("presence_penalty", "frequency_penalty"):
        v = getattr(s, name)
        if not (isinstance(v, (int, float)) and math.isfinite(v)):
            raise BadParameterError(name, f"must be a finite number, got {v!r}")
    for name in ("no_repeat_ngram_size", "min_new_tokens"):
        v = getattr(s, name)
        if not isinstance(v, int) or v < 0:
            raise BadParameterError(name, f"must be an integer >= 0, got {v!r}")
    if s.min_new_tokens and s.eos is None:
        raise BadParameterError("min_new_tokens", "needs the end-of-sequence id (eos) it holds back")
    if any(not w for w in s.bad_words):
        raise BadParameterError("bad_words", "an empty sequence bans nothing")
    if any(not isinstance(b, (int, float)) or math.isnan(b) for _, b in s.logit_bias):
        raise BadParameterError("logit_bias", "every bias must be a number (-inf bans)")
    for name in ("repetition_scope", "presence_scope"):
        if getattr(s, name) not in SCOPES:
            raise BadParameterError(name, f"must be one of {SCOPES}, got {getattr(s, name)!r}")
    if not isinstance(s.stop, tuple) or any(not isinstance(t, str) or not t for t in s.stop):
        raise BadParameterError("stop", f"must be a tuple of non-empty strings, got {s.stop!r}")
    if s.stop and not s.texts:
        raise BadParameterError("stop", "needs the tokens' texts (texts) to read the output as text")
    if any(not isinstance(t, str) for t in s.texts):
        raise BadParameterError("texts", "every token text must be a string")
    if s.grammar is not None and s.grammar.start not in s.grammar.live:
        raise BadParameterError("grammar", f"{s.grammar.source!r} accepts no output at all")


def from_options(options: dict[str, Any]) -> Sampling:
    """A :class:`Sampling` from named options; an unknown name is a :class:`UsageError` naming it."""
    names = {f.name for f in fields(Sampling)}
    unknown = sorted(k for k in options if k not in names)
    if unknown:
        raise UsageError(f"{unknown[0]}: not a sampling parameter (parameters: {', '.join(sorted(names))})")
    return Sampling(**options)


# --------------------------------------------------------------------------- the processed law


def generated(context: Seq, prompt_len: int) -> Seq:
    return context[prompt_len:]


def penalties(z: np.ndarray, s: Sampling, ctx: Seq, out: Seq) -> np.ndarray:
    """Steps 2 and 3: the repetition penalty, then presence and frequency."""
    z = z.copy()
    theta = s.repetition_penalty
    if theta not in (None, 1.0):
        seen = sorted(set(ctx if s.repetition_scope == "all" else out))
        for x in seen:
            z[x] = z[x] / theta if z[x] > 0 else z[x] * theta
    if s.presence_penalty or s.frequency_penalty:
        counts = Counter(ctx if s.presence_scope == "all" else out)
        for x, c in counts.items():
            z[x] -= s.presence_penalty + s.frequency_penalty * c
    return z


def banned(s: Sampling, ctx: Seq, out: Seq, vocab: int) -> set[int]:
    """Step 4: the tokens no request parameter allows after ``ctx``."""
    ban: set[int] = set()
    n = s.no_repeat_ngram_size
    if n and len(ctx) >= n - 1:
        tail = ctx[len(ctx) - (n - 1) :] if n > 1 else ()
        for i in range(len(ctx) - n + 1):
            if ctx[i : i + n - 1] == tail:
                ban.add(ctx[i + n - 1])
    for word in s.bad_words:
        if len(word) == 1 or ctx[len(ctx) - (len(word) - 1) :] == word[:-1]:
            ban.add(word[-1])
    if s.eos is not None and len(out) < s.min_new_tokens:
        ban.add(s.eos)
    if s.grammar is not None:
        ban |= grammar_bans(s.grammar, out, vocab, s.eos)
    return ban


def grammar_bans(g: Grammar, out: Seq, vocab: int, eos: int | None) -> set[int]:
    """Every token with no transition into a live state from where ``out`` left the automaton;
    ``eos`` unless that state accepts."""
    state, live = g.state(out), g.live
    allowed = {tok for tok, t in (g.step[state] if state is not None else ()) if t in live}
    if eos is not None and state in g.accepting:
        allowed.add(eos)
    return set(range(vocab)) - allowed


#: the order in which each engine family applies step 5, the temperature and the cut-offs (named
#: data: an engine's order is read from here, never written again). ``hf`` is HF transformers'
#: warpers and this reference's own; ``llamacpp`` cuts the temperature-1 law and applies the
#: temperature last (llama.cpp and llama-cpp-python, top-k keeping exactly k, ties to the smaller
#: id); ``sglang`` decides top-k and top-p jointly on the tempered law (top-p's cumulative mass is
#: that of the law before top-k, so here top-p comes first), then min-p.
WARP_ORDERS: dict[str, tuple[str, ...]] = {
    "hf": ("temperature", "top_k", "top_p", "min_p"),
    "llamacpp": ("top_k_exact", "top_p", "min_p", "temperature"),
    "sglang": ("temperature", "top_p", "top_k_exact", "min_p"),
}


class _Warped:
    """The law being warped: logits ``z`` (``-inf`` where removed) and, once a cut-off needed it,
    the law ``p`` they give (renormalized after every cut)."""

    def __init__(self, z: np.ndarray) -> None:
        self.z: np.ndarray = z
        self.p: np.ndarray | None = None

    def probs(self) -> np.ndarray:
        if self.p is None:
            p = np.exp(self.z - self.z.max())
            self.p = p / p.sum()
        return self.p

    def keep(self, keep: np.ndarray) -> None:
        p = np.where(keep, self.probs(), 0.0)
        self.p = p / p.sum()
        self.z = np.where(keep, self.z, -np.inf)


def _temperature(w: _Warped, s: Sampling, margin: float | None) -> None:
    if w.p is None:
        w.z = w.z / s.temperature
    else:  # after the cut-offs: the kept logits, tempered
        w.z, w.p = (w.z - w.z.max()) / s.temperature, None


def _top_k(w: _Warped, s: Sampling, margin: float | None) -> None:
    """HF's top-k: every logit below the k-th largest removed (ties at the k-th kept)."""
    if s.top_k is not None and s.top_k < len(w.z):
        kth = np.sort(w.z)[::-1][s.top_k - 1]
        w.z, w.p = np.where(w.z < kth, -np.inf, w.z), None


def _top_k_exact(w: _Warped, s: Sampling, margin: float | None) -> None:
    """Exactly the k likeliest kept (ties to the smaller id)."""
    if s.top_k is None:
        return
    order = np.argsort(-(w.z if w.p is None else w.p), kind="stable")
    keep = np.zeros(len(w.z), dtype=bool)
    keep[order[: s.top_k]] = True
    keep &= np.isfinite(w.z)
    if not keep.all():
        if w.p is None:
            w.z = np.where(keep, w.z, -np.inf)
        else:
            w.keep(keep)


def _top_p(w: _Warped, s: Sampling, margin: float | None) -> None:
    if s.top_p is None or s.top_p >= 1:
        return
    p = w.probs()
    order = np.argsort(-p, kind="stable")
    above = np.concatenate([[0.0], np.cumsum(p[order])[:-1]])
    near = np.abs(above[1:] - s.top_p) < margin if margin else np.zeros(0, dtype=bool)
    if near.any():
        raise AmbiguousLawError(
            "top_p",
            f"{s.top_p:g} falls within {margin:g} of a cumulative mass of this law "
            f"({', '.join(f'{a:.6f}' for a in above[1:][near])}): ambiguous in float32",
        )
    keep = np.zeros(len(p), dtype=bool)
    keep[order[above < s.top_p]] = True
    w.keep(keep)


def _min_p(w: _Warped, s: Sampling, margin: float | None) -> None:
    if not s.min_p:
        return
    p = w.probs()
    if margin:
        live = p > 0
        gap = np.abs(np.log(p[live]) - np.log(s.min_p * p.max()))
        if (gap < margin).any():
            raise BadParameterError(
                "min_p", f"{s.min_p:g} puts the cut within {margin:g} of a probability of this law: ambiguous"
            )
    w.keep(p >= s.min_p * p.max())


_STEPS = {
    "temperature": _temperature,
    "top_k": _top_k,
    "top_k_exact": _top_k_exact,
    "top_p": _top_p,
    "min_p": _min_p,
}


def warp(z: np.ndarray, s: Sampling, margin: float | None = None, order: str = "hf") -> np.ndarray:
    """Step 5: the temperature and the cut-offs in the family's order (:data:`WARP_ORDERS`), as a
    law; greedy (temperature 0) is one-hot at the argmax, ties to the smallest id."""
    if not np.isfinite(z).any():
        raise SpecproofInputError("logits", "every token is banned: no law to sample from")
    if s.greedy:
        p = np.zeros(len(z))
        p[int(np.argmax(z))] = 1.0
        return p
    w = _Warped(np.asarray(z, dtype=np.float64))
    for step in WARP_ORDERS[order]:
        _STEPS[step](w, s, margin)
    return w.probs()


@dataclass(frozen=True)
class View:
    """What each parameter reads, when it is not the node's own context (a defect's model, never
    the law itself): the tokens the penalties count, the generated tokens the grammar and
    ``min_new_tokens`` read."""

    counted: Seq | None = None  # the context whose tokens the penalties count
    generated: Seq | None = None  # the output the grammar state and the min_new_tokens count read


def processed_law(
    logits: Sequence[float],
    s: Sampling,
    context: Seq,
    prompt_len: int,
    margin: float | None = None,
    view: View | None = None,
) -> list[float]:
    """The law sampled after ``context`` (module docstring, steps 1 to 5); one-hot at the token
    that ended the output once it has ended (an ``eos``, a stop string: the end is absorbing).
    ``view`` replaces what some parameters read (:class:`View`): only defect models use it."""
    z = np.asarray([float(v) for v in logits], dtype=np.float64)
    if z.ndim != 1 or np.isnan(z).any() or np.isposinf(z).any():
        raise SpecproofInputError("logits", "expected a row of finite numbers (or -inf)")
    out = generated(context, prompt_len)
    ended = s.end(out) if s.ends else None
    if ended is not None:
        p = np.zeros(len(z))
        p[out[ended - 1]] = 1.0
        return [float(v) for v in p]
    counted = context if view is None or view.counted is None else view.counted
    read_out = out if view is None or view.generated is None else view.generated
    for x, b in s.logit_bias:
        z[x] += b
    z = penalties(z, s, counted, generated(counted, prompt_len))
    raw = z.copy()
    for x in banned(s, context, read_out, len(z)):
        z[x] = -np.inf
    if not np.isfinite(z).any():
        return dead_end(raw, s)
    return [float(v) for v in warp(z, s, margin)]


def dead_end(raw: np.ndarray, s: Sampling) -> list[float]:
    """The law after a context the request allows no token after (its output left the grammar,
    or every token is banned): one-hot at ``eos`` (or at the raw argmax without one). Such a
    context is never reached by a sample: its last token had probability 0 where it was drawn,
    so a verifier never accepts it; a draft tree can still hold it (a top-k draft of a law with
    fewer than k tokens), and its law must then be a law."""
    p = np.zeros(len(raw))
    p[s.eos if s.eos is not None else int(np.argmax(raw))] = 1.0
    return [float(v) for v in p]


class ProcessedLM:
    """A model's laws processed by a request: ``law(context)`` is :func:`processed_law` of the
    model's raw logits after ``context`` (its ``logits`` method; a model that gives laws only is
    read as ``log p``). ``prompt_len`` says where the prompt ends, for the output-only counts,
    ``min_new_tokens`` and the grammar."""

    def __init__(self, model: Any, sampling: Sampling, prompt_len: int) -> None:
        self.model, self.sampling, self.prompt_len = model, sampling, prompt_len
        self.vocab = model.vocab
        self._memo: dict[Seq, tuple[float, ...]] = {}

    def logits(self, context: Seq) -> list[float]:
        raw = getattr(self.model, "logits", None)
        if raw is not None:
            return list(raw(context))
        return [math.log(float(p)) if float(p) > 0 else -math.inf for p in self.model.law(context)]

    def law(self, context: Seq) -> tuple[float, ...]:
        context = tuple(context)
        if context not in self._memo:
            p = processed_law(self.logits(context), self.sampling, context, self.prompt_len)
            self._memo[context] = tuple(p)
        return self._memo[context]
