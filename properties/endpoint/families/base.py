"""What every server family's profile is: :class:`Profile`, the abstract base, and the helpers
the families share (reading probabilities and laws out of answers).

A profile knows, for one family of servers, how to request M new tokens after a prompt of token
ids under a seed and a sampling setting (and, on request, the probability of each emitted token),
how to read the token ids and the server's draft and acceptance counters back, and its **law
recipe**: how to read the engine's own next-token law after a context, processed by the same
sampling setting, without speculation. Every recipe asks for one new token: a server samples the
first token of a request from the prompt's forward pass, before any draft exists, so that law is
the non-speculative one, and the answer's own counters confirm nothing was drafted.

A profile is a frozen value: what it learns from a server (:meth:`Profile.identity`: the model's
name, an end-of-sequence id) comes back as a new profile (:meth:`Profile.learned`), never by
changing the one it was asked with.
"""

from __future__ import annotations

import abc
import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from specproof.properties.engine.knobs import Knobs
from specproof.reference.errors import SpecproofError, UsageError
from specproof.reference.sampling import Sampling

if TYPE_CHECKING:
    from specproof.properties.endpoint.client import Client
    from specproof.properties.engine.contract import Generation

#: seeds are mapped into this range (below llama.cpp's "random seed" value 2**32 - 1)
SEED_RANGE = 2**32 - 2
#: the parameters every profile sends (temperature and the cut-offs)
BASIC = ("temperature", "top_k", "top_p", "min_p")


class AnswerError(SpecproofError):
    """A server's answer without what the profile reads from it (a field missing, ids not ids)."""


def prob(logprob: float | None) -> float:
    """A probability from a log-probability (``None`` or ``-inf``: 0)."""
    if logprob is None or (isinstance(logprob, float) and math.isinf(logprob) and logprob < 0):
        return 0.0
    return float(math.exp(float(logprob)))


def cached_count(n: object) -> int | None:
    """A count of prompt tokens served from a server's cache, as its answer gives it (None where
    it gives none, or not a number)."""
    return int(n) if isinstance(n, (int, float)) and not isinstance(n, bool) else None


def law_from_pairs(pairs: Sequence[tuple[int, float]], vocab: int, where: str) -> list[float]:
    """A law of length ``vocab`` from (id, probability) pairs; an id outside it is an answer error."""
    law = np.zeros(vocab, dtype=np.float64)
    for tid, p in pairs:
        if not 0 <= tid < vocab:
            raise AnswerError(f"{where}: id {tid} outside [0, {vocab})")
        law[tid] += p
    return [float(v) for v in law]


def prometheus_totals(text: str, names: Sequence[str]) -> dict[str, float | None]:
    """Each named metric's value in a Prometheus text page, summed over its label sets (None where
    the page has no sample of it). A value that is not a number is an answer error."""
    out: dict[str, float | None] = {n: None for n in names}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        name = line.split("{", 1)[0].split(None, 1)[0]
        if name not in out:
            continue
        # the value follows the labels (whose quoted values may hold spaces), then an optional time
        rest = line[line.rindex("}") + 1 :] if "{" in line and "}" in line else line[len(name) :]
        try:
            value = float(rest.split()[0])
        except (IndexError, ValueError) as e:
            raise AnswerError(f"metric {name}: no number in {line[:200]!r}") from e
        out[name] = (out[name] or 0.0) + value
    return out


def rebuilt_from_raw(s: Sampling) -> bool:
    """Whether the setting's law is a function of the raw next-token law alone (temperature and
    the cut-offs; no penalty, bias, ban or grammar), so a server's raw log-probabilities give it
    exactly through :meth:`Sampling.law`."""
    return not s.contextual and not s.logit_bias and s.eos is None


#: every parameter of a setting: a profile says what its family takes before the body is built
SAYS_ALL = frozenset(f.name for f in dataclasses.fields(Sampling))


def knobs(s: Sampling, top_k_off: Any) -> dict[str, Any]:
    """The sampling fields most servers share, each at the setting's value or at its neutral one
    (so a setting means what it says, never a server's default): ``top_k_off`` is the family's
    spelling of top-k off (llama.cpp 0, vLLM and SGLang -1); the cut-offs as
    :class:`~specproof.properties.engine.knobs.Knobs` spells them, the penalties beside them (what
    else a family takes, its profile checks: :meth:`Profile.check_offered`)."""
    cut = Knobs(top_k_off=top_k_off, says=SAYS_ALL).of(s)
    return {
        "temperature": cut["temperature"],
        "top_k": cut["top_k"],
        "top_p": cut["top_p"],
        "min_p": cut["min_p"],
        "repetition_penalty": s.repetition_penalty or 1.0,
        "presence_penalty": s.presence_penalty,
        "frequency_penalty": s.frequency_penalty,
    }


