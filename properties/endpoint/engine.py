"""A served engine as an engine of the engine audit: its HTTP API behind the engine contract.

:class:`EndpointEngine` turns ``generate`` into a request to the server (``generate_many`` into
many at once, with bounded concurrency over the deployment's replicas), reads the token ids and
the server's own draft and acceptance counters back, and reads ``target_law`` by its profile's
recipe (:mod:`.profiles`) from the twin endpoint when there is one (the same model served with
speculation off), else from the server itself. :func:`endpoint_spec` checks what can be checked
before any sampling (the servers answer, they serve the same vocabulary and model, every sampling
setting is accepted and changes the law as asked) and gives the
:class:`~specproof.properties.engine.contract.EngineSpec` the engine audit runs: the same plan,
looks, witness, JSON, report and exit codes as for an engine in the same process.
"""

from __future__ import annotations

import concurrent.futures
import copy
import dataclasses
from collections.abc import Sequence
from typing import Any

import numpy as np

from specproof.properties.endpoint.client import Client, RequestRefused
from specproof.properties.endpoint.families import PROFILES, make_profile
from specproof.properties.endpoint.families.base import AnswerError, Profile
from specproof.properties.endpoint.law_checks import cut_changes, tv
from specproof.properties.endpoint.options import EndpointOptions
from specproof.properties.endpoint.traffic import Record, twin_laws
from specproof.properties.engine.contract import (
    DEFAULT_PROMPTS,
    ENDPOINT_TOKENS,
    T07,
    T1,
    EngineSpec,
    EngineUnavailable,
    Generation,
    Sampling,
    Seq,
)
from specproof.reference.errors import UsageError

#: two laws read from two servers of one model differ in the last bits only; above this total
#: variation they serve different models (or different settings)
SAME_MODEL_TV = 1e-3


