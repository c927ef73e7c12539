"""Stand-in servers of the project's own: the reference decoding loop behind the HTTP APIs that
the endpoint profiles (:mod:`.families`) speak, with planted bugs, so the endpoint audit can be
tested end to end, through HTTP, without a third-party server.

:class:`StandIn` (and :func:`serve`, which yields its URL) runs a stdlib
``http.server.ThreadingHTTPServer`` on 127.0.0.1 only, on a free port, in a daemon thread:

=============================  ==============================================================
``POST /completion``           llama-server's shape: ``tokens``, ``timings.draft_n`` and
                               ``draft_n_accepted``, ``completion_probabilities`` (``prob`` and
                               ``top_probs`` with ``post_sampling_probs``, else ``logprob`` and
                               ``top_logprobs`` of the raw model law)
``POST /v1/completions``       vLLM's shape when the request has ``return_token_ids`` or
                               ``return_tokens_as_token_ids`` (``token_ids``, ``token_id:N``
                               logprob keys, ``logprobs: -1`` for every id, processed logprobs,
                               ``metrics.speculative_decoding``); the generic OpenAI shape
                               otherwise (token texts, ``token_logprobs``, ``top_logprobs`` as
                               {text: logprob}; or llama-server's OpenAI-compatible ``content``
                               list with ids, ``openai_style="llamacpp"``); no counters
``POST /generate``             SGLang's shape: ``output_ids``, ``meta_info`` with
                               ``spec_num_proposed_drafts``, ``spec_num_correct_drafts``,
                               ``output_token_logprobs`` and ``output_top_logprobs`` (the law after
                               temperature, before the cut-offs, as SGLang reports it)
``GET /v1/models``             ``id`` (``model_name``), ``root`` and ``meta.n_vocab``, like
                               llama-server and vLLM
``GET /get_model_info``        ``model_path``, like SGLang
``GET /props``, ``/version``   the build (``build_info``, like llama-server; ``version``, like
                               vLLM): ``specproof-standin``, ``+BUG`` with a planted bug
``GET /health``                ``{"status": "ok"}``
``GET /metrics``               the speculation totals since start, in llama-server's and vLLM's
                               Prometheus names (``llamacpp:spec_decode_num_draft_tokens_total``,
                               ``vllm:spec_decode_num_draft_tokens_total{...}``, and
                               ``..._accepted_tokens_total``)
=============================  ==============================================================

Behind them, one served model (:class:`ServedModel`): :func:`~specproof.properties.engine.loops.engine_target`
(V = 8) or, for a wrong twin, another :class:`~specproof.reference.transformer.TinyTransformer` (another
``model_seed`` or ``vocab``). A request for M tokens under seed s draws with
``numpy.random.default_rng(s)`` (equal seeds, equal outputs, whichever thread or replica serves
it): the first token from the target's law after the prompt (a server samples it from the
prompt's forward pass, before any draft exists, so a one-token request, the profiles' law
recipe, drafts nothing), then, on a speculative stand-in, the other M - 1 by the reference loop
(:class:`~specproof.properties.engine.loops.ReferenceEngine`: the ``draft`` proposer's sampled
chain of 3, token-level verification, the target's KV cache; ``loop="laws"`` runs the same process
and rule step by step on memoized laws instead, the same draws without the tensors, about ten times
faster). The KV-cache loop samples with a temperature only: a setting with cut-offs (top-k, top-p,
min-p) is speculated on memoized laws whatever ``loop`` says, the same process and rule verifying
against :meth:`Sampling.law <specproof.properties.engine.contract.Sampling.law>` (SGLang's joint
order on ``/generate``), the drafts still from the untruncated draft model at T = 1 (token-level
verification is exact for any draft law the drafts truly come from). Temperature 0 verifies
greedily (the ``greedy`` rule). ``ignore_eos`` and the other neutral fields are accepted and
ignored (the model has no end of sequence). Reported probabilities are the laws the audit's
recipes read, in float64, read along the output in one forward (as a server reads the rows it
verified); without speculation the stand-in decodes on a KV cache, one token's forward per token.
Both agree with each prefix's own forward up to rounding, and each is a function of the path
alone. Model work runs on one worker thread with one torch thread (its own setting: the caller's
threads are left alone).

Planted bugs (``bug=``): :data:`~.standin_bugs.BUGS`, each a one-line change marked ``# bug:`` in
the code below; :mod:`.standin_bugs` lists them with the verdict each must get.

Requests in flight are those the stand-in has received and not yet answered (they wait for the
one worker thread), so a client with N requests open at once puts N in flight.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import dataclasses
import functools
import http.server
import json
import os
import socket
import threading
from collections.abc import Iterator, Sequence
from typing import Any

import httpx
import numpy as np
import torch

from specproof.properties.endpoint.families import llamacpp, openai, sglang, vllm, wire
from specproof.properties.endpoint.families.wire import Ask, Drawn, RequestError, token_texts
from specproof.properties.endpoint.served_model import ServedModel
from specproof.properties.endpoint.standin_bugs import BUGS, FIXED_SEED, TRANSPORT_FAULTS
from specproof.properties.engine.contract import Sampling, Seq
from specproof.properties.engine.stop_mutants import cut
from specproof.reference.errors import SpecproofError, UsageError


def _cut(steps: Sequence[int], n: int) -> list[int]:
    """Steps of tokens cut to the first ``n`` tokens (the last step may be cut short)."""
    out, total = [], 0
    for e in steps:
        if total >= n:
            break
        out.append(min(e, n - total))
        total += out[-1]
    return out


def _draw(p: np.ndarray, rng: np.random.Generator) -> int:
    cdf = np.cumsum(p)
    return int(min(np.searchsorted(cdf, rng.random() * cdf[-1], side="right"), len(p) - 1))


# --------------------------------------------------------------------------- the server


class StandIn:
    """A stand-in server (module docstring). ``bug``: one of :data:`BUGS` or None;
    ``speculative``: False serves the same model without speculation (a twin; no counters);
    ``model_seed``/``vocab``: the model (another one makes a wrong twin); ``loop``: ``"kv"``
    (the reference loop) or ``"laws"``; ``flaky_every``, ``dies_after``, ``die``: the fault
    bugs' parameters; ``listen``: False answers in process only (no socket: reach it through
    :class:`InProcess`; the transport faults then cannot be planted). Use as a context manager:
    ``url`` while it runs; ``answered`` logs the (path, seed, tokens, report) of every generation
    answered."""

    def __init__(
        self,
        bug: str | None = None,
        speculative: bool = True,
        model_seed: int = 0,
        vocab: int = 8,
        *,
        loop: str = "kv",
        model_name: str = "specproof-standin",
        openai_style: str = "standard",
        flaky_every: int = 7,
        dies_after: int = 100,
        die: str = "refuse",
        listen: bool = True,
        adapters: int = 0,
        streams: bool = True,
    ) -> None:
        if bug is not None and bug not in BUGS:
            raise UsageError(f"bug: {bug!r} is unknown; bugs: {', '.join(BUGS)}")
        if loop not in ("kv", "laws"):
            raise UsageError(f"loop: {loop!r} is neither 'kv' nor 'laws'")
        if openai_style not in ("standard", "llamacpp"):
            raise UsageError(f"openai_style: {openai_style!r} is neither 'standard' nor 'llamacpp'")
        if die not in ("refuse", "hang"):
            raise UsageError(f"die: {die!r} is neither 'refuse' nor 'hang'")
        if not listen and bug in TRANSPORT_FAULTS:
            raise UsageError(f"bug: {bug!r} is a fault of the transport: it needs listen=True")
        if not isinstance(adapters, int) or adapters < 0:
            raise UsageError(f"adapters: expected an integer >= 0, got {adapters!r}")
        self.listen = listen
        #: LoRA adapters held (llama-server's ``--lora``): each at scale 1 unless a request's
        #: ``lora`` says otherwise, as llama-server applies its adapters
        self.adapters = adapters
        #: answers a request with ``stream: true`` as an event stream; False: in one piece, as a
        #: server without streaming does (llama-server's shape)
        self.streams = streams
        self.bug, self.speculative, self.loop_kind = bug, speculative, loop
        self.model = ServedModel(model_seed, vocab)
        self.model_name, self.openai_style = model_name, openai_style
        self.flaky_every, self.dies_after, self.die = flaky_every, dies_after, die
        self.texts = token_texts(vocab)
        self.requests = 0  # requests received
        self.failed = 0  # requests failed on purpose (flaky, dies)
        self._failed_once: set[bytes] = set()  # the requests flaky failed (each is failed once)
        self.answered: list[tuple[str, int, int, bool]] = []
        self._flight: dict[int, Ask] = {}  # requests received and not yet answered, by arrival
        self._slot: Seq = ()  # the prompt of the last request served (what its cache holds)
        self._arrivals = 0
        self.most_in_flight = 0  # the most requests it has had in flight at once
        self._last_rows: Seq = ()  # the context of the last speculative request served
        self.drafted_total = self.accepted_total = 0  # what GET /metrics says
        self._rates: list[float] = []  # each request's accepted share (averaged_metric's mean)
        self._lock = threading.Lock()
        self._dead = False
        self._stopping = threading.Event()
        self._connections: set[socket.socket] = set()
        self._worker: concurrent.futures.ThreadPoolExecutor | None = None
        self._http: http.server.ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self.url = ""

    # -- lifetime ------------------------------------------------------------------------------

    def start(self) -> StandIn:
        # torch reads its thread setting in the thread that first asks: ask here, so that the
        # worker's one thread stays its own and the caller keeps its setting
        torch.get_num_threads()
        self._worker = concurrent.futures.ThreadPoolExecutor(
            1, thread_name_prefix="standin-model", initializer=torch.set_num_threads, initargs=(1,)
        )
        if not self.listen:
            self.url = f"http://standin-{id(self):x}.invalid"
            return self
        self._http = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
        self._http.daemon_threads = True
        self._http.standin = self  # type: ignore[attr-defined]
        self.url = f"http://127.0.0.1:{self._http.server_address[1]}"
        self._thread = threading.Thread(
            target=self._http.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True, name="standin-http"
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopping.set()
        if self._http is not None:
            self._http.shutdown()
            self._http.server_close()
        with self._lock:
            open_ = list(self._connections)
        for sock in open_:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
        if self._thread is not None:
            self._thread.join(timeout=5)
        if self._worker is not None:
            self._worker.shutdown(wait=True, cancel_futures=True)

    def __enter__(self) -> StandIn:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- faults --------------------------------------------------------------------------------

    def admit(self, key: bytes = b"") -> str | None:
        """Count a request (``key``: its method, path and body); what to do instead of answering
        it: ``"503"``, ``"drop"``, ``"hang"`` or None (answer). A flaky server fails every
        ``flaky_every``-th request once: the same request sent again is answered, so retries
        absorb it whatever the interleaving of the requests in flight (a load-proof test)."""
        with self._lock:
            self.requests += 1
            n = self.requests
            if self.bug == "flaky" and key in self._failed_once:
                return None
            if self.bug == "flaky" and n % self.flaky_every == 0:
                self.failed += 1
                self._failed_once.add(key)
                return "503" if (n // self.flaky_every) % 2 else "drop"  # bug: flaky
            if self.bug in ("dies", "crashes") and (self._dead or n > self.dies_after):
                self.failed += 1
                first, self._dead = not self._dead, True  # bug: dies, crashes
            else:
                return None
        if self.bug == "crashes":
            return "500" if first else "drop"
        if self.die == "hang":
            return "hang"
        if first:  # stop accepting connections: new ones are refused
            assert self._http is not None
            self._http.shutdown()
            self._http.socket.close()
        return "drop"

    def hang(self) -> None:
        self._stopping.wait()

    # -- the model's work ----------------------------------------------------------------------

    def run(self, ask: Ask) -> Drawn:
        """``ask`` drawn on the worker thread (one torch thread), waited for."""
        assert self._worker is not None
        with self._lock:
            self._arrivals += 1
            key = self._arrivals
            self._flight[key] = ask
            self.most_in_flight = max(self.most_in_flight, len(self._flight))
        try:
            drawn = self._worker.submit(self._generate, ask).result()
        finally:
            with self._lock:
                del self._flight[key]
        with self._lock:
            self.drafted_total += drawn.drafted
            self.accepted_total += drawn.accepted
            if drawn.drafted:
                self._rates.append(drawn.accepted / drawn.drafted)
        return drawn

    def metrics_page(self) -> str:
        """``GET /metrics``: the speculation totals since start, in llama-server's Prometheus names."""
        with self._lock:
            drafted, accepted = self.drafted_total, self.accepted_total
            if self.bug == "averaged_metric" and self._rates:
                accepted = round(drafted * sum(self._rates) / len(self._rates))  # bug: averaged_metric
        lines = []
        for name, value, doc in (
            ("spec_decode_num_draft_tokens_total", drafted, "draft tokens proposed"),
            ("spec_decode_num_accepted_tokens_total", accepted, "draft tokens accepted"),
        ):
            lines += [
                f"# HELP llamacpp:{name} {doc}",
                f"# TYPE llamacpp:{name} counter",
                f"llamacpp:{name} {value}",
            ]
            labels = f'{{engine="0",model_name="{self.model_name}"}}'
            lines += [
                f"# HELP vllm:{name} {doc}",
                f"# TYPE vllm:{name} counter",
                f"vllm:{name}{labels} {value}.0",
            ]
        return "\n".join(lines) + "\n"

    def _others(self, ask: Ask) -> list[Ask]:
        """The other requests in flight, in arrival order."""
        with self._lock:
            return [a for a in self._flight.values() if a is not ask]

    def _generate(self, ask: Ask) -> Drawn:
        m, bug = self.model, self.bug
        bad = [x for x in ask.prompt if not 0 <= x < m.vocab]
        if not ask.prompt or bad:
            raise RequestError(f"prompt: ids must lie in [0, {m.vocab}), got {list(ask.prompt)}")
        seed = FIXED_SEED if bug == "ignores_seed" else ask.seed  # bug: ignores_seed
        if bug == "seed_in_flight" and self._others(ask):
            seed = int.from_bytes(os.urandom(4), "little")  # bug: seed_in_flight
        if bug == "adapter_of_batch":
            batch = [a.adapter for a in self._others(ask) if a.adapter != ask.adapter]
            if batch:
                ask = dataclasses.replace(ask, adapter=batch[0])  # bug: adapter_of_batch
        if bug == "nan_reports" and ask.report and ask.tokens > 1:  # drafted positions: garbage
            raise RequestError("Out of range float values are not JSON compliant")  # bug: nan_reports
        try:
            return self._draws(ask, np.random.default_rng(seed))
        except SpecproofError as e:  # an ambiguous top-p cut, say
            raise RequestError(str(e)) from e

    def _hit(self, ask: Ask) -> bool:
        """Whether ``ask`` is a prefix-cache hit: it asks for the cache and shares its start with the
        prompt of the request served before it (the one slot's cache, which it then fills)."""
        prev, self._slot = self._slot, ask.prompt
        if self.bug == "ignores_cache":
            return False  # bug: ignores_cache
        return bool(ask.cache_prompt and prev and prev[:1] == ask.prompt[:1])

    def _draws(self, ask: Ask, rng: np.random.Generator) -> Drawn:
        m, s, bug = self.model, ask.sampling, self.bug
        prev = self._slot
        hit = self._hit(ask)
        law = functools.partial(m.law, s=s, joint=ask.joint, adapter=ask.adapter)
        adapted = any(scale for _, scale in ask.adapter)  # a LoRA adapter moves the target's law
        out = [_draw(law(ask.prompt), rng)]  # the first token, from the prompt's forward pass
        speculate = self.speculative
        if bug == "no_speculation":
            speculate = False  # bug: no_speculation
        if bug == "off_with_logprobs" and ask.report:
            speculate = False  # bug: off_with_logprobs
        if ask.forced is not None:  # a grammar of token ids: the path is given, then one free token
            out = list(ask.forced)[: ask.tokens]
            speculate = False
        drawn = Drawn(out)
        drawn.cached = _cached(prev, ask.prompt) if hit else 0
        rest = ask.tokens - len(out)
        if rest > 0 and speculate:
            rule = "greedy" if s.greedy else "token"
            if bug in ("greedy_verify", "nan_reports"):
                rule = "greedy"  # bug: greedy_verify, nan_reports
            context = ask.prompt + (out[0],)
            target = self._target(ask, adapted)
            others = self._others(ask) if bug == "batch_rows" else []
            crowded = len(others) >= 2 and bool(self._last_rows)  # more than 2 in flight
            poisoned = (
                (crowded and bug == "batch_rows")
                or (bug == "prefix_poison" and hit)
                or (bug == "fork_rows" and ask.forked)
            )
            if bug == "stale_after_hit" and hit:
                more, drawn.drafted, drawn.accepted = m.laws_loop(
                    context,
                    rest,
                    rng,
                    target,
                    rule,
                    stale=True,  # bug: stale_after_hit
                )
                steps = m.last_steps
            elif poisoned and self._last_rows:
                rows = self._last_rows  # bug: batch_rows, prefix_poison, fork_rows
                more, drawn.drafted, drawn.accepted = m.laws_loop(context, rest, rng, target, rule, rows)
                steps = m.last_steps
            elif self.loop_kind == "kv" and not s.truncated and not adapted:
                loop = m.loop(s.temperature, rule)
                more = loop.run(context, rest, rng)
                drawn.drafted, drawn.accepted = loop.last_counters["drafted"], loop.last_counters["accepted"]
                steps = loop.last_steps
            else:
                more, drawn.drafted, drawn.accepted = m.laws_loop(context, rest, rng, target, rule)
                steps = m.last_steps
            out.extend(more)
            drawn.steps = [1] + _cut(steps, rest)
            self._last_rows = context + tuple(more)  # where this request's draft rows were last read
        else:
            row_law = functools.partial(m.law_of, s=s, joint=ask.joint, adapter=ask.adapter)
            out = drawn.tokens = m.decode(ask.prompt, out, ask.tokens, row_law, lambda p: _draw(p, rng))
            drawn.steps = [1] * len(out)
        if ask.stop:
            self._stop(ask, drawn)
        if ask.report:  # the laws along the output, read in one forward
            plain = Sampling(s.temperature)
            for d, (x, z) in enumerate(zip(out, m.logits_along(ask.prompt, out))):
                if ask.tempered_reports:
                    shown = m.law_of(z, plain, adapter=ask.adapter)
                else:
                    shown = m.law_of(z, s, joint=ask.joint, adapter=ask.adapter)
                p = float(shown[x])
                if bug == "zero_logprobs":
                    p = 1.0  # bug: zero_logprobs
                if bug == "first_token_only" and d > 0:
                    p = m.draft_prob(ask.prompt + tuple(out[:d]), x)  # bug: first_token_only
                drawn.reported.append(p)
                drawn.shown.append(shown)
                drawn.raw.append(m.law_of(z, Sampling(1.0), adapter=ask.adapter))
        return drawn

    def _target(self, ask: Ask, adapted: bool) -> Any:
        """The target's law the laws loops verify against: the reference loop's own at the
        temperature where nothing else moves it, else the request's processed law (under its
        adapter scales)."""
        m, s = self.model, ask.sampling
        scales = ask.adapter
        if self.bug == "verify_server_scale" and self.adapters:
            scales = tuple((i, 1.0) for i in range(self.adapters))  # bug: verify_server_scale
        elif not s.truncated and not adapted:
            return m.tempered(s.temperature)
        law = functools.partial(m.law, s=s, joint=ask.joint, adapter=scales)
        return lambda c: tuple(law(c))

    def _stop(self, ask: Ask, drawn: Drawn) -> None:
        """Cut ``drawn`` where its stop strings end it (proofs_notes/stops.md): at the token that
        completes one, inside a step's block or not; the stop bugs cut it per block instead."""
        s = Sampling(1.0, stop=ask.stop, texts=tuple(self.texts))
        fault = "none"
        if self.bug == "stop_past_block":
            fault = "past_block"  # bug: stop_past_block
        elif self.bug == "stop_tail_only":
            fault = "tail_only"  # bug: stop_tail_only
        k = cut(s, tuple(drawn.tokens), tuple(drawn.steps), fault)
        drawn.stopped_by = s.stopped_by(drawn.tokens[:k])
        del drawn.tokens[k:]
        drawn.steps = _cut(drawn.steps, k)

    @property
    def build(self) -> str:
        """The build this stand-in says it is: a planted bug makes another build."""
        return "specproof-standin" + (f"+{self.bug}" if self.bug else "")

    def respond(self, method: str, path: str, raw: bytes) -> tuple[int, Any]:
        """The status and JSON answer to one request (the faults aside: :meth:`admit`)."""
        path = path.split("?", 1)[0]
        if method == "GET":
            if path == "/health":
                return 200, {"status": "ok"}
            if path == "/metrics":
                return 200, self.metrics_page()
            if path == "/lora-adapters":
                scale = 1.0
                return 200, [
                    {"id": i, "path": f"adapter-{i}.gguf", "scale": scale} for i in range(self.adapters)
                ]
            if path in ("/v1/models", "/models"):
                return 200, models(self)
            if path == "/props":  # llama-server's build, and vLLM's below: a bug is a build of its own
                return 200, {"build_info": self.build, "model_path": self.model.name}
            if path == "/version":
                return 200, {"version": self.build}
            if path == "/get_model_info":
                name = self.model.name
                return 200, {"model_path": name, "tokenizer_path": name, "is_generation": True}
            return 404, {"error": {"code": 404, "message": f"no route {path}"}}
        handler = POSTS.get(path)
        if handler is None:
            return 404, {"error": {"code": 404, "message": f"no route {path}"}}
        try:
            body = json.loads(raw or b"null")
            if not isinstance(body, dict):
                raise RequestError("expected a JSON object")
            return 200, handler(self, body)
        except json.JSONDecodeError as e:
            return 400, {"error": {"code": 400, "message": f"invalid JSON: {e}"}}
        except RequestError as e:
            return e.status, {
                "error": {"code": e.status, "message": e.message, "type": "invalid_request_error"}
            }

    def record(self, path: str, ask: Ask) -> None:
        with self._lock:
            self.answered.append((path, ask.seed, ask.tokens, ask.report))

    # -- what each API reads -------------------------------------------------------------------

    def sampling(self, temperature: Any, top_k: Any, top_p: Any, min_p: Any) -> Sampling:
        """A :class:`Sampling` from a request's fields (a cut-off at its neutral value is none)."""
        try:
            t = 1.0 if temperature is None else float(temperature)
            k = None if top_k is None or int(top_k) <= 0 else int(top_k)
            if self.bug == "ignores_top_k":
                k = None  # bug: ignores_top_k
            p = None if top_p is None or float(top_p) >= 1 else float(top_p)
            mp = None if not min_p else float(min_p)
            return Sampling(t, k, p, mp)
        except (TypeError, ValueError, SpecproofError) as e:
            raise RequestError(f"invalid sampling parameters: {e}") from e

    def fork_seed(self, seed: int, j: int) -> int:
        """The seed of completion ``j`` of a request seeded ``seed`` (llama-server's: seed + j)."""
        if self.bug == "shared_choices":
            return seed  # bug: shared_choices
        return (seed + j) % 2**32

    def seed(self, value: Any) -> int:
        """A request's seed; absent, None or -1 (llama.cpp's 2**32 - 1 too): a random one."""
        if value is None or int(value) in (-1, 2**32 - 1):
            return int.from_bytes(os.urandom(4), "little")
        if int(value) < 0:
            raise RequestError(f"seed: must be >= 0, got {value}")
        return int(value)