@dataclass(frozen=True)
class Profile(abc.ABC):
    """One server family (module docstring). Subclasses fill the requests and read the answers;
    the class attributes say what the family offers."""

    token_map: tuple[str, ...] | None = None  # id -> text, for servers that answer with text only
    model: str | None = None  # the model name requests must carry (OpenAI-style servers)
    extra: dict[str, Any] = field(default_factory=dict, hash=False)  # fields added to every request

    name: ClassVar[str] = "base"
    recipe: ClassVar[str] = ""
    #: whether answers carry draft and acceptance counters
    counters: ClassVar[bool] = False
    #: whether a request can ask for each emitted token's probability
    reports: ClassVar[bool] = True
    #: the request parameters beyond the cut-offs this family takes (others are refused)
    offers: ClassVar[tuple[str, ...]] = ()
    #: whether the family streams a generation (:meth:`stream_body`, :meth:`read_stream`)
    streams: ClassVar[bool] = False
    #: a per-request prompt cache the audit can ask for (:meth:`warm_body`: the prefix-cache axis)
    caches: ClassVar[bool] = False
    #: the server's Prometheus page and the names of its draft-token and accepted-token totals
    #: (:meth:`read_metrics`; None: the family's metrics are not read)
    metrics: ClassVar[tuple[str, str, str] | None] = None
    #: the request field asking for n completions (llama-server's ``n_cmpl``; None: one a request)
    completions: ClassVar[str | None] = None
    #: where the server lists the LoRA adapters it holds (llama-server's ``GET /lora-adapters``;
    #: None: the family's adapters are not asked for per request)
    adapters: ClassVar[str | None] = None
    #: where the server says which build it is and the field that holds it (llama-server's
    #: ``GET /props`` ``build_info``, vLLM's ``GET /version`` ``version``; None: not asked), so a
    #: deployment's sign-off can refuse audits of different builds
    build_route: ClassVar[tuple[str, str] | None] = None
    #: whether :meth:`laws_along_request` has the server generate the path (read only from a
    #: speculation-off twin: the speculative server would draft it)
    along_generates: ClassVar[bool] = False
    #: the likely cause, for this family, of a server whose answers say it never drafts
    no_draft_hint: ClassVar[str] = ""

    def __init_subclass__(
        cls,
        family: str | None = None,
        recipe: str = "",
        counters: bool = False,
        reports: bool = True,
        offers: tuple[str, ...] = (),
        **kw: Any,
    ) -> None:
        """A family declares itself in its class line: ``class VLLM(Profile, family="vllm",
        recipe=..., counters=True, offers=(...))``."""
        super().__init_subclass__(**kw)
        if family is not None:
            cls.name, cls.recipe, cls.counters, cls.reports, cls.offers = (
                family,
                recipe,
                counters,
                reports,
                offers,
            )

    # -- the requests -------------------------------------------------------------------------

    @abc.abstractmethod
    def generation(
        self, prompt: Sequence[int], tokens: int, seed: int, s: Sampling, report: bool
    ) -> tuple[str, dict[str, Any]]:
        """The path and body of a request for ``tokens`` new tokens after ``prompt``."""

    @abc.abstractmethod
    def law_request(
        self, context: Sequence[int], s: Sampling, vocab: int, prompt_len: int | None = None
    ) -> tuple[str, dict[str, Any]]:
        """The path and body of the law recipe's request after ``context``."""

    def check_offered(self, s: Sampling) -> None:
        """A :class:`UsageError` for a parameter this family does not take."""
        missing = [n for n, _ in s.asked() if n not in BASIC and n not in self.offers]
        if missing:
            raise UsageError(
                f"profile {self.name}: the server offers no {missing[0]} (offers: {', '.join(self.offers)})"
            )

    # -- the answers --------------------------------------------------------------------------

    @abc.abstractmethod
    def read_generation(self, answer: Any, report: bool) -> Generation:
        """The tokens (and counters, and reported probabilities) of a generation's answer."""

    @abc.abstractmethod
    def read_law(self, answer: Any, s: Sampling, vocab: int) -> list[float]:
        """The law a law request's answer carries."""

    def read_law_after(
        self, answer: Any, s: Sampling, vocab: int, context: Sequence[int], prompt_len: int | None
    ) -> list[float]:
        """:meth:`read_law` for a recipe that needs the context the law was read after (its first
        ``prompt_len`` tokens the prompt): a family whose server reports its law before the
        penalties applies them here. By default the answer alone says it all."""
        return self.read_law(answer, s, vocab)

    def laws_along_request(
        self, context: Sequence[int], s: Sampling, vocab: int, prompt_len: int
    ) -> tuple[str, dict[str, Any]] | None:
        """The request whose one answer gives the law after every prefix of ``context`` from
        ``prompt_len`` tokens on (the family's teacher forcing: the context sent as a prompt, the
        raw law at each of its positions), or None where the family has none or the setting's law
        cannot be rebuilt from the raw one (:func:`rebuilt_from_raw`)."""
        return None

    def read_laws_along(
        self, answer: Any, s: Sampling, vocab: int, context: Sequence[int], prompt_len: int
    ) -> list[list[float]]:
        """The laws after ``context[:j]`` for ``j`` from ``prompt_len`` to ``len(context)``, read
        from the answer to :meth:`laws_along_request`."""
        raise NotImplementedError(f"profile {self.name} reads no laws along a context")

    def learned_along(
        self,
        answer: Any,
        s: Sampling,
        vocab: int,
        context: Sequence[int],
        prompt_len: int,
        one: Sequence[float],
    ) -> Profile:
        """This profile with what reading laws along a path needs learned from the server:
        ``answer`` is the answer to :meth:`laws_along_request` along ``context``, ``one`` the
        one-token recipe's law after its first ``prompt_len`` tokens. Nothing by default."""
        return self

    def law_drafted(self, answer: Any) -> int:
        """Draft tokens the answer to a law request says were proposed (0 when it says none)."""
        g = self.read_generation(answer, report=False)
        return g.drafted or 0

    def completions_body(self, body: dict[str, Any], n: int) -> dict[str, Any]:
        """A generation's body asking for ``n`` completions (the completions axis)."""
        if self.completions is None:
            raise UsageError(f"completions: profile {self.name} asks for one completion a request")
        return {**body, self.completions: n}

    def read_completions(self, answer: Any, report: bool) -> list[Generation]:
        """The completions of an answer to :meth:`completions_body`, in their order (by default
        the answer is one generation)."""
        return [self.read_generation(answer, report)]

    def adapter_body(self, body: dict[str, Any], adapter: Sequence[tuple[int, float]]) -> dict[str, Any]:
        """A request's body asking for the LoRA adapter scales ``adapter`` ((id, scale) pairs)."""
        raise NotImplementedError(f"profile {self.name} asks for no LoRA adapter per request")

    def read_adapters(self, answer: Any) -> dict[int, float]:
        """The adapters a server holds (id -> the scale a request that names none runs at), from
        its answer at :attr:`adapters`."""
        raise NotImplementedError(f"profile {self.name} lists no LoRA adapters")

    def read_metrics(self, text: str) -> dict[str, int] | None:
        """The server's draft and accepted totals (``drafted``, ``accepted``) from its Prometheus
        page (each total summed over its label sets), or None where the page has neither."""
        if self.metrics is None:
            return None
        _, drafted, accepted = self.metrics
        got = prometheus_totals(text, (drafted, accepted))
        if got[drafted] is None and got[accepted] is None:
            return None
        return {"drafted": int(got[drafted] or 0), "accepted": int(got[accepted] or 0)}

    def identity(self, client: Client) -> dict[str, Any]:
        """What the server says it serves: ``vocab`` (None when it does not say), whatever names
        the model (to compare an endpoint with its twin), and under ``learned`` the fields of a
        profile the server's answer fixes (:meth:`learned`). Reads; changes nothing."""
        return {"vocab": None}

    def build(self, client: Client) -> str | None:
        """The build the server says it is, asked where :attr:`build_route` says (None where the
        family does not say where, or the server does not answer: an older build)."""
        if self.build_route is None:
            return None
        try:
            said = client.get(self.build_route[0])
        except SpecproofError:  # refused, unreachable, or not JSON: the build is not said
            return None
        value = said.get(self.build_route[1]) if isinstance(said, dict) else None
        return None if value is None else str(value)

    def learned(self, identity: dict[str, Any]) -> Profile:
        """This profile with what :meth:`identity` learned (a new value; this one unchanged)."""
        found = {k: v for k, v in (identity.get("learned") or {}).items() if getattr(self, k) is None}
        return dataclasses.replace(self, **found) if found else self

    def reports_checkable(self, s: Sampling) -> bool:
        """Whether this family's reported probabilities are the sampled law under ``s``."""
        return self.reports

    def describe(self) -> dict[str, Any]:
        return {"profile": self.name, "recipe": self.recipe, "counters": self.counters}

    def warm_body(self, body: dict[str, Any]) -> dict[str, Any]:
        """A generation request asking the server to reuse its cached prompt (families that
        cache: ``caches``)."""
        raise NotImplementedError(f"profile {self.name} has no per-request prompt cache")

    def stream_body(self, body: dict[str, Any]) -> dict[str, Any]:
        """A generation request asking for its answer streamed (families that stream)."""
        raise NotImplementedError(f"profile {self.name} does not stream")

    def read_stream(self, events: Sequence[Any], report: bool) -> Generation:
        """A streamed answer's events read as one generation: the tokens, text and reported
        probabilities of its events, concatenated in order, and the counters of its last."""
        raise NotImplementedError(f"profile {self.name} does not stream")

    @staticmethod
    def unseeded(body: dict[str, Any]) -> dict[str, Any]:
        """A generation request without its seed (the server draws one): the load axis's
        unseeded background requests."""
        seeds = ("seed", "sampling_seed")  # SGLang's is sampling_params.sampling_seed
        out = {k: v for k, v in body.items() if k not in seeds}
        if isinstance(out.get("sampling_params"), dict):
            out["sampling_params"] = {k: v for k, v in out["sampling_params"].items() if k not in seeds}
        return out

    @staticmethod
    def seed(seed: int) -> int:
        return int(seed) % SEED_RANGE
