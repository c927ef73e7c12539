"""How each server family is asked for what the endpoint audit needs.

A :class:`Profile` knows, for one family of servers, how to request M new tokens after a prompt
of token ids under a seed and a sampling setting (and, on request, the probability of each
emitted token), how to read the token ids and the server's draft and acceptance counters back,
and its **law recipe**: how to read the engine's own next-token law after a context, processed
by the same sampling setting, without speculation. Every recipe asks for one new token: a server
samples the first token of a request from the prompt's forward pass, before any draft exists, so
that law is the non-speculative one, and the answer's own counters confirm nothing was drafted.

=========  ==================================================================================
profile    law recipe, counters, reports
=========  ==================================================================================
llamacpp   ``POST /completion`` with ``n_probs`` = V and ``post_sampling_probs``: every id's
           probability after the server's whole sampler chain. Counters: ``timings.draft_n``,
           ``timings.draft_n_accepted``. Reports: ``completion_probabilities[i].prob``.
vllm       ``POST /v1/completions`` with ``logprobs: -1`` and token ids as keys; processed only
           on a server started with ``--logprobs-mode processed_logprobs --max-logprobs -1``.
           Counters: ``metrics.speculative_decoding`` (``--per-request-spec-decode-metrics``).
sglang     ``POST /generate`` with ``top_logprobs_num`` = V: the law after temperature, before
           SGLang's cut-offs, which the profile applies as its non-speculative sampler does
           (top-k and top-p jointly on the tempered law, then min-p). Counters:
           ``meta_info.spec_num_proposed_drafts``, ``spec_num_correct_drafts``.
openai     ``POST /v1/completions`` with ``logprobs`` = V: usable only where the server returns
           that many alternatives (the standard caps it at 5); tokens read back through a token
           map (id -> text). No counters.
=========  ==================================================================================

Unspecified cut-offs are sent as their neutral values, so a setting means what it says and not a
server default (llama.cpp's defaults are T 0.8, top-k 40, top-p 0.95, min-p 0.05). Until the
audit takes sequences that end early, end of sequence is banned alike in every request
(``ignore_eos``), so the law read and the law sampled are the same law.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from specproof.properties.endpoint.client import Client
from specproof.properties.engine.contract import Generation, Sampling
from specproof.reference.errors import SpecproofError, UsageError

#: seeds are mapped into this range (below llama.cpp's "random seed" value 2**32 - 1)
SEED_RANGE = 2**32 - 2


class AnswerError(SpecproofError):
    """A server's answer without what the profile reads from it (a field missing, ids not ids)."""


def _neg_inf_safe_exp(x: float | None) -> float:
    if x is None or (isinstance(x, float) and math.isinf(x) and x < 0):
        return 0.0
    return float(math.exp(float(x)))


@dataclass
class Profile:
    """The base: subclasses fill the requests and read the answers."""

    name: str = "base"
    recipe: str = ""
    counters: bool = False  # whether answers carry draft and acceptance counters
    reports: bool = True  # whether a request can ask for each emitted token's probability
    token_map: list[str] | None = None  # id -> text, for servers that answer with text only
    model: str | None = None  # the model name requests must carry (OpenAI-style servers)
    extra: dict[str, Any] = field(default_factory=dict)  # fields added to every request

    # -- the requests -------------------------------------------------------------------------

    def generation(
        self, prompt: Sequence[int], tokens: int, seed: int, s: Sampling, report: bool
    ) -> tuple[str, dict[str, Any]]:
        raise NotImplementedError

    def law_request(self, context: Sequence[int], s: Sampling, vocab: int) -> tuple[str, dict[str, Any]]:
        raise NotImplementedError

    # -- the answers --------------------------------------------------------------------------

    def read_generation(self, answer: Any, report: bool) -> Generation:
        raise NotImplementedError

    def read_law(self, answer: Any, s: Sampling, vocab: int) -> list[float]:
        raise NotImplementedError

    def law_drafted(self, answer: Any) -> int:
        """Draft tokens the answer to a law request says were proposed (0 when it says none)."""
        g = self.read_generation(answer, report=False)
        return g.drafted or 0

    def identity(self, client: Client) -> dict[str, Any]:
        """What the server says it serves: ``vocab`` (None when it does not say) and whatever
        names the model, to compare an endpoint with its twin."""
        return {"vocab": None}

    def reports_checkable(self, s: Sampling) -> bool:
        """Whether this family's reported probabilities are the sampled law under ``s``."""
        return self.reports

    def describe(self) -> dict[str, Any]:
        return {"profile": self.name, "recipe": self.recipe, "counters": self.counters}

    @staticmethod
    def seed(seed: int) -> int:
        return int(seed) % SEED_RANGE


