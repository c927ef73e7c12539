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
llamacpp-  ``POST /v1/completions`` with text prompts (through the token map) and ``logprobs`` =
python     V: the raw law (temperature 1, before every sampler), to which the profile applies
           llama-cpp-python's own sampler order (:class:`LlamaCppPython`). No counters (its
           answers say nothing of what prompt lookup drafted). Reports: ``token_logprobs``, the
           raw law, checked only where it is the law sampled.
=========  ==================================================================================

Unspecified cut-offs are sent as their neutral values, so a setting means what it says and not a
server default (llama.cpp's defaults are T 0.8, top-k 40, top-p 0.95, min-p 0.05). A setting
without ``eos`` bans end of sequence alike in every request (``ignore_eos``, or a logit bias where
the server has no such field), so the law read and the law sampled are the same law; a setting
with ``eos`` lets sequences end, and the audit pads an ended sample with ``eos`` (end of sequence
is absorbing in the law).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from specproof.properties.endpoint.client import Client
from specproof.properties.engine.contract import Generation, Sampling
from specproof.reference.errors import SpecproofError, UsageError
from specproof.reference.sampling import Grammar

#: seeds are mapped into this range (below llama.cpp's "random seed" value 2**32 - 1)
SEED_RANGE = 2**32 - 2
#: the parameters every profile sends (temperature and the cut-offs)
BASIC = ("temperature", "top_k", "top_p", "min_p")


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

    def law_request(
        self, context: Sequence[int], s: Sampling, vocab: int, prompt_len: int | None = None
    ) -> tuple[str, dict[str, Any]]:
        raise NotImplementedError

    #: the request parameters beyond the cut-offs this family takes (others are refused)
    offers: tuple[str, ...] = ()

    def check_offered(self, s: Sampling) -> None:
        """A :class:`UsageError` for a parameter this family does not take."""
        missing = [n for n, _ in s.asked() if n not in BASIC and n not in self.offers]
        if missing:
            raise UsageError(
                f"profile {self.name}: the server offers no {missing[0]} (offers: {', '.join(self.offers)})"
            )

    # -- the answers --------------------------------------------------------------------------

    def read_generation(self, answer: Any, report: bool) -> Generation:
        raise NotImplementedError

    def read_law(self, answer: Any, s: Sampling, vocab: int) -> list[float]:
        raise NotImplementedError

    def read_law_after(
        self, answer: Any, s: Sampling, vocab: int, context: Sequence[int], prompt_len: int | None
    ) -> list[float]:
        """:meth:`read_law` for a recipe that needs the context the law was read after (its first
        ``prompt_len`` tokens the prompt): a family whose server reports its law before the
        penalties applies them here. By default the answer alone says it all."""
        return self.read_law(answer, s, vocab)

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

    offers: tuple[str, ...] = ("repetition_penalty", "presence_penalty", "frequency_penalty", "logit_bias",
                               "grammar", "eos", "repetition_scope", "presence_scope")  # fmt: skip

    def _sampling(self, s: Sampling, generated: Sequence[int] = ()) -> dict[str, Any]:
        self.check_offered(s)
        body: dict[str, Any] = {
            "temperature": s.temperature,
            "top_k": s.top_k or 0,
            "top_p": 1.0 if s.top_p is None else s.top_p,
            "min_p": s.min_p or 0.0,
            "typical_p": 1.0,
            "repeat_penalty": s.repetition_penalty or 1.0,
            "repeat_last_n": 4096 if s.contextual else 0,  # past any context here: all of it counts
            "presence_penalty": s.presence_penalty,
            "frequency_penalty": s.frequency_penalty,
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

    offers: tuple[str, ...] = ("repetition_penalty", "presence_penalty", "frequency_penalty", "logit_bias",
                               "min_new_tokens", "eos", "repetition_scope", "presence_scope")  # fmt: skip

    def _sampling(self, s: Sampling) -> dict[str, Any]:
        self.check_offered(s)
        body: dict[str, Any] = {
            "temperature": s.temperature,
            "top_k": s.top_k or -1,
            "top_p": 1.0 if s.top_p is None else s.top_p,
            "min_p": s.min_p or 0.0,
            "repetition_penalty": s.repetition_penalty or 1.0,
            "presence_penalty": s.presence_penalty,
            "frequency_penalty": s.frequency_penalty,
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
        if report:
            body["logprobs"] = 1
        return "/v1/completions", {**body, **self.extra}

    def law_request(
        self, context: Sequence[int], s: Sampling, vocab: int, prompt_len: int | None = None
    ) -> tuple[str, dict[str, Any]]:
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

    offers: tuple[str, ...] = ("repetition_penalty", "presence_penalty", "frequency_penalty",
                               "min_new_tokens", "eos", "repetition_scope", "presence_scope")  # fmt: skip

    def _sampling(self, s: Sampling, tokens: int, seed: int) -> dict[str, Any]:
        self.check_offered(s)
        return {
            "max_new_tokens": tokens,
            "temperature": s.temperature,
            "top_k": s.top_k or -1,
            "top_p": 1.0 if s.top_p is None else s.top_p,
            "min_p": s.min_p or 0.0,
            "repetition_penalty": s.repetition_penalty or 1.0,
            "presence_penalty": s.presence_penalty,
            "frequency_penalty": s.frequency_penalty,
            "min_new_tokens": s.min_new_tokens,
            "ignore_eos": s.eos is None,
            "sampling_seed": self.seed(seed),
        }

    def generation(
        self, prompt: Sequence[int], tokens: int, seed: int, s: Sampling, report: bool
    ) -> tuple[str, dict[str, Any]]:
        body: dict[str, Any] = {"input_ids": list(prompt), "sampling_params": self._sampling(s, tokens, seed)}
        if report:
            body.update(return_logprob=True, logprob_start_len=-1)
        return "/generate", {**body, **self.extra}

    def law_request(
        self, context: Sequence[int], s: Sampling, vocab: int, prompt_len: int | None = None
    ) -> tuple[str, dict[str, Any]]:
        from dataclasses import replace

        neutral = replace(s, temperature=s.temperature or 1.0, top_k=None, top_p=None, min_p=None)
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
    offers: tuple[str, ...] = ("presence_penalty", "frequency_penalty", "logit_bias", "presence_scope")
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


# --------------------------------------------------------------------------- llama-cpp-python

#: llama-cpp-python's server counts this many last generated tokens for its penalties (its
#: ``last_n_tokens_size`` setting, default 64)
LCP_LAST_N = 64
#: the logit bias that bans a token (JSON has no infinity; a float32 logit plus this is 0 after exp)
LCP_BAN = -1e30
#: every sampling field of its ``CreateCompletionRequest`` at its neutral value (the server's own
#: defaults are temperature 0.8, top-k 40, top-p 0.95, min-p 0.05, repeat penalty 1.1)
NEUTRAL_LCP: dict[str, Any] = {
    "temperature": 1.0,
    "top_k": 0,
    "top_p": 1.0,
    "min_p": 0.0,
    "repeat_penalty": 1.0,
    "presence_penalty": 0.0,
    "frequency_penalty": 0.0,
    "mirostat_mode": 0,
    "min_tokens": 0,
    "stop": [],
}


@dataclass
class LlamaCppPython(Profile):
    """llama-cpp-python's OpenAI-compatible server (``python -m llama_cpp.server``), with or
    without its prompt-lookup draft model.

    Its API, as read from the package (0.3.36): a prompt is text (a list of ids is refused), so
    ids go out and come back through the token map; ``logprobs`` = k returns, per emitted token,
    the k largest **raw** log-probabilities (log-softmax of the model's logits, before any
    sampler: no temperature, cut-off, bias or penalty) keyed by token text, the end of sequence
    rendered as empty text; a sample that ends on the end of sequence stops with
    ``finish_reason: "stop"`` and leaves that token out. It has no ``ignore_eos``: a setting
    without ``eos`` bans it with a logit bias. Its defaults are not neutral (temperature 0.8,
    top-k 40, top-p 0.95, min-p 0.05, repeat penalty 1.1): every one is sent.

    The law recipe applies to the raw law the sampler chain its ``Llama._init_sampler`` builds,
    in its order: the logits processors (logit bias, and ``min_tokens``, which bans the end of
    sequence while fewer tokens were generated), the penalties (presence and frequency over the
    last :data:`LCP_LAST_N` generated tokens; the prompt is never counted), then greedy at
    temperature 0, else top-k, top-p and min-p on the temperature-1 law, the temperature last.
    A setting whose law that recipe cannot give exactly is refused (:meth:`check_offered`).

    Counters: none. The server says nothing, per response, of what prompt lookup drafted or
    what was accepted, so speculation is not observable. Reports: the raw law, which is the law
    sampled only at temperature 1 with nothing else asked and the end of sequence allowed
    (:meth:`reports_checkable`).
    """

    name: str = "llamacpp-python"
    recipe: str = (
        "POST /v1/completions, one new token, logprobs = V: the raw (temperature 1, unprocessed) law "
        "keyed by token text; then llama-cpp-python's sampler chain applied to it as its non-speculative "
        "sampler does (logit bias and min_tokens, presence and frequency penalties over the generated "
        "tokens, top-k, top-p and min-p on the temperature-1 law, temperature last; greedy at 0)"
    )
    counters: bool = False
    offers: tuple[str, ...] = ("presence_penalty", "frequency_penalty", "logit_bias", "min_new_tokens", "eos")
    #: the id the server ends samples on; found by :meth:`identity` (the one id it renders as a
    #: text the token map does not hold, or the map's one empty text)
    eos_id: int | None = None
    _index_of: tuple[Any, dict[str, int]] | None = field(default=None, init=False, repr=False, compare=False)

    # -- text <-> ids ---------------------------------------------------------------------------

    def _map(self) -> list[str]:
        if self.token_map is None:
            raise UsageError(
                "--token-map: profile llamacpp-python sends prompts and reads tokens as text: give the "
                "vocabulary (a JSON list of token texts by id)"
            )
        return self.token_map

    def _index(self) -> dict[str, int]:
        texts = self._map()
        key = (id(texts), len(texts), self.eos_id)
        if self._index_of is not None and self._index_of[0] == key:
            return self._index_of[1]
        index: dict[str, int] = {}
        for i, t in enumerate(texts):
            if t in index:
                raise UsageError(
                    f"--token-map: ids {index[t]} and {i} share the text {t!r}: the server's answers, keyed "
                    "by text, cannot tell them apart"
                )
            index[t] = i
        if "" not in index and self.eos_id is not None:
            index[""] = self.eos_id  # the server renders the end of sequence as empty text
        self._index_of = (key, index)
        return index

    def _id(self, text: Any) -> int:
        try:
            return self._index()[str(text)]
        except KeyError as e:
            raise AnswerError(f"token text {text!r} is not in the token map") from e

    def _text(self, ids: Sequence[int]) -> str:
        texts = self._map()
        try:
            return "".join(texts[int(i)] for i in ids)
        except IndexError as e:
            raise UsageError(f"--token-map: holds {len(texts)} texts; ids {list(ids)} reach past it") from e

    # -- the requests -------------------------------------------------------------------------

    def check_offered(self, s: Sampling) -> None:
        if s.repetition_penalty not in (None, 1.0):
            raise UsageError(
                "profile llamacpp-python: repetition_penalty is not audited: the server's repeat penalty "
                "divides or multiplies each raw logit by its sign, which its logprobs (log-softmax, shifted "
                "by an unknown constant) do not give, so that law cannot be read exactly"
            )
        super().check_offered(s)
        if (s.presence_penalty or s.frequency_penalty) and s.presence_scope != "output":
            raise UsageError(
                "presence_scope: llama-cpp-python's presence and frequency penalties count the generated "
                "tokens only (scope 'output'), never the prompt"
            )
        if s.min_new_tokens and s.logit_bias:
            raise UsageError(
                "min_new_tokens: with logit_bias, llama-cpp-python 0.3.36 drops both (its min_tokens "
                "processor list is replaced by the None that list.extend returns): not audited together"
            )
        if any(math.isinf(b) and b > 0 for _, b in s.logit_bias):
            raise UsageError("logit_bias: +inf cannot be sent (JSON has no infinity); give a finite bias")
        if s.eos is not None and self.eos_id is not None and s.eos != self.eos_id:
            raise UsageError(
                f"eos: the server ends samples on id {self.eos_id} (the token it renders as empty text), "
                f"not {s.eos}"
            )

    def _sampling(self, s: Sampling) -> dict[str, Any]:
        self.check_offered(s)
        bias = {str(t): (LCP_BAN if math.isinf(b) else float(b)) for t, b in s.logit_bias}
        if s.eos is None:
            bias[str(self._eos("a setting without eos bans it"))] = LCP_BAN
        body: dict[str, Any] = {
            **NEUTRAL_LCP,
            "temperature": s.temperature,
            "top_k": s.top_k or 0,
            "top_p": 1.0 if s.top_p is None else s.top_p,
            "min_p": s.min_p or 0.0,
            "presence_penalty": s.presence_penalty,
            "frequency_penalty": s.frequency_penalty,
            "min_tokens": s.min_new_tokens,
        }
        if bias:
            body["logit_bias"] = bias
        return body

    def _eos(self, why: str) -> int:
        if self.eos_id is None:
            raise UsageError(
                f"profile llamacpp-python: the end-of-sequence id is unknown ({why}); the token map must "
                "leave exactly one id whose text the server renders otherwise (its end of sequence, as '')"
            )
        return self.eos_id

    def generation(
        self, prompt: Sequence[int], tokens: int, seed: int, s: Sampling, report: bool
    ) -> tuple[str, dict[str, Any]]:
        # logprobs 0: each emitted token's text and raw log-probability, no alternatives (the
        # server computes logits for every position whether asked or not: nothing changes)
        body = {"prompt": self._text(prompt), "max_tokens": tokens, "seed": self.seed(seed), "logprobs": 0}
        body.update(self._sampling(s))
        return "/v1/completions", {**body, **self.extra}

    def law_request(
        self, context: Sequence[int], s: Sampling, vocab: int, prompt_len: int | None = None
    ) -> tuple[str, dict[str, Any]]:
        self.check_offered(s)
        # the raw law whatever the setting: neutral sampling, the end of sequence banned (when
        # known) so that one token is always emitted (its row carries the law; a bias leaves the
        # reported law as it is)
        body = {"prompt": self._text(context), "max_tokens": 1, "seed": 0, "logprobs": vocab, **NEUTRAL_LCP}
        if self.eos_id is not None:
            body["logit_bias"] = {str(self.eos_id): LCP_BAN}
        return "/v1/completions", {**body, **self.extra}

    # -- the answers --------------------------------------------------------------------------

    def _logprobs(self, answer: Any) -> tuple[dict[str, Any], dict[str, Any]]:
        try:
            choice = answer["choices"][0]
            lp = choice["logprobs"]
            lp["tokens"], lp["token_logprobs"], lp["top_logprobs"]  # noqa: B018 -- all three present
        except (KeyError, IndexError, TypeError) as e:
            raise AnswerError(f"llama-cpp-python answer without logprobs: {str(answer)[:200]}") from e
        return choice, lp

    def read_generation(self, answer: Any, report: bool) -> Generation:
        choice, lp = self._logprobs(answer)
        ids = [self._id(t) for t in lp["tokens"]]
        emitted = (answer.get("usage") or {}).get("completion_tokens")
        if emitted is not None and emitted != len(ids):
            raise AnswerError(f"llama-cpp-python answer: {emitted} tokens generated, {len(ids)} listed")
        if choice.get("finish_reason") == "stop":  # it sampled the end of sequence and left it out
            ids.append(self._eos("a sample ended"))
        reported = None
        if report:
            reported = tuple(_neg_inf_safe_exp(v) if v is not None else None for v in lp["token_logprobs"])
        return Generation(tuple(ids), None, None, None, reported)

    def raw_law(self, answer: Any, vocab: int) -> np.ndarray:
        """The raw (temperature-1, unprocessed) log-law of the one token asked, length ``vocab``
        (``-inf`` where the server gives nothing); refuses one that does not carry all the mass."""
        _, lp = self._logprobs(answer)
        try:
            top = lp["top_logprobs"][0]
            pairs = [(self._id(text), float(v)) for text, v in top.items()]
        except (IndexError, TypeError, AttributeError, ValueError) as e:
            raise AnswerError(f"llama-cpp-python answer without top_logprobs: {str(answer)[:200]}") from e
        z = np.full(vocab, -np.inf)
        for tid, v in pairs:
            if not 0 <= tid < vocab:
                raise AnswerError(f"llama-cpp-python's logprobs: id {tid} outside [0, {vocab})")
            z[tid] = v
        mass = float(np.exp(z).sum())
        if abs(mass - 1) > 1e-4:
            raise UsageError(
                f"profile llamacpp-python: the server's logprobs carry {mass:.4f} of the law's mass, not all "
                "of it (texts the token map does not tell apart, or fewer than V returned)"
            )
        return z

    def read_law(self, answer: Any, s: Sampling, vocab: int) -> list[float]:
        return self.read_law_after(answer, s, vocab, (), None)

    def read_law_after(
        self, answer: Any, s: Sampling, vocab: int, context: Sequence[int], prompt_len: int | None
    ) -> list[float]:
        prompt_tokens = (answer.get("usage") or {}).get("prompt_tokens") if isinstance(answer, dict) else None
        if context and prompt_tokens is not None and prompt_tokens != len(context):
            raise UsageError(
                f"--token-map: the text of {list(context)} tokenizes to {prompt_tokens} tokens on the "
                f"server, not {len(context)}: the token map does not round-trip through its tokenizer"
            )
        out = tuple(context[len(context) if prompt_len is None else prompt_len :])
        return [float(v) for v in self.processed(self.raw_law(answer, vocab), s, out)]

    def processed(self, z: np.ndarray, s: Sampling, out: Sequence[int] = ()) -> np.ndarray:
        """The law llama-cpp-python's sampler draws from, given the raw log-law ``z`` and the
        tokens generated so far ``out`` (class docstring, for the order)."""
        z = np.array(z, dtype=np.float64)
        for t, b in s.logit_bias:
            z[t] = -np.inf if math.isinf(b) else z[t] + b
        if s.eos is None:
            z[self._eos("a setting without eos bans it")] = -np.inf
        elif len(out) < s.min_new_tokens:
            z[s.eos] = -np.inf
        if s.presence_penalty or s.frequency_penalty:
            counts = Counter(list(out)[-LCP_LAST_N:])
            for x, c in counts.items():
                z[x] -= s.frequency_penalty * c + s.presence_penalty
        if not np.isfinite(z).any():
            raise AnswerError("every token is banned: no law to sample from")
        if s.greedy:
            p = np.zeros(len(z))
            p[int(np.argmax(z))] = 1.0  # its greedy sampler: the first largest logit
            return p
        keep = np.isfinite(z)
        order = np.argsort(-z, kind="stable")
        if s.top_k and s.top_k < int(keep.sum()):
            keep[order[s.top_k :]] = False
        if s.top_p is not None and s.top_p < 1:
            kept = order[keep[order]]
            q = np.exp(z[kept] - z[kept].max())
            q /= q.sum()
            before = np.concatenate([[0.0], np.cumsum(q)[:-1]])
            near = np.abs(before[1:] - s.top_p) < 1e-5
            if near.any():
                raise UsageError(
                    f"top_p: {s.top_p:g} falls within 1e-5 of a cumulative mass of the law here: which token "
                    "the server keeps is decided by float32 rounding; choose another top_p"
                )
            keep[kept[before >= s.top_p]] = False
        if s.min_p:
            floor = z[keep].max() + math.log(s.min_p)
            if (np.abs(z[keep] - floor) < 1e-5).any():
                raise UsageError(
                    f"min_p: {s.min_p:g} puts the cut within 1e-5 of a log-probability of the law here: "
                    "which token the server keeps is decided by float32 rounding; choose another min_p"
                )
            keep &= z >= floor
        w = np.where(keep, (z - z[keep].max()) / s.temperature, -np.inf)
        p = np.exp(w)
        return p / p.sum()

    def reports_checkable(self, s: Sampling) -> bool:
        """Its reports are the raw law: the sampled law only at temperature 1 with no cut-off, bias
        or penalty, and the end of sequence allowed (without ``eos`` the profile bans it)."""
        return (
            s.temperature == 1.0
            and not s.truncated
            and not s.logit_bias
            and not s.contextual
            and s.eos is not None
        )

    def identity(self, client: Client) -> dict[str, Any]:
        data = client.get("/v1/models")
        first = (data.get("data") or [{}])[0]
        texts = self._map()
        if self.eos_id is None:
            self.eos_id = self._find_eos(client, texts)
        return {"vocab": len(texts), "model": {"id": first.get("id"), "eos": self.eos_id}}

    def _find_eos(self, client: Client, texts: list[str]) -> int | None:
        """The id the server renders as a text the map does not hold (its end of sequence, as
        ''), read from one answer's whole raw law; or the map's own empty text."""
        if texts.count("") == 1:
            return texts.index("")
        plain = next((t for t in texts if t.isalnum()), None) or next((t for t in texts if t), None)
        if plain is None:
            raise UsageError("--token-map: every text is empty")
        body = {"prompt": plain, "max_tokens": 1, "seed": 0, "logprobs": len(texts), **NEUTRAL_LCP}
        body["temperature"] = 0.0  # greedy: the one token emitted is the likeliest, whatever it is
        answer = client.post("/v1/completions", body)
        _, lp = self._logprobs(answer)
        keys = list((lp["top_logprobs"] or [{}])[0] or {})
        index = self._index()
        unknown = [k for k in keys if k not in index]
        absent = sorted(set(range(len(texts))) - {index[k] for k in keys if k in index})
        if not unknown and not absent:
            return None
        if len(unknown) == 1 and len(absent) == 1:
            return absent[0]
        raise UsageError(
            f"--token-map: the server's texts do not match it ({len(unknown)} texts not in the map, e.g. "
            f"{unknown[:3]}; {len(absent)} ids not rendered as their text)"
        )


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


PROFILES: dict[str, type[Profile]] = {
    "llamacpp": LlamaCpp,
    "vllm": VLLM,
    "sglang": SGLang,
    "openai": OpenAI,
    "llamacpp-python": LlamaCppPython,
}


def make_profile(
    name: str, token_map: list[str] | None = None, extra: dict[str, Any] | None = None
) -> Profile:
    """The profile called ``name`` (:data:`PROFILES`), or a :class:`UsageError` listing them."""
    if name not in PROFILES:
        raise UsageError(f"profile: {name!r} is unknown; profiles: {', '.join(PROFILES)}")
    return PROFILES[name](token_map=token_map, extra=dict(extra or {}))