def models(si: StandIn) -> dict[str, Any]:
    m = si.model
    return {
        "object": "list",
        "data": [
            {
                "id": si.model_name,
                "object": "model",
                "created": 0,
                "owned_by": "specproof",
                "root": m.name,
                "max_model_len": 64,
                "meta": {
                    "vocab_type": 0,
                    "n_vocab": m.vocab,
                    "n_ctx_train": 64,
                    "n_embd": m.target.config.width,
                    "n_params": m.params,
                    "size": 8 * m.params,
                    "ftype": "f64",
                },
            }
        ],
    }


def _v1_completions(si: StandIn, body: dict[str, Any]) -> dict[str, Any]:
    """``POST /v1/completions``: vLLM's answer when the request asks for token ids, else OpenAI's."""
    answer = vllm.completions if vllm.asks_vllm(body) else openai.ROUTES["/v1/completions"]
    return answer(si, body)


#: path -> the family module's answer (one path that two families share is told apart by its body)
POSTS: dict[str, wire.Answer] = {**llamacpp.ROUTES, **sglang.ROUTES, "/v1/completions": _v1_completions}


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as the audit's client expects
    disable_nagle_algorithm = True
    server_version = "specproof-standin"

    @property
    def si(self) -> StandIn:
        return self.server.standin  # type: ignore[attr-defined]

    def setup(self) -> None:
        super().setup()
        with self.si._lock:
            self.si._connections.add(self.connection)

    def finish(self) -> None:
        with self.si._lock:
            self.si._connections.discard(self.connection)
        with contextlib.suppress(OSError):
            super().finish()

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        pass

    def _send(self, status: int, obj: Any) -> None:
        streamed, text = isinstance(obj, wire.Events), isinstance(obj, str)
        data = obj.sse() if streamed else obj.encode() if text else json.dumps(obj).encode()
        kind = (
            "text/event-stream" if streamed else "text/plain; version=0.0.4" if text else "application/json"
        )
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _fault(self, key: bytes) -> bool:
        """Whether this request is failed on purpose (and was)."""
        what = self.si.admit(key)
        if what is None:
            return False
        if what == "503":
            self._send(503, {"error": {"code": 503, "message": "Service Unavailable (planted)"}})
            return True
        if what == "500":  # the request that crashed the engine; the server exits after it
            self._send(500, {"error": {"code": 500, "message": "EngineCore died (planted crash)"}})
            self.wfile.flush()
            http_server = self.si._http
            assert http_server is not None
            http_server.shutdown()
            http_server.socket.close()
            with self.si._lock:
                others = [c for c in self.si._connections if c is not self.connection]
            for sock in others:  # the connections kept alive die with the server
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
            self.close_connection = True
            return True
        if what == "hang":
            self.si.hang()
        self.close_connection = True  # no answer at all
        return True

    def do_GET(self) -> None:
        if not self._fault(f"GET {self.path}".encode()):
            self._send(*self.si.respond("GET", self.path, b""))

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        if self._fault(f"POST {self.path} ".encode() + raw):
            return
        try:
            self._send(*self.si.respond("POST", self.path, raw))
        except concurrent.futures.CancelledError:  # stopping
            self.close_connection = True
        except Exception as e:  # a fault of the stand-in itself: say what it is (HTTP 500)
            if self.si._stopping.is_set():
                self.close_connection = True
                return
            self._send(500, {"error": {"code": 500, "message": f"{type(e).__name__}: {e}"}})