def _law_from_pairs(pairs: Sequence[tuple[int, float]], vocab: int, where: str) -> list[float]:
    law = np.zeros(vocab, dtype=np.float64)
    for tid, p in pairs:
        if not 0 <= tid < vocab:
            raise AnswerError(f"{where}: id {tid} outside [0, {vocab})")
        law[tid] += p
    return [float(v) for v in law]


# --------------------------------------------------------------------------- llama.cpp


@dataclass
class LlamaCpp(Profile):
    name: str = "llamacpp"
    recipe: str = (
        "POST /completion, one new token, n_probs = V, post_sampling_probs: the probability of every id "
        "after llama-server's own sampler chain at that context (the first token of a request is sampled "
        "before any draft exists; its answer reports draft_n absent or 0)"
    )
    counters: bool = True

    def _sampling(self, s: Sampling) -> dict[str, Any]:
        return {
            "temperature": s.temperature,
            "top_k": s.top_k or 0,
            "top_p": 1.0 if s.top_p is None else s.top_p,
            "min_p": s.min_p or 0.0,
            "typical_p": 1.0,
            "repeat_penalty": 1.0,
            "repeat_last_n": 0,
            "presence_penalty": 0.0,
            "frequency_penalty": 0.0,
            "dry_multiplier": 0.0,
            "xtc_probability": 0.0,
            "top_n_sigma": -1.0,
            "mirostat": 0,
            "ignore_eos": True,
            "cache_prompt": False,
            "return_tokens": True,
        }

    def generation(
        self, prompt: Sequence[int], tokens: int, seed: int, s: Sampling, report: bool
    ) -> tuple[str, dict[str, Any]]:
        body = {"prompt": list(prompt), "n_predict": tokens, "seed": self.seed(seed), **self._sampling(s)}
        if report:
            body.update(n_probs=1, post_sampling_probs=True)
        return "/completion", {**body, **self.extra}

    def law_request(self, context: Sequence[int], s: Sampling, vocab: int) -> tuple[str, dict[str, Any]]:
        body = {"prompt": list(context), "n_predict": 1, "seed": 0, **self._sampling(s)}
        body.update(n_probs=vocab, post_sampling_probs=True)
        return "/completion", {**body, **self.extra}

    def read_generation(self, answer: Any, report: bool) -> Generation:
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
        return Generation(ids, drafted, int(timings.get("draft_n_accepted", 0)), None, reported)

    def read_law(self, answer: Any, s: Sampling, vocab: int) -> list[float]:
        try:
            top = answer["completion_probabilities"][0]["top_probs"]
            pairs = [(int(e["id"]), float(e["prob"])) for e in top]
        except (KeyError, IndexError, TypeError, ValueError) as e:
            raise AnswerError(
                f"llama-server answer without post-sampling probabilities: {str(answer)[:200]}"
            ) from e
        return _law_from_pairs(pairs, vocab, "llama-server's probabilities")

    def identity(self, client: Client) -> dict[str, Any]:
        data = client.get("/v1/models")
        meta = (data.get("data") or [{}])[0].get("meta") or {}
        return {
            "vocab": meta.get("n_vocab"),
            "model": {k: meta.get(k) for k in ("n_vocab", "n_params", "size", "n_embd", "ftype")},
        }


# --------------------------------------------------------------------------- vLLM


@dataclass
class VLLM(Profile):
    name: str = "vllm"
    recipe: str = (
        "POST /v1/completions, one new token, logprobs: -1 with token ids as keys: the processed log-"
        "probability of every id (the server must run with --logprobs-mode processed_logprobs "
        "--max-logprobs -1); the first token is sampled before any draft exists"
    )
    counters: bool = True

    def _sampling(self, s: Sampling) -> dict[str, Any]:
        return {
            "temperature": s.temperature,
            "top_k": s.top_k or -1,
            "top_p": 1.0 if s.top_p is None else s.top_p,
            "min_p": s.min_p or 0.0,
            "repetition_penalty": 1.0,
            "presence_penalty": 0.0,
            "frequency_penalty": 0.0,
            "ignore_eos": True,
            "return_token_ids": True,
            "return_tokens_as_token_ids": True,
        }

    def _base(self) -> dict[str, Any]:
        return {"model": self.model} if self.model else {}

    def generation(
        self, prompt: Sequence[int], tokens: int, seed: int, s: Sampling, report: bool
    ) -> tuple[str, dict[str, Any]]:
        body = {**self._base(), "prompt": list(prompt), "max_tokens": tokens, "seed": self.seed(seed)}
        body.update(self._sampling(s))
        if report:
            body["logprobs"] = 1
        return "/v1/completions", {**body, **self.extra}

    def law_request(self, context: Sequence[int], s: Sampling, vocab: int) -> tuple[str, dict[str, Any]]:
        body = {**self._base(), "prompt": list(context), "max_tokens": 1, "seed": 0, "logprobs": -1}
        body.update(self._sampling(s))
        return "/v1/completions", {**body, **self.extra}

    def read_generation(self, answer: Any, report: bool) -> Generation:
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
            reported = tuple(_neg_inf_safe_exp(x) if x is not None else None for x in lp)
        return Generation(ids, drafted, accepted, None, reported)

    def read_law(self, answer: Any, s: Sampling, vocab: int) -> list[float]:
        try:
            top = answer["choices"][0]["logprobs"]["top_logprobs"][0]
            pairs = [(int(str(k).rsplit(":", 1)[-1]), _neg_inf_safe_exp(v)) for k, v in top.items()]
        except (KeyError, IndexError, TypeError, ValueError, AttributeError) as e:
            raise AnswerError(
                f"vLLM answer without top_logprobs keyed by token ids: {str(answer)[:200]}"
            ) from e
        return _law_from_pairs(pairs, vocab, "vLLM's logprobs")

    def identity(self, client: Client) -> dict[str, Any]:
        data = client.get("/v1/models")
        first = (data.get("data") or [{}])[0]
        if self.model is None:
            self.model = first.get("id")
        return {"vocab": None, "model": {"id": first.get("id"), "root": first.get("root")}}


