"""vLLM's OpenAI-compatible server: its profile and the stand-in's answer in its shape.

Law recipe: ``POST /v1/completions`` with ``logprobs: -1`` and token ids as keys: the processed
log-probability of every id; processed only on a server started with ``--logprobs-mode
processed_logprobs --max-logprobs -1``. Counters: ``metrics.speculative_decoding``
(``--per-request-spec-decode-metrics``). vLLM's repetition penalty counts the prompt and the
output; the cut-offs are sent as their neutral values (top-k off is -1). Stop strings go as
``stop`` on generations only (vLLM returns the stopping token's id, and leaves the stop string out
of the text). ``n`` asks for several completions; ``/metrics`` gives the speculation totals.

Prefix cache: vLLM reuses cached prompt blocks on its own (automatic prefix caching), so every
generation the audit sends carries a ``cache_salt`` of its own (a cache no other request shares:
served cold), and the prefix-cache axis's warm requests carry none (each finds the blocks the
requests before it left). The prompt tokens served from the cache are read from
``usage.prompt_tokens_details.cached_tokens``, which a server gives only with
``--enable-prompt-tokens-details``; a hit needs a prompt of at least one KV block (``--block-size``).
"""

from __future__ import annotations

import itertools
import math
import secrets
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, ClassVar

from specproof.properties.endpoint.families import wire
from specproof.properties.endpoint.families.base import (
    AnswerError,
    Profile,
    cached_count,
    knobs,
    law_from_pairs,
    prob,
    rebuilt_from_raw,
)
from specproof.properties.endpoint.families.openai import completions_head
from specproof.reference.sampling import Sampling

#: the stand-in's ``prefill_window`` bug: its prompt_logprobs past this many tokens are read from
#: the last ones alone (a prefill kernel with a sliding window that the decode path does not have)
PREFILL_WINDOW = 8

if TYPE_CHECKING:
    from specproof.properties.endpoint.client import Client
    from specproof.properties.endpoint.standin import StandIn
    from specproof.properties.engine.contract import Generation


#: what the report quotes of this family's law recipe
RECIPE = (
    "POST /v1/completions, one new token, logprobs: -1 with token ids as keys: the processed log-"
    "probability of every id (the server must run with --logprobs-mode processed_logprobs "
    "--max-logprobs -1); the first token is sampled before any draft exists. Under temperature and "
    "cut-offs alone, the laws along a sample come from one request: the sample as the prompt with "
    "prompt_logprobs: -1 (the raw law at each position, processed here by the setting's law) and the "
    "processed law after it"
)
#: the request parameters beyond the cut-offs it takes
OFFERS: tuple[str, ...] = (
    "repetition_penalty", "presence_penalty", "frequency_penalty", "logit_bias", "min_new_tokens", "eos",
    "repetition_scope", "presence_scope", "stop",
)  # fmt: skip


#: each cold generation's cache salt: this process's token and a count (unique across runs and
#: servers; a salt changes where a prompt is cached, never what is sampled)
_SALT_TOKEN = secrets.token_hex(6)
_SALTS = itertools.count()