class EndpointEngine:
    """One sampling setting of a served engine (module docstring). ``twin`` is the same setting
    on the speculation-off endpoint, when there is one."""

    def __init__(
        self,
        client: Client,
        profile: Profile,
        sampling: Sampling,
        vocab: int,
        twin: EndpointEngine | None = None,
        law_client: Client | None = None,
        adapter: tuple[tuple[int, float], ...] = (),
    ) -> None:
        self.client, self.profile, self.sampling, self.vocab = client, profile, sampling, vocab
        #: the LoRA adapter scales every request asks for ((id, scale) pairs; empty: the server's own)
        self.adapter = tuple(adapter)
        self.twin = twin
        self._laws = law_client or client  # where target_law reads: the twin's server if any
        self.reports_probabilities = profile.reports and profile.reports_checkable(sampling)
        self.no_draft_hint = profile.no_draft_hint  # said where its answers show no drafting
        self.eos_id = sampling.eos  # a request that names an end of sequence lets samples end on it
        self.batch = client.concurrency * 4
        self.last_counters: dict[str, int] = {}
        self.along_requests = 0  # teacher-forced law requests (each the laws along one sample)
        self.endpoint: Endpoint | None = None  # the servers it belongs to (set by Endpoint.engine)
        #: the same requests with their answers streamed, where the family streams (None: it does not)
        self.generate_stream = self._generate_stream if profile.streams else None
        #: the prefix-cache axis: generations ask the server to reuse its cached prompt (at_cache)
        self.warm = False
        if profile.caches:
            self.at_cache = self._at_cache
        if profile.metrics is not None:
            self.server_metrics = self._server_metrics
        if profile.completions is not None:
            self.at_completions = self._at_completions

    def _generation(
        self, prompt_ids: Sequence[int], max_new_tokens: int, seed: int, report: bool
    ) -> tuple[str, dict[str, Any]]:
        path, body = self.profile.generation(prompt_ids, max_new_tokens, seed, self.sampling, report)
        return path, self._adapted(self.profile.warm_body(body) if self.warm else body)

    def _adapted(self, body: dict[str, Any]) -> dict[str, Any]:
        """``body`` asking for this engine's LoRA adapter scales, where it has any."""
        return self.profile.adapter_body(body, self.adapter) if self.adapter else body

    def _at_cache(self) -> EndpointEngine:
        """This setting with every generation reusing the server's cached prompt (the prefix-cache
        axis: each request after the case's first finds its prompt in the cache)."""
        warm = copy.copy(self)
        warm.warm = True
        if warm.generate_stream is not None:
            warm.generate_stream = warm._generate_stream
        return warm

    # -- the engine contract -------------------------------------------------------------------

    def generate(self, prompt_ids: list[int], max_new_tokens: int, seed: int) -> list[int]:
        path, body = self._generation(prompt_ids, max_new_tokens, seed, False)
        g = self._read(self.client.post(path, body), False)
        self.last_counters = {} if g.drafted is None else {"drafted": g.drafted, "accepted": g.accepted or 0}
        return list(g.tokens)

    def generate_many(
        self, prompt_ids: list[int], max_new_tokens: int, seeds: Sequence[int], report: bool = False
    ) -> list[Generation]:
        requests = [self._generation(prompt_ids, max_new_tokens, s, report) for s in seeds]
        path = requests[0][0] if requests else "/"
        try:
            answers = self.client.post_many(path, [b for _, b in requests])
        except EngineUnavailable as e:
            raise EngineUnavailable(e.detail, [self._read(a, report) for a in e.done]) from e
        return [self._read(a, report) for a in answers]

    def submit_many(self, prompt_ids: list[int], max_new_tokens: int, seeds: Sequence[int]) -> Submitted:
        """:meth:`generate_many`'s requests sent without waiting (the client's shared gate keeps
        ``concurrency`` in flight across the batches submitted); ``result()`` reads the answers."""
        requests = [self._generation(prompt_ids, max_new_tokens, s, False) for s in seeds]
        if not requests:
            return Submitted(self, None)
        return Submitted(self, self.client.submit_many(requests[0][0], [b for _, b in requests]))

    def _generate_stream(
        self, prompt_ids: list[int], max_new_tokens: int, seeds: Sequence[int], report: bool = False
    ) -> list[Generation]:
        bodies = [
            self.profile.stream_body(self._generation(prompt_ids, max_new_tokens, s, report)[1])
            for s in seeds
        ]
        path = self._generation(prompt_ids, max_new_tokens, 0, report)[0]
        streams = self.client.post_stream_many(path, bodies)
        out = []
        for events in streams:
            g = self.profile.read_stream(events, report)
            if report and g.reported is not None and len(g.reported) > len(g.tokens):
                g = dataclasses.replace(g, reported=g.reported[: len(g.tokens)])
            out.append(g)
        return out

    def target_law(self, context: Sequence[int], prompt_len: int | None = None) -> list[float]:
        return self.target_laws([context], prompt_len)[0]

    def target_laws(
        self, contexts: Sequence[Sequence[int]], prompt_len: int | None = None
    ) -> list[list[float]]:
        """The laws after each context (its first ``prompt_len`` tokens the prompt), read
        concurrently by the profile's recipe; where the family reads the laws along a context in
        one request (:meth:`Profile.laws_along_request`), one request per longest context."""
        if prompt_len is not None and len(contexts) > 1 and self.reads_along():
            along = self._laws_along(contexts, prompt_len)
            if along is not None:
                return along
        return self._one_token_laws(contexts, prompt_len)

    def law_alone(self, context: Sequence[int], prompt_len: int | None = None) -> list[float]:
        """The law after ``context`` read at that prefix alone, by the one-token recipe (the
        decode path), never along a path: what the laws read along a path are checked against
        during sampling (:class:`~specproof.properties.engine.token_stage.ForcingCheck`)."""
        return self._one_token_laws([context], prompt_len)[0]

    def _one_token_laws(self, contexts: Sequence[Sequence[int]], prompt_len: int | None) -> list[list[float]]:
        """The laws after each context, one request each by the one-token recipe."""
        requests = [self.profile.law_request(c, self.sampling, self.vocab, prompt_len) for c in contexts]
        if not requests:
            return []
        answers = self._laws.post_many(requests[0][0], [self._adapted(b) for _, b in requests])
        out = []
        for ctx, answer in zip(contexts, answers):
            if self.profile.counters and self.profile.law_drafted(answer):
                raise AnswerError(f"the law request after {list(ctx)} was answered with drafted tokens")
            out.append(self.profile.read_law_after(answer, self.sampling, self.vocab, ctx, prompt_len))
        return out

    def reads_along(self) -> bool:
        """Whether this setting's laws along a path are read in one request: where the family
        has such a read and, for a family that generates the path, only from a speculation-off
        twin, once :meth:`Endpoint.check` found them equal to the one-token recipe's (before any
        check, a family that only reads the prompt's log-probabilities reads them so)."""
        checked = None if self.endpoint is None else self.endpoint.along.get(self.sampling)
        if checked is None:  # never checked: where the family reads the prompt's own log-probabilities
            return not self.profile.along_generates
        return checked == ""

    def _laws_along(self, contexts: Sequence[Sequence[int]], prompt_len: int) -> list[list[float]] | None:
        """Teacher forcing: the contexts no other one extends, one request each; every context
        read off the chain that holds it. None where the family or the setting has no such read."""
        wanted = [tuple(c) for c in contexts]
        if any(len(c) < prompt_len for c in wanted):
            return None
        chains: list[tuple[int, ...]] = []
        covered: set[tuple[int, ...]] = set()
        for c in sorted(set(wanted), key=len, reverse=True):
            if c not in covered:
                chains.append(c)
                covered.update(c[:j] for j in range(prompt_len, len(c) + 1))
        requests = []
        for c in chains:
            r = self.profile.laws_along_request(c, self.sampling, self.vocab, prompt_len)
            if r is None:
                return None
            requests.append(r)
        answers = self._laws.post_many(requests[0][0], [self._adapted(b) for _, b in requests])
        laws: dict[tuple[int, ...], list[float]] = {}
        for chain, answer in zip(chains, answers):
            if self.profile.counters and self.profile.law_drafted(answer):
                raise AnswerError(f"the law request along {list(chain)} was answered with drafted tokens")
            rows = self.profile.read_laws_along(answer, self.sampling, self.vocab, chain, prompt_len)
            for j, row in zip(range(prompt_len, len(chain) + 1), rows):
                laws.setdefault(chain[:j], row)
        self.along_requests += len(chains)
        return [laws[c] for c in wanted]

    def at_load(self, level: int) -> LoadedEngine:
        """This setting with ``level`` requests in flight at each call (the load axis)."""
        if self.endpoint is None:
            raise UsageError("loads: this engine was made without its Endpoint (Endpoint.engine makes it)")
        return LoadedEngine(self, level, self.endpoint)

    def _at_completions(self, n: int) -> EndpointEngine:
        """This setting asking for ``n`` completions a request (the completions axis)."""
        from specproof.properties.endpoint.completions import CompletionsEngine  # it builds on this

        return CompletionsEngine(self, n)

    def _server_metrics(self) -> dict[str, int] | None:
        """The servers' speculation totals, summed over the replicas, and the requests this
        client sent again (:mod:`specproof.properties.engine.metrics`); None where a replica
        serves no metrics page or the page has no speculation totals."""
        assert self.profile.metrics is not None
        total = {"drafted": 0, "accepted": 0}
        for i in range(len(self.client.urls)):
            try:
                got = self.profile.read_metrics(self.client.get_text(self.profile.metrics[0], replica=i))
            except (RequestRefused, AnswerError):
                return None
            if got is None:
                return None
            total = {k: total[k] + got[k] for k in total}
        return {**total, "retried": self.client.retried}

    def _one_of_many(self, prompt_ids: list[int], max_new_tokens: int, seed: int) -> list[int]:
        """``generate`` through this engine's ``generate_many`` (one seed), its counters kept."""
        g = self.generate_many(prompt_ids, max_new_tokens, [seed])[0]
        self.last_counters = {} if g.drafted is None else {"drafted": g.drafted, "accepted": g.accepted or 0}
        return list(g.tokens)

    def describe(self) -> dict[str, Any]:
        return {
            **self.profile.describe(),
            "endpoints": self.client.urls,
            "server": None if self.endpoint is None else self.endpoint.server,
            "twin": None if self.twin is None else self.twin.client.urls,
            "law_read_from": self._laws.urls,
            "concurrency": self.client.concurrency,
            "retries": self.client.retries,
            "requests": self.client.requests,
            "teacher_forced_law_requests": self.along_requests,
            "retried": self.client.retried,
            **({"adapter": [{"id": i, "scale": scale} for i, scale in self.adapter]} if self.adapter else {}),
        }

    def _read(self, answer: Any, report: bool) -> Generation:
        g = self.profile.read_generation(answer, report)
        if report and g.reported is not None and len(g.reported) > len(g.tokens):
            g = dataclasses.replace(g, reported=g.reported[: len(g.tokens)])
        return g