# --------------------------------------------------------------------------- SGLang


@dataclass
class SGLang(Profile):
    name: str = "sglang"
    recipe: str = (
        "POST /generate, one new token, top_logprobs_num = V: the law after temperature (SGLang returns "
        "log-probabilities before its cut-offs), then top-k and top-p applied jointly to it and min-p "
        "after, as SGLang's non-speculative sampler does"
    )
    counters: bool = True

    def _sampling(self, s: Sampling, tokens: int, seed: int) -> dict[str, Any]:
        return {
            "max_new_tokens": tokens,
            "temperature": s.temperature,
            "top_k": s.top_k or -1,
            "top_p": 1.0 if s.top_p is None else s.top_p,
            "min_p": s.min_p or 0.0,
            "repetition_penalty": 1.0,
            "presence_penalty": 0.0,
            "frequency_penalty": 0.0,
            "ignore_eos": True,
            "sampling_seed": self.seed(seed),
        }

    def generation(
        self, prompt: Sequence[int], tokens: int, seed: int, s: Sampling, report: bool
    ) -> tuple[str, dict[str, Any]]:
        body: dict[str, Any] = {"input_ids": list(prompt), "sampling_params": self._sampling(s, tokens, seed)}
        if report:
            body.update(return_logprob=True, logprob_start_len=-1)
        return "/generate", {**body, **self.extra}

    def law_request(self, context: Sequence[int], s: Sampling, vocab: int) -> tuple[str, dict[str, Any]]:
        neutral = Sampling(s.temperature or 1.0)
        body = {
            "input_ids": list(context),
            "sampling_params": self._sampling(neutral, 1, 0),
            "return_logprob": True,
            "top_logprobs_num": vocab,
            "logprob_start_len": -1,
        }
        return "/generate", {**body, **self.extra}

    def read_generation(self, answer: Any, report: bool) -> Generation:
        try:
            ids = tuple(int(x) for x in answer["output_ids"])
            meta = answer.get("meta_info") or {}
        except (KeyError, TypeError, ValueError) as e:
            raise AnswerError(f"SGLang answer without output_ids: {str(answer)[:200]}") from e
        # SGLang leaves the counters out when nothing was verified: that is 0 drafted, not unknown
        drafted = int(meta.get("spec_num_proposed_drafts", 0))
        accepted = int(meta.get("spec_num_correct_drafts", 0))
        reported = None
        if report:
            reported = tuple(_neg_inf_safe_exp(e[0]) for e in meta.get("output_token_logprobs") or [])
        return Generation(ids, drafted, accepted, None, reported)

    def read_law(self, answer: Any, s: Sampling, vocab: int) -> list[float]:
        try:
            top = answer["meta_info"]["output_top_logprobs"][0]
            pairs = [(int(e[1]), _neg_inf_safe_exp(e[0])) for e in top]
        except (KeyError, IndexError, TypeError, ValueError) as e:
            raise AnswerError(f"SGLang answer without output_top_logprobs: {str(answer)[:200]}") from e
        tempered = np.asarray(_law_from_pairs(pairs, vocab, "SGLang's logprobs"))
        return _joint_cutoffs(tempered / tempered.sum(), s)

    def reports_checkable(self, s: Sampling) -> bool:
        return not s.truncated  # its reports are the law before the cut-offs

    def identity(self, client: Client) -> dict[str, Any]:
        info = client.get("/get_model_info")
        return {"vocab": None, "model": {"path": info.get("model_path")}}