class VLLM(Profile, family="vllm", recipe=RECIPE, counters=True, offers=OFFERS):
    #: the prefix-cache axis: cold requests salted apart, warm ones unsalted (module docstring)
    caches: ClassVar[bool] = True
    #: n completions a request: vLLM's child requests, completion j seeded by seed + j (and no
    #: per-request metrics for the parent: the completions' counters are not observable)
    completions: ClassVar[str | None] = "n"
    build_route: ClassVar[tuple[str, str] | None] = ("/version", "version")
    no_draft_hint: ClassVar[str] = (
        "vllm serve drafts only with --speculative-config (a method and its num_speculative_tokens); and its "
        "answers carry counters only with --per-request-spec-decode-metrics summary"
    )
    #: vLLM's Prometheus page (its counters are summed over engines and models)
    metrics: ClassVar[tuple[str, str, str] | None] = (
        "/metrics",
        "vllm:spec_decode_num_draft_tokens_total",
        "vllm:spec_decode_num_accepted_tokens_total",
    )

    def _sampling(self, s: Sampling) -> dict[str, Any]:
        self.check_offered(s)
        body: dict[str, Any] = {
            **knobs(s, top_k_off=-1),
            "ignore_eos": s.eos is None,
            "min_tokens": s.min_new_tokens,
            "return_token_ids": True,
            "return_tokens_as_token_ids": True,
        }
        if s.logit_bias:
            body["logit_bias"] = {str(t): max(b, -100.0) for t, b in s.logit_bias}
        return body

    def _base(self) -> dict[str, Any]:
        return {"model": self.model} if self.model else {}

    def generation(
        self, prompt: Sequence[int], tokens: int, seed: int, s: Sampling, report: bool
    ) -> tuple[str, dict[str, Any]]:
        body = {**self._base(), "prompt": list(prompt), "max_tokens": tokens, "seed": self.seed(seed)}
        body.update(self._sampling(s))
        if s.stop:  # on generations only: a law request's one token is read before any stop
            body["stop"] = list(s.stop)
        if report:
            body["logprobs"] = 1
        body["cache_salt"] = f"specproof-{_SALT_TOKEN}-{next(_SALTS)}"  # cold: no other request's cache
        return "/v1/completions", {**body, **self.extra}

    def warm_body(self, body: dict[str, Any]) -> dict[str, Any]:
        """No ``cache_salt``: the request shares vLLM's prefix cache with every other unsalted one
        (the case's earlier warm requests left its prompt's blocks there)."""
        return {k: v for k, v in body.items() if k != "cache_salt"}

    def law_request(
        self, context: Sequence[int], s: Sampling, vocab: int, prompt_len: int | None = None
    ) -> tuple[str, dict[str, Any]]:
        body = {**self._base(), "prompt": list(context), "max_tokens": 1, "seed": 0, "logprobs": -1}
        body.update(self._sampling(s))
        return "/v1/completions", {**body, **self.extra}

    def laws_along_request(
        self, context: Sequence[int], s: Sampling, vocab: int, prompt_len: int
    ) -> tuple[str, dict[str, Any]] | None:
        """The context as a prompt with ``prompt_logprobs: -1`` (every id's raw log-probability
        at each of its positions) and one new token with ``logprobs: -1`` (the processed law
        after the whole context): one request for the laws after every prefix of a sample."""
        if not rebuilt_from_raw(s) or s.greedy:
            return None
        path, body = self.law_request(context, s, vocab, prompt_len)
        return path, {**body, "prompt_logprobs": -1}

    def read_laws_along(
        self, answer: Any, s: Sampling, vocab: int, context: Sequence[int], prompt_len: int
    ) -> list[list[float]]:
        try:
            rows = answer["choices"][0]["prompt_logprobs"]
            raw = [rows[j] for j in range(prompt_len, len(context))]
            pairs = [[(int(k), float(v["logprob"])) for k, v in row.items()] for row in raw]
        except (KeyError, IndexError, TypeError, ValueError, AttributeError) as e:
            raise AnswerError(
                f"vLLM answer without prompt_logprobs keyed by token ids: {str(answer)[:200]}"
            ) from e
        out = []
        for j, row in zip(range(prompt_len, len(context)), pairs):
            logits = [-math.inf] * vocab
            for i, lp in row:
                if not 0 <= i < vocab:
                    raise AnswerError(
                        f"vLLM's prompt_logprobs name id {i}, outside the vocabulary [0, {vocab})"
                    )
                logits[i] = lp
            if len(row) < vocab:
                raise AnswerError(
                    f"vLLM's prompt_logprobs after {list(context[:j])} give {len(row)} of {vocab} ids "
                    "(the server must run with --max-logprobs -1)"
                )
            out.append([float(x) for x in s.law(logits, tuple(context[:j]), prompt_len)])
        out.append(self.read_law(answer, s, vocab))  # after the whole context: the processed law
        return out

    def read_generation(self, answer: Any, report: bool) -> Generation:
        from specproof.properties.engine.contract import Generation

        try:
            choice = answer["choices"][0]
            ids = tuple(int(x) for x in choice["token_ids"])
        except (KeyError, IndexError, TypeError, ValueError) as e:
            raise AnswerError(f"vLLM answer without token_ids (return_token_ids): {str(answer)[:200]}") from e
        spec = ((answer.get("metrics") or {}).get("speculative_decoding")) or None
        drafted = None if spec is None else int(spec.get("num_draft_tokens", 0))
        accepted = None if spec is None else int(spec.get("num_accepted_draft_tokens", 0))
        reported = None
        if report:
            lp = (choice.get("logprobs") or {}).get("token_logprobs") or []
            reported = tuple(prob(x) if x is not None else None for x in lp)
        return Generation(ids, drafted, accepted, None, reported, cached=_cached(answer))

    def read_completions(self, answer: Any, report: bool) -> list[Generation]:
        """``n`` > 1: one choice a completion, by ``index``; the parent's metrics (absent) for each."""
        try:
            choices = sorted(answer["choices"], key=lambda c: int(c.get("index", 0)))
        except (KeyError, TypeError, ValueError, AttributeError) as e:
            raise AnswerError(f"vLLM answer without its choices: {str(answer)[:200]}") from e
        return [self.read_generation({**answer, "choices": [c]}, report) for c in choices]

    def read_law(self, answer: Any, s: Sampling, vocab: int) -> list[float]:
        try:
            top = answer["choices"][0]["logprobs"]["top_logprobs"][0]
            pairs = [(int(str(k).rsplit(":", 1)[-1]), prob(v)) for k, v in top.items()]
        except (KeyError, IndexError, TypeError, ValueError, AttributeError) as e:
            raise AnswerError(
                f"vLLM answer without top_logprobs keyed by token ids: {str(answer)[:200]}"
            ) from e
        return law_from_pairs(pairs, vocab, "vLLM's logprobs")

    def identity(self, client: Client) -> dict[str, Any]:
        data = client.get("/v1/models")
        first = (data.get("data") or [{}])[0]
        return {
            "vocab": None,
            "model": {"id": first.get("id"), "root": first.get("root")},
            "learned": {"model": first.get("id")},
        }