class Submitted:
    """The answers to :meth:`EndpointEngine.submit_many`'s requests, to come."""

    def __init__(self, engine: EndpointEngine, future: concurrent.futures.Future[list[Any]] | None) -> None:
        self.engine, self.future = engine, future

    def result(self) -> list[Generation]:
        """The samples, as :meth:`EndpointEngine.generate_many` returns them (and raises)."""
        if self.future is None:
            return []
        try:
            answers = self.future.result()
        except EngineUnavailable as e:
            raise EngineUnavailable(e.detail, [self.engine._read(a, False) for a in e.done]) from e
        return [self.engine._read(a, False) for a in answers]


@dataclasses.dataclass(frozen=True)
class Asked:
    """What a background request of the load axis asked: its prompt, length, setting and LoRA
    adapter scales (empty: the server's own)."""

    prompt: Seq
    tokens: int
    sampling: Sampling
    adapter: tuple[tuple[int, float], ...] = ()


class LoadedEngine(EndpointEngine):
    """One setting at a load level (:mod:`specproof.properties.engine.load`): at level 1 every
    request is sent alone; above, each call's requests are sent interleaved with background
    requests, ``max(level - n, n)`` of them for ``n`` of the audit's, ``level`` in flight at once.
    A background request has a prompt of 1 to ``2 x len(prompt) + 2`` random ids, asks for 1 to
    ``M + 2`` tokens under one of the audit's settings (or temperature 0.5), and is seeded or
    unseeded by turns; all of it is drawn from a generator seeded by the level, the call's number
    and the call's first seed, so a run is reproducible up to the server's own scheduling."""

    def __init__(self, base: EndpointEngine, level: int, endpoint: Endpoint) -> None:
        super().__init__(
            base.client, base.profile, base.sampling, base.vocab, base.twin, base._laws, base.adapter
        )
        self.level, self.endpoint = level, endpoint
        for declared in ("draft_law", "acceptance_rule"):  # what a suite declared on the setting
            if hasattr(base, declared):
                setattr(self, declared, getattr(base, declared))
        self.batch = base.batch if level > 1 else max(1, base.batch // base.client.concurrency)
        #: no draw-ahead: a call puts exactly ``level`` requests in flight, its own and background ones
        self.submit_many = None  # type: ignore[assignment]
        settings = list(endpoint.settings or (base.sampling,))
        if all(s.temperature != 0.5 for s in settings):
            settings.append(Sampling(0.5, eos=base.sampling.eos))
        self.settings = tuple(settings)
        self.records: list[Record] = []
        self.calls = 0

    def generate(self, prompt_ids: list[int], max_new_tokens: int, seed: int) -> list[int]:
        return self._one_of_many(prompt_ids, max_new_tokens, seed)

    def generate_many(
        self, prompt_ids: list[int], max_new_tokens: int, seeds: Sequence[int], report: bool = False
    ) -> list[Generation]:
        ours = [self._generation(prompt_ids, max_new_tokens, s, report) for s in seeds]
        if not ours:
            return []
        path = ours[0][0]
        self.calls += 1
        theirs: list[tuple[int, Asked]] = []
        if self.level == 1:
            bodies, mine = [b for _, b in ours], list(range(len(ours)))
        else:
            bodies, mine, theirs = self._mixed([b for _, b in ours], prompt_ids, max_new_tokens, seeds[0])
        try:
            answers = self.client.post_many(path, bodies, concurrency=self.level)
        except EngineUnavailable as e:
            done = [e.done[i] for i in mine if i < len(e.done)]
            raise EngineUnavailable(e.detail, [self._read(a, report) for a in done]) from e
        for i, asked in theirs:
            self._background(answers[i], asked)
        return [self._read(answers[i], report) for i in mine]

    def _mixed(
        self, ours: list[dict[str, Any]], prompt: Sequence[int], tokens: int, seed: int
    ) -> tuple[list[dict[str, Any]], list[int], list[tuple[int, Asked]]]:
        """The audit's bodies interleaved with background ones; where each of ours lies, and
        what each background request asked. Where the server holds LoRA adapters, every other
        background request on average asks one of them at another scale than the audit's
        requests run at (``--adapter``'s scale, else the server's own: 0 where that is 1, else 1),
        so batches mix adapters."""
        rng = np.random.default_rng([self.level, self.calls, int(seed) % 2**63])
        n = len(ours)
        extra = max(self.level - n, n)
        held = self.endpoint.adapters if self.endpoint is not None else {}
        asks = []
        for j in range(extra):
            length = int(rng.integers(1, 2 * len(prompt) + 3))
            p = tuple(int(x) for x in rng.integers(0, self.vocab, size=length))
            m = int(rng.integers(1, tokens + 3))
            s = self.settings[int(rng.integers(len(self.settings)))]
            _, body = self.profile.generation(list(p), m, int(rng.integers(2**31)), s, False)
            adapter: tuple[tuple[int, float], ...] = ()
            if held and rng.integers(2):  # drawn only where adapters are held: the rest is as it was
                ids = sorted(held)
                i = ids[int(rng.integers(len(ids)))]
                adapter = ((i, 0.0 if dict(self.adapter).get(i, held[i]) else 1.0),)
                body = self.profile.adapter_body(body, adapter)
            asks.append((self.profile.unseeded(body) if j % 2 else body, Asked(p, m, s, adapter)))
        bodies: list[dict[str, Any]] = []
        mine: list[int] = []
        theirs: list[tuple[int, Asked]] = []
        total = n + extra
        for k in range(total):  # spread ours evenly among theirs
            if len(mine) < n and (len(mine) * total <= k * n):
                mine.append(len(bodies))
                bodies.append(ours[len(mine) - 1])
            else:
                body, asked = asks[len(theirs)]
                theirs.append((len(bodies), asked))
                bodies.append(body)
        return bodies, mine, theirs

    def _background(self, answer: Any, asked: Asked) -> None:
        got = self.profile.read_generation(answer, False).tokens
        if len(got) > asked.tokens or any(not 0 <= x < self.vocab for x in got):
            raise AnswerError(
                f"a background request after {list(asked.prompt)} asking {asked.tokens} tokens was answered "
                f"{list(got)} (more tokens than asked, or ids outside [0, {self.vocab}))"
            )
        self.records.append(
            Record(len(self.records) + 1, asked.prompt, tuple(got), asked.sampling, adapter=asked.adapter)
        )

    def background(self) -> tuple[list[Record], Any]:
        """The background requests answered so far, and the laws along their paths (read as the
        audit's own: from the twin where there is one)."""
        assert self.endpoint is not None
        # a background request that names no adapter ran at the server's own scales
        return list(self.records), twin_laws(self.endpoint, default=())

    def describe(self) -> dict[str, Any]:
        adapted = sum(1 for r in self.records if r.adapter)
        return {
            **super().describe(),
            "load": self.level,
            "background_requests": len(self.records),
            "background_with_adapters": adapted,
        }


class Endpoint:
    """The servers of one audit: the endpoint's replicas and the optional twin, with their
    clients, profile and vocabulary. Made without touching the network; :meth:`open` (or ``with
    Endpoint(options) as endpoint``) checks the servers once: they answer as the profile, serve one
    vocabulary and one model, and what the profile must learn from them (a model's name, an end of
    sequence) is learned. ``transports``: URL -> an httpx transport to reach that server by (the
    stand-ins answer in process this way); sockets for every other URL. ``profile``: the family's
    profile as already learned (a worker's copy of an opened endpoint), instead of a new one."""

    def __init__(
        self,
        options: EndpointOptions,
        token_map: Sequence[str] | None = None,
        transports: dict[str, Any] | None = None,
        profile: Profile | None = None,
    ) -> None:
        if not options.urls:
            raise UsageError("URL: at least one endpoint is needed")
        self.options = options
        self.profile = profile or make_profile(options.profile, token_map)
        ways = dict(transports or {})
        o = options
        width = max((o.concurrency, *o.loads))  # room for the most requests a load level puts in flight
        self.client = Client(o.urls, width, o.timeout, o.retries, transport=ways.get(o.urls[0]))
        self.twin_client = (
            None
            if o.twin is None
            else Client([o.twin], o.concurrency, o.timeout, o.retries, transport=ways.get(o.twin))
        )
        self.identity: dict[str, Any] = {}
        self.server: dict[str, Any] = {}  # the model and build the server says (the sign-off's)
        self.vocab = 0
        #: the LoRA adapters the endpoint holds: id -> the scale a request naming none runs at
        self.adapters: dict[int, float] = {}
        self.opened = False
        #: the audit's settings (set by endpoint_spec): the load axis's background requests use them
        self.settings: tuple[Sampling, ...] = ()
        #: per setting checked (:meth:`check`): "" where its laws along a path are read in one
        #: request, else why they are read one position at a time
        self.along: dict[Sampling, str] = {}
        #: the endpoint's own URL serves without speculation (a source of laws only: the twin of
        #: recorded traffic), so a read that generates its path may be sent to it
        self.speculation_off = False

    def open(self) -> Endpoint:
        """Check the servers (class docstring); a refused endpoint leaves no socket open."""
        if self.opened:
            return self
        try:
            self._check_servers(self.options.vocab)
        except BaseException:
            self.close()
            raise
        self.opened = True
        return self

    def __enter__(self) -> Endpoint:
        return self.open()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _check_servers(self, vocab: int | None) -> None:
        self.identity = self._identity(self.client, "URL")
        self.profile = self.profile.learned(self.identity)
        self.server = {"model": self.identity.get("model"), "build": self.profile.build(self.client)}
        twin_identity = None if self.twin_client is None else self._identity(self.twin_client, "--twin")
        vocab = vocab or self.identity.get("vocab")
        if not vocab:
            raise UsageError(f"--vocab: profile {self.profile.name} cannot read the vocabulary size: give it")
        if twin_identity is not None:
            if twin_identity.get("vocab") not in (None, vocab) or self.identity.get("vocab") not in (
                None,
                vocab,
            ):
                raise UsageError(
                    f"--twin: the endpoint serves a vocabulary of {self.identity.get('vocab')}, "
                    f"its twin {twin_identity.get('vocab')}: they are not the same model"
                )
            if twin_identity.get("model") != self.identity.get("model"):
                raise UsageError(
                    f"--twin: the endpoint serves {self.identity.get('model')}, its twin "
                    f"{twin_identity.get('model')}"
                )
        self.vocab = int(vocab)
        self.adapters = self._adapters(self.client, "URL")
        asked = [i for i, _ in self.options.adapter]
        if asked and self.profile.adapters is None:
            raise UsageError(f"--adapter: profile {self.profile.name} does not send LoRA adapters")
        missing = [i for i in asked if i not in self.adapters]
        if missing:
            raise UsageError(
                f"--adapter: {self.client.urls[0]} holds no LoRA adapter {missing[0]} (it holds "
                f"{sorted(self.adapters) or 'none'}): start it with the adapter (llama-server: --lora)"
            )
        if self.twin_client is not None and self.adapters:
            theirs = self._adapters(self.twin_client, "--twin")
            if theirs != self.adapters:
                raise UsageError(
                    f"--twin: the endpoint holds LoRA adapters {self.adapters} (id: scale), its twin "
                    f"{theirs}: load the same adapters in both (the laws of requests that ask for one "
                    "are read there)"
                )

    def _adapters(self, client: Client, option: str) -> dict[int, float]:
        """The LoRA adapters a server holds, where its family lists them (none where it does not)."""
        if self.profile.adapters is None:
            return {}
        try:
            return self.profile.read_adapters(client.get(self.profile.adapters))
        except RequestRefused:
            return {}  # a server of the family built without the route holds none
        except AnswerError as e:
            raise UsageError(f"{option}: {client.urls[0]} lists its LoRA adapters wrongly: {e}") from e
        except EngineUnavailable as e:
            raise UsageError(f"{option}: cannot reach {client.urls[0]}: {e.detail}") from e

    def _identity(self, client: Client, option: str) -> dict[str, Any]:
        try:
            return self.profile.identity(client)
        except EngineUnavailable as e:
            raise UsageError(f"{option}: cannot reach {client.urls[0]}: {e.detail}") from e
        except (RequestRefused, AnswerError) as e:
            raise UsageError(
                f"{option}: {client.urls[0]} does not answer as profile {self.profile.name}: {e} (if it is "
                f"another kind of server, --profile names its family: {', '.join(PROFILES)})"
            ) from e

    def engine(
        self, sampling: Sampling, adapter: tuple[tuple[int, float], ...] | None = None
    ) -> EndpointEngine:
        """One setting (and LoRA adapter scales: (id, scale) pairs; empty: the server's own; None:
        the audit's, ``--adapter``) of this endpoint as an engine, its twin beside it."""
        if adapter is None:
            adapter = self.options.adapter
        twin = None
        if self.twin_client is not None:
            twin = EndpointEngine(self.twin_client, self.profile, sampling, self.vocab, adapter=adapter)
        made = EndpointEngine(
            self.client, self.profile, sampling, self.vocab, twin, self.twin_client, adapter=adapter
        )
        made.endpoint = self
        return made

    def check(self, prompt: Seq, samplings: Sequence[Sampling]) -> None:
        """Before sampling: every setting is accepted; the twin serves the model the endpoint
        serves (their laws after the first prompt agree); every cut-off asked changes the law."""
        for s in samplings:
            e = self.engine(s)
            try:
                law = e.target_law(prompt)
                if e.twin is not None:
                    own = EndpointEngine(
                        self.client, self.profile, s, self.vocab, adapter=self.options.adapter
                    ).target_law(prompt)
                    if tv(own, law) > SAME_MODEL_TV:
                        raise UsageError(
                            f"--twin: after {list(prompt)} under {s.label} the endpoint's law and "
                            f"its twin's differ by TV {tv(own, law):.3g}: not the same model or settings"
                        )
                if s.truncated:
                    plain = self.engine(Sampling(s.temperature)).target_law(prompt)
                    if cut_changes(plain, s) and tv(plain, law) < 1e-9:
                        raise UsageError(
                            f"{s.label}: the server's law after {list(prompt)} is the same with and without "
                            "the cut-offs: it ignores a sampling parameter (not assumed: read from its laws)"
                        )
            except RequestRefused as err:
                raise UsageError(f"{s.label}: the server refuses this setting: {err.body[:300]}") from err
            except EngineUnavailable as err:
                raise UsageError(f"cannot reach the server: {err.detail}") from err
        self._twin_is_plain(prompt, samplings[0])
        for s in samplings:
            self.check_along(prompt, s)

    def _twin_is_plain(self, prompt: Seq, s: Sampling) -> None:
        """A twin that speculates is no twin: one request of 16 tokens to it must say (where the
        family's answers carry counters) that nothing was drafted, else a usage error at once."""
        if self.twin_client is None or not self.profile.counters:
            return
        twin = EndpointEngine(self.twin_client, self.profile, s, self.vocab, adapter=self.options.adapter)
        try:
            (g,) = twin.generate_many(list(prompt), 16, [1])
        except (RequestRefused, AnswerError, EngineUnavailable):
            return  # its faults show where its laws are read
        if g.drafted:
            raise UsageError(
                f"--twin: {self.twin_client.urls[0]} drafted {g.drafted} tokens in one request of 16: it "
                "speculates; "
                "the twin is the same model served without speculation (start it without a draft model or "
                "speculation type)"
            )

    def check_along(self, prompt: Seq, s: Sampling) -> None:
        """Where the family reads the laws along a path in one request: learn what that read
        needs (:meth:`Profile.learned_along`), then compare its laws along the two likeliest next
        tokens after ``prompt`` with the one-token recipe's; above :data:`SAME_MODEL_TV` the
        setting's laws are read one position at a time, and :attr:`along` says why."""
        p = self.profile
        path = tuple(prompt)
        probe = p.laws_along_request(path + (0,), s, self.vocab, len(path))
        if probe is None:
            return  # no such read for this family or setting
        if p.along_generates and self.twin_client is None and not self.speculation_off:
            self.along[s] = "the path would be generated by the speculative server itself (give a --twin)"
            return
        law_client = self.twin_client or self.client
        e = self.engine(s)
        try:
            one = [e.target_law(path)]
            for _ in range(2):
                path += (int(np.argmax(one[-1])),)
                one.append(e.target_law(path))
            request = p.laws_along_request(path, s, self.vocab, len(prompt))
            assert request is not None
            answer = law_client.post(request[0], e._adapted(request[1]))
            if p.counters and p.law_drafted(answer):
                self.along[s] = "the server the laws are read from drafted the path (it speculates)"
                return
            self.profile = p = p.learned_along(answer, s, self.vocab, path, len(prompt), one[0])
            along = p.read_laws_along(answer, s, self.vocab, path, len(prompt))
        except (RequestRefused, AnswerError) as err:
            self.along[s] = f"the read along a path failed ({str(err)[:200]})"
            return
        gaps = [tv(a, b) for a, b in zip(along, one)]
        worst = int(np.argmax(gaps))
        if gaps[worst] > SAME_MODEL_TV:
            self.along[s] = (
                f"the laws read along a path differ from the one-token recipe's by TV {gaps[worst]:.3g} "
                f"after {list(path[: len(prompt) + worst])}"
            )
            return
        self.along[s] = ""

    def close(self) -> None:
        self.client.close()
        if self.twin_client is not None:
            self.twin_client.close()


def endpoint_spec(
    endpoint: Endpoint,
    prompts: Sequence[Seq] | None = None,
    samplings: Sequence[Sampling] | None = None,
    tokens: int = ENDPOINT_TOKENS,
    name: str | None = None,
    expect: str | None = None,
) -> EngineSpec:
    """The :class:`EngineSpec` of a served engine, after :meth:`Endpoint.open` and
    :meth:`Endpoint.check`."""
    endpoint.open()
    prompts = tuple(tuple(int(x) for x in p) for p in (prompts or DEFAULT_PROMPTS))
    samplings = tuple(samplings or (T1, T07))
    bad = [x for p in prompts for x in p if not 0 <= x < endpoint.vocab]
    if bad:
        raise UsageError(f"--prompt: id {bad[0]} outside the served vocabulary [0, {endpoint.vocab})")
    endpoint.check(prompts[0], samplings)
    endpoint.settings = samplings
    label = name or "endpoint " + ",".join(endpoint.client.urls)
    adapter = endpoint.options.adapter
    scales = ", ".join(f"{i} at {scale:g}" for i, scale in adapter)
    return EngineSpec(
        label,
        "endpoint",
        f"a served engine ({endpoint.profile.name} profile): {endpoint.profile.recipe}"
        + (f"; every request asks LoRA adapter {scales}" if adapter else ""),
        endpoint.engine,
        endpoint.vocab,
        prompts,
        samplings,
        expect=expect,
        tokens=tokens,
        loads=endpoint.options.loads,
        prefix_cache=endpoint.options.prefix_cache,
        completions=endpoint.options.completions,
    )