def _joint_cutoffs(p: np.ndarray, s: Sampling) -> list[float]:
    """Top-k and top-p decided together on ``p`` (a token survives both), then min-p."""
    if s.greedy:
        out = np.zeros_like(p)
        out[int(np.argmax(p))] = 1.0
        return [float(v) for v in out]
    keep = np.ones(len(p), dtype=bool)
    order = np.argsort(-p, kind="stable")
    if s.top_k is not None:
        keep[order[s.top_k :]] = False
    if s.top_p is not None and s.top_p < 1:
        above = np.concatenate([[0.0], np.cumsum(p[order])[:-1]])
        keep[order[above >= s.top_p]] = False
    q = np.where(keep, p, 0.0)
    if s.min_p:
        q = np.where(q >= s.min_p * q.max(), q, 0.0)
    return [float(v) for v in q / q.sum()]


# --------------------------------------------------------------------------- generic OpenAI


@dataclass
class OpenAI(Profile):
    name: str = "openai"
    recipe: str = (
        "POST /v1/completions, one new token, logprobs = V: the alternatives the server returns, which "
        "must carry the whole law (the standard caps them at 5; the audit refuses a law they do not cover)"
    )
    counters: bool = False

    def generation(
        self, prompt: Sequence[int], tokens: int, seed: int, s: Sampling, report: bool
    ) -> tuple[str, dict[str, Any]]:
        body: dict[str, Any] = {"prompt": list(prompt), "max_tokens": tokens, "seed": self.seed(seed)}
        if self.model:
            body["model"] = self.model
        body.update(temperature=s.temperature, top_p=1.0 if s.top_p is None else s.top_p, logprobs=1)
        if s.top_k is not None:
            body["top_k"] = s.top_k
        if s.min_p:
            body["min_p"] = s.min_p
        return "/v1/completions", {**body, **self.extra}

    def law_request(self, context: Sequence[int], s: Sampling, vocab: int) -> tuple[str, dict[str, Any]]:
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
        try:
            entries = self._entries(answer)
        except (KeyError, IndexError, TypeError) as e:
            raise AnswerError(f"OpenAI-style answer without logprobs tokens: {str(answer)[:200]}") from e
        ids = tuple(self._id(e) for e in entries)
        reported = None
        if report:
            reported = tuple(
                float(e["prob"]) if "prob" in e else _neg_inf_safe_exp(e.get("logprob")) for e in entries
            )
        return Generation(ids, None, None, None, reported)

    def read_law(self, answer: Any, s: Sampling, vocab: int) -> list[float]:
        try:
            first = self._entries(answer)[0]
        except (KeyError, IndexError, TypeError) as e:
            raise AnswerError(f"OpenAI-style answer without logprobs: {str(answer)[:200]}") from e
        if "top_probs" in first:
            pairs = [(self._id(e), float(e["prob"])) for e in first["top_probs"]]
        elif first.get("top_logprobs") is not None:
            pairs = [(self._id(e), _neg_inf_safe_exp(e.get("logprob"))) for e in first["top_logprobs"]]
        else:
            pairs = [(self._id(t), _neg_inf_safe_exp(v)) for t, v in (first.get("top") or {}).items()]
        law = _law_from_pairs(pairs, vocab, "the server's top logprobs")
        mass = sum(law)
        if abs(mass - 1) > 1e-4:
            raise UsageError(
                f"profile openai: the server's alternatives carry {mass:.4f} of the law's mass, not all of "
                "it: the law cannot be read this way; use a family profile or a --target-endpoint that can"
            )
        return law

    def identity(self, client: Client) -> dict[str, Any]:
        try:
            data = client.get("/v1/models")
        except SpecproofError:
            return {"vocab": len(self.token_map) if self.token_map else None}
        first = (data.get("data") or [{}])[0]
        if self.model is None:
            self.model = first.get("id")
        vocab = len(self.token_map) if self.token_map else (first.get("meta") or {}).get("n_vocab")
        return {"vocab": vocab, "model": {"id": first.get("id")}}


PROFILES: dict[str, type[Profile]] = {"llamacpp": LlamaCpp, "vllm": VLLM, "sglang": SGLang, "openai": OpenAI}


def make_profile(
    name: str, token_map: list[str] | None = None, extra: dict[str, Any] | None = None
) -> Profile:
    """The profile called ``name`` (:data:`PROFILES`), or a :class:`UsageError` listing them."""
    if name not in PROFILES:
        raise UsageError(f"profile: {name!r} is unknown; profiles: {', '.join(PROFILES)}")
    return PROFILES[name](token_map=token_map, extra=dict(extra or {}))