def _cached(answer: Any) -> int | None:
    """The prompt tokens served from the prefix cache (``usage.prompt_tokens_details.cached_tokens``;
    None where the server does not say: it runs without ``--enable-prompt-tokens-details``)."""
    details = (answer.get("usage") or {}).get("prompt_tokens_details") or {}
    return cached_count(details.get("cached_tokens") if isinstance(details, dict) else None)


# --------------------------------------------------------------------------- the stand-in's answer


def asks_vllm(body: dict[str, Any]) -> bool:
    """Whether a ``/v1/completions`` request is vLLM's (it asks for token ids)."""
    return "return_token_ids" in body or "return_tokens_as_token_ids" in body


def completions(si: StandIn, body: dict[str, Any]) -> dict[str, Any]:
    """``POST /v1/completions`` as vLLM answers a request for token ids; with ``n`` > 1, choice j
    as the request seeded seed + j answers it (vLLM's child requests), and no per-request
    metrics (vLLM gives none for a parent request)."""
    n = body.get("n", 1)
    if not isinstance(n, int) or isinstance(n, bool) or n < 1:
        raise wire.RequestError(f"n: expected an integer >= 1, got {n!r}")
    if n > 1:
        seed = si.seed(body.get("seed"))
        parts = [completions(si, {**body, "n": 1, "seed": si.fork_seed(seed, j)}) for j in range(n)]
        out = {k: v for k, v in parts[0].items() if k != "metrics"}
        out["choices"] = [{**p["choices"][0], "index": j} for j, p in enumerate(parts)]
        out["metrics"] = None
        return out
    salt = body.get("cache_salt")
    if salt is not None and (not isinstance(salt, str) or not salt):
        raise wire.RequestError("Parameter 'cache_salt' must be a non-empty string if provided.")
    # vLLM caches every prompt's blocks by itself; a salted request shares them with no other
    ask, d, choice, out, n_top = completions_head(si, body, cache_prompt=salt is None)
    out["usage"]["prompt_tokens_details"] = {"cached_tokens": d.cached}
    as_ids = bool(body.get("return_tokens_as_token_ids"))

    def key(i: int) -> str:
        return f"token_id:{i}" if as_ids else si.texts[i]

    choice["token_ids"] = d.tokens
    if body.get("return_token_ids"):
        choice["prompt_token_ids"] = list(ask.prompt)
    if body.get("prompt_logprobs") is not None:  # the raw law at each position of the prompt
        rows: list[dict[str, Any] | None] = [None]
        along: Any = si.model.logits_along(ask.prompt[:1], ask.prompt[1:]) if len(ask.prompt) > 1 else []
        if si.bug == "prefill_window":  # past PREFILL_WINDOW tokens, the prefill reads the last ones alone
            along = [
                si.model.logits(tuple(ask.prompt[max(0, k + 1 - PREFILL_WINDOW) : k + 1]))
                for k in range(len(along))
            ]  # bug: prefill_window
        for z in along:  # after each prefix of the prompt, read in one forward
            raw = si.model.law_of(z, Sampling(1.0))
            ranked = sorted(range(len(raw)), key=lambda i: -float(raw[i]))
            rows.append(
                {
                    str(i): {
                        "logprob": wire.logprob(float(raw[i])),
                        "rank": r + 1,
                        "decoded_token": si.texts[i],
                    }
                    for r, i in enumerate(ranked)
                }
            )
        choice["prompt_logprobs"] = rows
    if ask.report:
        tops = []
        for x, shown in zip(d.tokens, d.shown):
            top = {key(i): wire.logprob(q) for i, q in wire.top(shown, n_top)}
            top[key(x)] = wire.logprob(float(shown[x]))  # vLLM lists the sampled token too
            tops.append(top)
        choice["logprobs"] = {
            "text_offset": list(range(len(d.tokens))),
            "token_logprobs": [wire.logprob(p) for p in d.reported],
            "tokens": [key(x) for x in d.tokens],
            "top_logprobs": tops,
        }
    if si.speculative:
        out["metrics"] = {
            "speculative_decoding": {
                "num_drafts": 0 if not d.drafted else -(-d.drafted // 3),
                "num_draft_tokens": d.drafted,
                "num_accepted_draft_tokens": d.accepted,
            }
        }
    return out


#: the paths the stand-in answers in this family's shape (on a request that asks for token ids)
ROUTES: dict[str, wire.Answer] = {"/v1/completions": completions}
