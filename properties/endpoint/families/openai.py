"""Generic OpenAI-style servers (``POST /v1/completions``): their profile and the stand-in's
answer in the standard shape (token texts, ``token_logprobs``, ``top_logprobs`` keyed by text), or
in llama-server's OpenAI-compatible shape (a ``content`` list with ids).

Law recipe: ``logprobs`` = V: the alternatives the server returns, which must carry the whole law
(the standard caps them at 5; the audit refuses a law they do not cover); tokens read back through
a token map (id -> text). No counters. :func:`completions_head` is the part of the answer every
OpenAI-compatible family shares (vLLM's adds its own fields to it).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from specproof.properties.endpoint.families import wire
from specproof.properties.endpoint.families.base import AnswerError, Profile, law_from_pairs, prob
from specproof.reference.errors import SpecproofError, UsageError
from specproof.reference.sampling import Sampling

if TYPE_CHECKING:
    from specproof.properties.endpoint.client import Client
    from specproof.properties.endpoint.standin import StandIn
    from specproof.properties.engine.contract import Generation


#: what the report quotes of this family's law recipe
RECIPE = (
    "POST /v1/completions, one new token, logprobs = V: the alternatives the server returns, which "
    "must carry the whole law (the standard caps them at 5; the audit refuses a law they do not cover)"
)
#: the request parameters beyond the cut-offs it takes
OFFERS: tuple[str, ...] = (
    "presence_penalty",
    "frequency_penalty",
    "logit_bias",
    "presence_scope",
)


class OpenAI(Profile, family="openai", recipe=RECIPE, counters=False, offers=OFFERS):
    def generation(
        self, prompt: Sequence[int], tokens: int, seed: int, s: Sampling, report: bool
    ) -> tuple[str, dict[str, Any]]:
        body: dict[str, Any] = {"prompt": list(prompt), "max_tokens": tokens, "seed": self.seed(seed)}
        if self.model:
            body["model"] = self.model
        self.check_offered(s)
        body.update(temperature=s.temperature, top_p=1.0 if s.top_p is None else s.top_p, logprobs=1)
        if s.top_k is not None:
            body["top_k"] = s.top_k
        if s.min_p:
            body["min_p"] = s.min_p
        if s.presence_penalty or s.frequency_penalty:
            body.update(presence_penalty=s.presence_penalty, frequency_penalty=s.frequency_penalty)
        if s.logit_bias:
            body["logit_bias"] = {str(t): max(b, -100.0) for t, b in s.logit_bias}
        return "/v1/completions", {**body, **self.extra}

    def law_request(
        self, context: Sequence[int], s: Sampling, vocab: int, prompt_len: int | None = None
    ) -> tuple[str, dict[str, Any]]:
        path, body = self.generation(context, 1, 0, s, report=True)
        body["logprobs"] = vocab
        return path, body

    def _id(self, entry: Any) -> int:
        if isinstance(entry, dict) and "id" in entry:
            return int(entry["id"])
        text = entry.get("token") if isinstance(entry, dict) else entry
        if self.token_map is None:
            raise UsageError(
                "token map: this server answers with token texts; give the vocabulary (id -> text)"
            )
        try:
            return self.token_map.index(str(text))
        except ValueError as e:
            raise AnswerError(f"token text {text!r} is not in the token map") from e

    def _entries(self, answer: Any) -> list[Any]:
        lp = answer["choices"][0]["logprobs"]
        if lp.get("content") is not None:  # the chat-style list some servers return
            return list(lp["content"])
        tokens, values = lp["tokens"], lp.get("token_logprobs") or [None] * len(lp["tokens"])
        tops = lp.get("top_logprobs") or [None] * len(tokens)
        return [{"token": t, "logprob": v, "top": top} for t, v, top in zip(tokens, values, tops)]

    def read_generation(self, answer: Any, report: bool) -> Generation:
        from specproof.properties.engine.contract import Generation

        try:
            entries = self._entries(answer)
        except (KeyError, IndexError, TypeError) as e:
            raise AnswerError(f"OpenAI-style answer without logprobs tokens: {str(answer)[:200]}") from e
        ids = tuple(self._id(e) for e in entries)
        reported = None
        if report:
            reported = tuple(float(e["prob"]) if "prob" in e else prob(e.get("logprob")) for e in entries)
        return Generation(ids, None, None, None, reported)

    def read_law(self, answer: Any, s: Sampling, vocab: int) -> list[float]:
        try:
            first = self._entries(answer)[0]
        except (KeyError, IndexError, TypeError) as e:
            raise AnswerError(f"OpenAI-style answer without logprobs: {str(answer)[:200]}") from e
        if "top_probs" in first:
            pairs = [(self._id(e), float(e["prob"])) for e in first["top_probs"]]
        elif first.get("top_logprobs") is not None:
            pairs = [(self._id(e), prob(e.get("logprob"))) for e in first["top_logprobs"]]
        else:
            pairs = [(self._id(t), prob(v)) for t, v in (first.get("top") or {}).items()]
        law = law_from_pairs(pairs, vocab, "the server's top logprobs")
        mass = sum(law)
        if abs(mass - 1) > 1e-4:
            raise UsageError(
                f"profile openai: the server's alternatives carry {mass:.4f} of the law's mass, not all of "
                "it: the law cannot be read this way; use a family profile or a twin that can"
            )
        return law

    def identity(self, client: Client) -> dict[str, Any]:
        try:
            data = client.get("/v1/models")
        except SpecproofError:
            return {"vocab": len(self.token_map) if self.token_map else None}
        first = (data.get("data") or [{}])[0]
        vocab = len(self.token_map) if self.token_map else (first.get("meta") or {}).get("n_vocab")
        return {"vocab": vocab, "model": {"id": first.get("id")}, "learned": {"model": first.get("id")}}


# --------------------------------------------------------------------------- the stand-in's answer


def completions_head(
    si: StandIn, body: dict[str, Any], cache_prompt: bool = False
) -> tuple[wire.Ask, wire.Drawn, dict, dict, int | None]:
    """What every OpenAI-compatible answer holds: the request read, drawn and recorded, its one
    choice and the answer around it, and how many alternatives were asked (None: all);
    ``cache_prompt``: the request may reuse the stand-in's cached prompt (vLLM's unsalted ones)."""
    model = body.get("model")
    if model is not None and model != si.model_name:
        raise wire.RequestError(f"The model `{model}` does not exist.", 404)
    logprobs = body.get("logprobs")
    if logprobs is not None and (not isinstance(logprobs, int) or logprobs < -1):
        raise wire.RequestError(f"logprobs: expected an integer >= -1, got {logprobs!r}")
    ask = wire.Ask(
        wire.ids(body.get("prompt"), "prompt"),
        wire.count(body.get("max_tokens"), "max_tokens", 16),
        si.seed(body.get("seed")),
        si.sampling(body.get("temperature"), body.get("top_k"), body.get("top_p"), body.get("min_p")),
        logprobs is not None,
        stop=wire.stops(body.get("stop")),
        cache_prompt=cache_prompt,
    )
    d = si.run(ask)
    si.record("/v1/completions", ask)
    text = "".join(si.texts[x] for x in d.tokens)
    if d.stopped_by and text.endswith(d.stopped_by):  # the stop string is left out, as vLLM and OpenAI do
        text = text[: -len(d.stopped_by)]
    choice: dict[str, Any] = {
        "index": 0,
        "text": text,
        "logprobs": None,
        "finish_reason": "stop" if d.stopped_by else "length",
    }
    if d.stopped_by:
        choice["stop_reason"] = d.stopped_by
    out: dict[str, Any] = {
        "id": f"cmpl-{ask.seed:x}",
        "object": "text_completion",
        "created": int(time.time()),
        "model": si.model_name,
        "choices": [choice],
        "usage": {
            "prompt_tokens": len(ask.prompt),
            "completion_tokens": len(d.tokens),
            "total_tokens": len(ask.prompt) + len(d.tokens),
        },
    }
    return ask, d, choice, out, None if logprobs == -1 else logprobs


def completions(si: StandIn, body: dict[str, Any]) -> dict[str, Any]:
    """``POST /v1/completions``: the generic OpenAI answer (``openai_style="standard"``), or
    llama-server's OpenAI-compatible one (``"llamacpp"``)."""
    ask, d, choice, out, n_top = completions_head(si, body)
    if ask.report and si.openai_style == "llamacpp":

        def token(i: int) -> dict[str, Any]:
            return {"id": i, "token": si.texts[i], "bytes": list(si.texts[i].encode())}

        choice["logprobs"] = {
            "content": [
                {
                    **token(x),
                    "logprob": wire.logprob(p),
                    "top_logprobs": [
                        {**token(i), "logprob": wire.logprob(q)} for i, q in wire.top(shown, n_top)
                    ],
                }
                for x, p, shown in zip(d.tokens, d.reported, d.shown)
            ]
        }
    elif ask.report:
        choice["logprobs"] = {
            "text_offset": list(range(len(d.tokens))),
            "token_logprobs": [wire.logprob(p) for p in d.reported],
            "tokens": [si.texts[x] for x in d.tokens],
            "top_logprobs": [
                {si.texts[i]: wire.logprob(q) for i, q in wire.top(shown, n_top)} for shown in d.shown
            ],
        }
    return out


#: the paths the stand-in answers in this family's shape (vLLM's requests, which ask for token
#: ids, are answered by :mod:`.vllm` on the same path)
ROUTES: dict[str, wire.Answer] = {"/v1/completions": completions}