class InProcess(httpx.AsyncBaseTransport):
    """Stand-ins reached without a socket: a request to a stand-in's URL is answered by the same
    code its HTTP handler runs (:meth:`StandIn.respond`), on its model's worker thread. For the
    tests that plant no transport fault (a planted fault is a socket's: it needs the server)."""

    def __init__(self, *standins: StandIn) -> None:
        self.by_url = {si.url: si for si in standins}

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        base = f"{request.url.scheme}://{request.url.host}" + (
            f":{request.url.port}" if request.url.port else ""
        )
        si = self.by_url.get(base)
        if si is None:
            return httpx.Response(502, json={"error": {"code": 502, "message": f"no stand-in at {base}"}})
        raw = await request.aread()
        loop = asyncio.get_running_loop()
        status, obj = await loop.run_in_executor(None, si.respond, request.method, request.url.path, raw)
        if isinstance(obj, wire.Events):
            return httpx.Response(status, content=obj.sse(), headers={"Content-Type": "text/event-stream"})
        if isinstance(obj, str):
            return httpx.Response(status, text=obj)
        return httpx.Response(status, json=obj)


@contextlib.contextmanager
def serve(
    bug: str | None = None, speculative: bool = True, model_seed: int = 0, vocab: int = 8, **options: Any
) -> Iterator[str]:
    """A :class:`StandIn` started for the block; its URL. ``options``: :class:`StandIn`'s."""
    with StandIn(bug, speculative, model_seed, vocab, **options) as si:
        yield si.url


def _cached(before: Seq, prompt: Seq) -> int:
    """The prompt tokens a hit serves from the cache: the start ``prompt`` shares with the prompt
    cached ``before``, less the last prompt token, which is always run again."""
    same = next((i for i, (a, b) in enumerate(zip(before, prompt)) if a != b), min(len(before), len(prompt)))
    return max(0, min(same, len(prompt) - 1))
