"""llama-cpp-python's OpenAI-compatible server (``python -m llama_cpp.server``): its profile.

It has no stand-in: its answers are text through a token map, and the tests audit the real server
on the project's tiny GGUF models (tests/test_endpoint_llamacpp.py). Law recipe: the raw law
(temperature 1, before every sampler) keyed by token text, to which the profile applies
llama-cpp-python's own sampler chain: its logits processors and penalties here, then the cut-offs
and the temperature in llama.cpp's order (:data:`specproof.reference.sampling.WARP_ORDERS`
``["llamacpp"]``).
"""

from __future__ import annotations

import functools
import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from specproof.properties.endpoint.families.base import AnswerError, Profile, prob
from specproof.reference.errors import UsageError
from specproof.reference.sampling import Sampling, warp

if TYPE_CHECKING:
    from specproof.properties.endpoint.client import Client
    from specproof.properties.engine.contract import Generation

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


#: what the report quotes of this family's law recipe
RECIPE = (
    "POST /v1/completions, one new token, logprobs = V: the raw (temperature 1, unprocessed) law "
    "keyed by token text; then llama-cpp-python's sampler chain applied to it as its non-speculative "
    "sampler does (logit bias and min_tokens, presence and frequency penalties over the generated "
    "tokens, top-k, top-p and min-p on the temperature-1 law, temperature last; greedy at 0)"
)
#: the request parameters beyond the cut-offs it takes
OFFERS: tuple[str, ...] = (
    "presence_penalty",
    "frequency_penalty",
    "logit_bias",
    "min_new_tokens",
    "eos",
)


@dataclass(frozen=True)
class LlamaCppPython(Profile, family="llamacpp-python", recipe=RECIPE, counters=False, offers=OFFERS):
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

    #: the id the server ends samples on; found by :meth:`identity` (the one id it renders as a
    #: text the token map does not hold, or the map's one empty text)
    eos_id: int | None = None

    # -- text <-> ids ---------------------------------------------------------------------------

    def _map(self) -> Sequence[str]:
        if self.token_map is None:
            raise UsageError(
                "--token-map: profile llamacpp-python sends prompts and reads tokens as text: give the "
                "vocabulary (a JSON list of token texts by id)"
            )
        return self.token_map

    def _index(self) -> dict[str, int]:
        return _text_index(tuple(self._map()), self.eos_id)

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
        from specproof.properties.engine.contract import Generation

        choice, lp = self._logprobs(answer)
        ids = [self._id(t) for t in lp["tokens"]]
        emitted = (answer.get("usage") or {}).get("completion_tokens")
        if emitted is not None and emitted != len(ids):
            raise AnswerError(f"llama-cpp-python answer: {emitted} tokens generated, {len(ids)} listed")
        if choice.get("finish_reason") == "stop":  # it sampled the end of sequence and left it out
            ids.append(self._eos("a sample ended"))
        reported = None
        if report:
            reported = tuple(prob(v) if v is not None else None for v in lp["token_logprobs"])
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
        # greedy at temperature 0 (the first largest logit), else top-k (exactly k), top-p and min-p on
        # the temperature-1 law and the temperature last; a cut within 1e-5 of a mass or a probability
        # of the law is decided by the server's float32 rounding: refused
        return warp(z, s, margin=1e-5, order="llamacpp")

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
        eos = self.eos_id if self.eos_id is not None else self._find_eos(client, texts)
        return {"vocab": len(texts), "model": {"id": first.get("id"), "eos": eos}, "learned": {"eos_id": eos}}

    def _find_eos(self, client: Client, texts: Sequence[str]) -> int | None:
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
        index = _text_index(tuple(texts), None)
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


@functools.lru_cache(maxsize=16)
def _text_index(texts: tuple[str, ...], eos_id: int | None) -> dict[str, int]:
    """Token text -> id, for a map whose texts tell every id apart (the end of sequence, which the
    server renders as empty text, under '' when the map holds no empty text)."""
    index: dict[str, int] = {}
    for i, t in enumerate(texts):
        if t in index:
            raise UsageError(
                f"--token-map: ids {index[t]} and {i} share the text {t!r}: the server's answers, keyed "
                "by text, cannot tell them apart"
            )
        index[t] = i
    if "" not in index and eos_id is not None:
        index[""] = eos_id  # the server renders the end of sequence as empty text
    return index
