"""llama.cpp's ``llama-server``: its profile and the stand-in's answer in its shape.

Law recipe: ``POST /completion`` with ``n_probs`` = V and ``post_sampling_probs``: every id's
probability after the server's whole sampler chain at that context. Laws along a sample in one
request, where the setting is a temperature alone: the sample's tokens forced by a grammar of
token ids (``<[id]>``), one more token free, ``n_probs`` = V before the sampler chain (the
model's own law at each position, read by the decode path one token at a time), the temperature
and the end-of-sequence ban applied here; the ids the server bans are learned, and these laws
checked against the one-token recipe's, before sampling (:meth:`Endpoint.check`). Counters:
``timings.draft_n``, ``timings.draft_n_accepted``. Reports: ``completion_probabilities[i].prob``.
Unspecified cut-offs are sent as their neutral values, so a setting means what it says and not a
server default (llama.cpp's defaults are T 0.8, top-k 40, top-p 0.95, min-p 0.05). A setting
without ``eos`` bans end of sequence (``ignore_eos``), so the law read and the law sampled are the
same law. A grammar goes as GBNF compiled from the request's automaton (:func:`gbnf`), rooted at
the state the context's generated part reached. Stop strings go as ``stop`` on generations only
(a law request's one token is read before any stop; the audit knows the law after one).
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from specproof.properties.endpoint.families import wire
from specproof.properties.endpoint.families.base import (
    AnswerError,
    Profile,
    cached_count,
    knobs,
    law_from_pairs,
    rebuilt_from_raw,
)
from specproof.reference.errors import UsageError
from specproof.reference.sampling import Grammar, Sampling

if TYPE_CHECKING:
    from specproof.properties.endpoint.client import Client
    from specproof.properties.endpoint.standin import StandIn
    from specproof.properties.engine.contract import Generation


#: what the report quotes of this family's law recipe
RECIPE = (
    "POST /completion, one new token, n_probs = V, post_sampling_probs: the probability of every id "
    "after llama-server's own sampler chain at that context (the first token of a request is sampled "
    "before any draft exists; its answer reports draft_n absent or 0)"
)
#: the request parameters beyond the cut-offs it takes
OFFERS: tuple[str, ...] = (
    "repetition_penalty", "presence_penalty", "frequency_penalty", "logit_bias", "grammar", "eos",
    "repetition_scope", "presence_scope", "stop",
)  # fmt: skip


@dataclasses.dataclass(frozen=True)
class LlamaCpp(Profile, family="llamacpp", recipe=RECIPE, counters=True, offers=OFFERS):
    #: the ids the server bans when a setting declares no end of sequence (``ignore_eos``: its
    #: end-of-generation ids), learned before sampling (:meth:`Endpoint.check`); None: not learned,
    #: so no law is read along a path
    banned: tuple[int, ...] | None = None
    #: the laws along a path are read by generating it (on a speculative server it would draft)
    along_generates: ClassVar[bool] = True
    no_draft_hint: ClassVar[str] = (
        "llama-server drafts only with a speculation type: start it with --spec-type draft-simple and its "
        "draft model (-md DRAFT.gguf; a draft model alone does not make it draft), or --spec-type "
        "ngram-simple"
    )
    streams: ClassVar[bool] = True
    caches: ClassVar[bool] = True
    #: n completions a request: llama-server answers a list (completion j seeded by seed + j)
    completions: ClassVar[str | None] = "n_cmpl"
    #: LoRA adapters loaded with ``--lora``, asked per request with ``lora: [{id, scale}]``
    adapters: ClassVar[str | None] = "/lora-adapters"
    build_route: ClassVar[tuple[str, str] | None] = ("/props", "build_info")
    #: llama-server started with ``--metrics``
    metrics: ClassVar[tuple[str, str, str] | None] = (
        "/metrics",
        "llamacpp:spec_decode_num_draft_tokens_total",
        "llamacpp:spec_decode_num_accepted_tokens_total",
    )

    def _sampling(self, s: Sampling, generated: Sequence[int] = ()) -> dict[str, Any]:
        self.check_offered(s)
        fields = knobs(s, top_k_off=0)
        fields["repeat_penalty"] = fields.pop("repetition_penalty")  # llama.cpp's name for it
        body: dict[str, Any] = {
            **fields,
            "typical_p": 1.0,
            "repeat_last_n": 4096 if s.contextual else 0,  # past any context here: all of it counts
            "dry_multiplier": 0.0,
            "xtc_probability": 0.0,
            "top_n_sigma": -1.0,
            "mirostat": 0,
            "ignore_eos": s.eos is None,  # with no end of sequence declared, none is sampled
            "cache_prompt": False,
            "return_tokens": True,
        }
        if s.logit_bias:
            body["logit_bias"] = [[t, False if math.isinf(b) and b < 0 else b] for t, b in s.logit_bias]
        if s.grammar is not None:
            if self.token_map is None:
                raise UsageError("profile llamacpp: a grammar needs the tokens' texts (--token-map)")
            body["grammar"] = gbnf(s.grammar, self.token_map, s.grammar.state(generated))
        return body

    def generation(
        self, prompt: Sequence[int], tokens: int, seed: int, s: Sampling, report: bool
    ) -> tuple[str, dict[str, Any]]:
        body = {"prompt": list(prompt), "n_predict": tokens, "seed": self.seed(seed), **self._sampling(s)}
        if s.stop:
            body["stop"] = list(s.stop)
        if report:
            body.update(n_probs=1, post_sampling_probs=True)
        return "/completion", {**body, **self.extra}

    def law_request(
        self, context: Sequence[int], s: Sampling, vocab: int, prompt_len: int | None = None
    ) -> tuple[str, dict[str, Any]]:
        # the grammar read where the context's generated part left it (its residual language):
        # the server's own grammar engine masks the next token from that state
        generated = list(context[len(context) if prompt_len is None else prompt_len :])
        body = {"prompt": list(context), "n_predict": 1, "seed": 0, **self._sampling(s, generated)}
        body.update(n_probs=vocab, post_sampling_probs=True)
        return "/completion", {**body, **self.extra}

    def laws_along_request(
        self, context: Sequence[int], s: Sampling, vocab: int, prompt_len: int
    ) -> tuple[str, dict[str, Any]] | None:
        """The context's generated part forced by a grammar of token ids and one token more,
        ``n_probs`` = V before the sampler chain (module docstring); None where the setting is
        more than a temperature, the banned ids are not learned, or nothing is generated."""
        if not rebuilt_from_raw(s) or s.truncated or s.greedy:
            return None
        forced = [int(x) for x in context[prompt_len:]]
        if not forced:
            return None
        body = {
            "prompt": list(context[:prompt_len]),
            "n_predict": len(forced) + 1,
            "seed": 0,
            **self._sampling(Sampling(1.0)),
            "ignore_eos": False,  # the laws are read before the sampler: nothing to ban there
            "grammar": forced_grammar(forced),
            "n_probs": vocab,
            "post_sampling_probs": False,
        }
        return "/completion", {**body, **self.extra}

    def learned_along(
        self,
        answer: Any,
        s: Sampling,
        vocab: int,
        context: Sequence[int],
        prompt_len: int,
        one: Sequence[float],
    ) -> Profile:
        """The ids the server bans under a setting without an end of sequence: those the model's
        own law gives mass after the prompt and the one-token recipe's law (the sampler's) none."""
        if s.eos is not None:
            return self
        plain = dataclasses.replace(self, banned=())
        first = np.asarray(plain.read_laws_along(answer, s, vocab, context, prompt_len)[0])
        banned = tuple(int(i) for i in np.flatnonzero((first > 0) & (np.asarray(one) <= 0)))
        return dataclasses.replace(self, banned=banned)

    def read_laws_along(
        self, answer: Any, s: Sampling, vocab: int, context: Sequence[int], prompt_len: int
    ) -> list[list[float]]:
        """The model's law at each position of the forced path, the banned ids removed (where the
        setting declares no end of sequence) and the temperature applied here."""
        n = len(context) - prompt_len + 1
        if s.eos is None and self.banned is None:
            raise UsageError(
                "profile llamacpp: the ids the server bans are not learned (Endpoint.check learns them)"
            )
        try:
            rows = answer["completion_probabilities"]
            got = [int(x) for x in answer["tokens"]]
            pairs = [[(int(e["id"]), float(e["logprob"])) for e in row["top_logprobs"]] for row in rows[:n]]
        except (KeyError, IndexError, TypeError, ValueError) as e:
            raise AnswerError(
                f"llama-server answer without its log-probabilities before the sampler: {str(answer)[:200]}"
            ) from e
        if len(pairs) != n or got[: n - 1] != [int(x) for x in context[prompt_len:]]:
            raise AnswerError(
                f"llama-server did not follow the forced path {list(context[prompt_len:])}: answered {got}"
            )
        out = []
        for row in pairs:
            logits = np.full(vocab, -math.inf)
            for i, lp in row:
                if not 0 <= i < vocab:
                    raise AnswerError(f"llama-server's log-probabilities name id {i}, outside [0, {vocab})")
                logits[i] = lp
            if len(row) < vocab:
                raise AnswerError(
                    f"llama-server gave {len(row)} of {vocab} log-probabilities (n_probs = V asked)"
                )
            if s.eos is None and self.banned:
                logits[list(self.banned)] = -math.inf
            out.append([float(v) for v in s.law(list(logits))])
        return out

    def read_generation(self, answer: Any, report: bool) -> Generation:
        from specproof.properties.engine.contract import Generation

        try:
            ids = tuple(int(x) for x in answer["tokens"])
            timings = answer.get("timings") or {}
        except (KeyError, TypeError, ValueError) as e:
            raise AnswerError(f"llama-server answer without its token ids: {str(answer)[:200]}") from e
        reported = None
        if report:
            probs = answer.get("completion_probabilities") or []
            reported = tuple(
                (float(p["prob"]) if isinstance(p, dict) and "prob" in p else None) for p in probs
            ) + (None,) * max(0, len(ids) - len(probs))
        drafted = int(timings.get("draft_n", 0))
        text = answer.get("content") if isinstance(answer.get("content"), str) else None
        accepted = int(timings.get("draft_n_accepted", 0))
        return Generation(ids, drafted, accepted, None, reported, None, text, cached=_cached(timings))

    def read_completions(self, answer: Any, report: bool) -> list[Generation]:
        """``n_cmpl`` > 1: a list of answers, each with its ``index``; 1: one answer."""
        if isinstance(answer, dict):
            return [self.read_generation(answer, report)]
        if not isinstance(answer, list) or not all(isinstance(a, dict) for a in answer):
            raise AnswerError(f"llama-server answer to n_cmpl is not a list of answers: {str(answer)[:200]}")
        try:
            ordered = sorted(answer, key=lambda a: int(a.get("index", 0)))
        except (TypeError, ValueError) as e:
            raise AnswerError(f"llama-server completions without an index: {str(answer)[:200]}") from e
        return [self.read_generation(a, report) for a in ordered]

    def stream_body(self, body: dict[str, Any]) -> dict[str, Any]:
        return {**body, "stream": True}

    def warm_body(self, body: dict[str, Any]) -> dict[str, Any]:
        """``cache_prompt``: the slot keeps the KV cache of its last request and reuses its common
        prefix with this one (the audit's other requests turn it off)."""
        return {**body, "cache_prompt": True}

    def read_stream(self, events: Sequence[Any], report: bool) -> Generation:
        """llama-server's events: each partial one carries ``tokens`` (its one token), ``content``
        and, when asked, its ``completion_probabilities``; the last (``stop`` true) the timings."""
        from specproof.properties.engine.contract import Generation

        try:
            parts = [e for e in events if not e.get("stop")]
            last = events[-1] if events and events[-1].get("stop") else {}
            ids = tuple(int(x) for e in parts for x in e.get("tokens") or ())
            text = "".join(str(e.get("content") or "") for e in parts)
            timings = last.get("timings") or {}
        except (AttributeError, TypeError, ValueError, IndexError) as err:
            raise AnswerError(f"llama-server stream without its token ids: {str(events)[:200]}") from err
        reported = None
        if report:
            probs = [p for e in parts for p in e.get("completion_probabilities") or ()]
            reported = tuple(
                (float(p["prob"]) if isinstance(p, dict) and "prob" in p else None) for p in probs
            ) + (None,) * max(0, len(ids) - len(probs))
        drafted = int(timings.get("draft_n", 0))
        accepted = int(timings.get("draft_n_accepted", 0))
        return Generation(ids, drafted, accepted, None, reported, None, text, cached=_cached(timings))

    def read_law(self, answer: Any, s: Sampling, vocab: int) -> list[float]:
        try:
            top = answer["completion_probabilities"][0]["top_probs"]
            pairs = [(int(e["id"]), float(e["prob"])) for e in top]
        except (KeyError, IndexError, TypeError, ValueError) as e:
            raise AnswerError(
                f"llama-server answer without post-sampling probabilities: {str(answer)[:200]}"
            ) from e
        return law_from_pairs(pairs, vocab, "llama-server's probabilities")

    def adapter_body(self, body: dict[str, Any], adapter: Sequence[tuple[int, float]]) -> dict[str, Any]:
        return {**body, "lora": [{"id": int(i), "scale": float(s)} for i, s in adapter]}

    def read_adapters(self, answer: Any) -> dict[int, float]:
        try:
            return {int(e["id"]): float(e.get("scale", 1.0)) for e in answer}
        except (KeyError, TypeError, ValueError) as e:
            raise AnswerError(f"GET /lora-adapters answered {str(answer)[:200]}") from e

    def identity(self, client: Client) -> dict[str, Any]:
        data = client.get("/v1/models")
        meta = (data.get("data") or [{}])[0].get("meta") or {}
        return {
            "vocab": meta.get("n_vocab"),
            "model": {k: meta.get(k) for k in ("n_vocab", "n_params", "size", "n_embd", "ftype")},
        }


def forced_grammar(tokens: Sequence[int]) -> str:
    """GBNF that forces ``tokens`` by id, then takes any token but the last forced one (a free
    token whose law is read and whose draw is never used)."""
    ids = " ".join(f"<[{int(t)}]>" for t in tokens)
    return f"root ::= {ids} !<[{int(tokens[-1])}]>\n"


#: a grammar :func:`forced_grammar` wrote: the forced ids, then the free token's exclusion
FORCED = re.compile(r"^root ::= ((?:<\[\d+\]> )+)!<\[(\d+)\]>\s*$")


def forced_path(grammar: Any) -> tuple[int, ...] | None:
    """The ids a grammar of :func:`forced_grammar`'s form forces (None: another grammar)."""
    m = FORCED.match(grammar) if isinstance(grammar, str) else None
    return None if m is None else tuple(int(x) for x in re.findall(r"<\[(\d+)\]>", m.group(1)))


def gbnf(g: Grammar, token_text: Sequence[str], state: int | None) -> str:
    """The grammar as llama.cpp's GBNF, rooted at ``state`` (the language that remains after the
    output so far): one rule per live state, an alternative per token that keeps the output in
    the language, and the empty string where the state accepts."""
    live = g.live
    if state is None or state not in live:
        return 'root ::= "" '  # the output left the language: only the end is left (no token)
    rules = [f"root ::= s{state}"]
    for s_ in sorted(live):
        alts = [f'"{_gbnf_literal(token_text[t])}" s{n}' for t, n in g.step[s_] if n in live]
        if s_ in g.accepting:
            alts.append('""')
        rules.append(f"s{s_} ::= " + " | ".join(alts))
    return "\n".join(rules) + "\n"


def _gbnf_literal(text: str) -> str:
    return text.replace("\\", "\\\\").replace('"', '\\"')


# --------------------------------------------------------------------------- the stand-in's answer


def completion(si: StandIn, body: dict[str, Any]) -> dict[str, Any] | wire.Events | list[Any]:
    """``POST /completion``: llama-server's answer (a list of answers for ``n_cmpl`` > 1)."""
    n_probs = body.get("n_probs") or 0
    if not isinstance(n_probs, int) or n_probs < 0:
        raise wire.RequestError(f"n_probs: expected an integer >= 0, got {n_probs!r}")
    ask = wire.Ask(
        wire.ids(body.get("prompt"), "prompt"),
        wire.count(body.get("n_predict"), "n_predict", 16),
        si.seed(body.get("seed")),
        si.sampling(
            body.get("temperature", 0.8),
            body.get("top_k", 40),
            body.get("top_p", 0.95),
            body.get("min_p", 0.05),
        ),
        n_probs > 0,
        stop=wire.stops(body.get("stop")),
        cache_prompt=bool(body.get("cache_prompt", True)),  # llama-server's default: on
        adapter=wire.adapters(body.get("lora"), si.adapters, 1.0),
        forced=forced_path(body.get("grammar")),
    )
    n = body.get("n_cmpl", 1)
    if not isinstance(n, int) or isinstance(n, bool) or n < 1:
        raise wire.RequestError(f"n_cmpl: expected an integer >= 1, got {n!r}")
    if n == 1:
        return _completed(si, body, ask, 0)
    if body.get("stream"):
        raise wire.RequestError("n_cmpl > 1 is not streamed by the stand-in")
    # completion j seeded by seed + j, as llama-server does; each after the first forked from it
    forks = [dataclasses.replace(ask, seed=si.fork_seed(ask.seed, j), forked=j > 0) for j in range(n)]
    return [_completed(si, body, a, j) for j, a in enumerate(forks)]


def _completed(si: StandIn, body: dict[str, Any], ask: wire.Ask, index: int) -> dict[str, Any] | wire.Events:
    """One completion's answer (completion ``index`` of its request)."""
    n_probs = body.get("n_probs") or 0
    post = bool(body.get("post_sampling_probs", False))
    d = si.run(ask)
    si.record("/completion", ask)
    out: dict[str, Any] = {
        "index": index,
        "content": "".join(si.texts[x] for x in d.tokens),
        "tokens": d.tokens,
        "id_slot": 0,
        "stop": True,
        "model": si.model_name,
        "tokens_predicted": len(d.tokens),
        "tokens_evaluated": len(ask.prompt),
        "generation_settings": {
            "n_predict": ask.tokens,
            "seed": ask.seed,
            "temperature": ask.sampling.temperature,
            "top_k": ask.sampling.top_k or 0,
            "top_p": ask.sampling.top_p or 1.0,
            "min_p": ask.sampling.min_p or 0.0,
            "n_probs": n_probs,
            "post_sampling_probs": post,
            "ignore_eos": bool(body.get("ignore_eos", False)),
        },
        "stop_type": "word" if d.stopped_by else "limit",
        "stopping_word": d.stopped_by or "",
        "truncated": False,
        "timings": {
            "cache_n": d.cached,
            "prompt_n": len(ask.prompt) - d.cached,
            "predicted_n": len(d.tokens),
        },
    }
    if si.speculative:
        out["timings"].update(draft_n=d.drafted, draft_n_accepted=d.accepted)
    if ask.report:
        out["completion_probabilities"] = [
            _probabilities(si, x, p, shown, raw, post, n_probs)
            for x, p, shown, raw in zip(d.tokens, d.reported, d.shown, d.raw)
        ]
    if body.get("stream") and si.streams:
        return _stream(si, out, d)
    return out


def _stream(si: StandIn, out: dict[str, Any], d: wire.Drawn) -> wire.Events:
    """llama-server's streamed answer: one event a token (its text, its id, its probabilities),
    then a last one with ``stop`` true, the timings, and neither text nor tokens."""
    probs = out.get("completion_probabilities")
    sent = list(range(len(d.tokens)))
    if si.bug == "stream_step_tail":  # bug: stream_step_tail
        ends = [sum(d.steps[: i + 1]) - 1 for i in range(len(d.steps))]
        sent = [i for i in sent if i in ends]
    events = wire.Events()
    for i in sent:
        x = d.tokens[i]
        e: dict[str, Any] = {"index": 0, "content": si.texts[x], "tokens": [x], "stop": False, "id_slot": 0}
        if probs is not None:
            e["completion_probabilities"] = [probs[i]]
        events.append(e)
    last = {k: v for k, v in out.items() if k != "completion_probabilities"}
    events.append({**last, "content": "", "tokens": []})
    return events


def _probabilities(si: StandIn, x: int, p: float, shown: Any, raw: Any, post: bool, n_probs: int) -> dict:
    """One emitted token's entry of ``completion_probabilities``."""

    def token(i: int) -> dict[str, Any]:
        return {"id": i, "token": si.texts[i], "bytes": list(si.texts[i].encode())}

    entry: dict[str, Any] = token(x)
    if post:
        entry["prob"] = p
        entry["top_probs"] = [{**token(i), "prob": q} for i, q in wire.top(shown, n_probs, nonzero=True)]
    else:  # the model's own log-probabilities, before the sampler chain
        entry["logprob"] = wire.logprob(float(raw[x]))
        entry["top_logprobs"] = [{**token(i), "logprob": wire.logprob(q)} for i, q in wire.top(raw, n_probs)]
    return entry


#: the paths the stand-in answers in this family's shape
ROUTES: dict[str, wire.Answer] = {"/completion": completion}


def _cached(timings: dict[str, Any]) -> int | None:
    """The prompt tokens served from the cache (``timings.cache_n``), None where not said."""
    return cached_count(timings.get("cache_n"))
