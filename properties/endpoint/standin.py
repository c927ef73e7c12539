"""Stand-in servers of the project's own: the reference decoding loop behind the HTTP APIs that
the endpoint profiles (:mod:`.profiles`) speak, with planted bugs, so the endpoint audit can be
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
``GET /health``                ``{"status": "ok"}``
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
recipes read, in float64. Model work runs on one worker thread with one torch thread (its own
setting: the caller's threads are left alone).

Planted bugs (:data:`BUGS`, ``bug=``), each a one-line change marked ``# bug:`` in the code:

===================  ====================  ==================================================
bug                  verdict               models
===================  ====================  ==================================================
greedy_verify        lossy                 verification commits the target's argmax at T > 0
                                           (sglang PR#9127, greedy verify on some hardware)
no_speculation       no_speculation        speculation silently off: plain sampling, counters 0
off_with_logprobs    pass, flagged         speculation off only for requests that ask for
                                           probabilities (vllm#34497)
zero_logprobs        misreported           every emitted token reported with probability 1.0,
                                           logprob 0.0 (llama.cpp#27972)
first_token_only     misreported           only the first token's reported probability is the
                                           target's; later ones are the draft's (PR#27196)
ignores_seed         contract_violation    a fixed private seed whatever the request says
ignores_top_k        usage error           ``top_k`` accepted but not applied, in the law and in
                                           sampling alike (the audit refuses before sampling)
flaky                pass                  every ``flaky_every``-th request fails, HTTP 503 and a
                                           dropped connection alternately (retries absorb it)
dies                 underpowered          after ``dies_after`` requests it stops answering:
                                           connections refused (``die="refuse"``) or hung
                                           until the stand-in stops (``die="hang"``)
===================  ====================  ==================================================
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import dataclasses
import functools
import http.server
import json
import math
import os
import socket
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from specproof.properties.endpoint.profiles import _joint_cutoffs
from specproof.properties.engine.contract import Sampling, Seq
from specproof.properties.engine.loops import ReferenceEngine, engine_target
from specproof.reference.choices import Sampler
from specproof.reference.errors import SpecproofError, UsageError
from specproof.reference.processes import node_contexts
from specproof.reference.proposers import PROPOSERS
from specproof.reference.rules import RULES
from specproof.reference.step import make_step
from specproof.reference.transformer import KVCache, TinyTransformer, TransformerLM
from specproof.reference.tree import DraftTree

#: bug -> (the verdict the endpoint audit must give, the public bug class it models)
BUGS: dict[str, tuple[str, str]] = {
    "greedy_verify": (
        "lossy",
        "verification commits the target's argmax at T > 0 (sglang PR#9127: greedy verify on some "
        "hardware); the first token, sampled before any draft, stays random",
    ),
    "no_speculation": ("no_speculation", "speculation silently off: plain sampling, counters 0"),
    "off_with_logprobs": (
        "pass",
        "speculation off only for requests that ask for probabilities (vllm#34497): the law holds, "
        "speculation.off_when_probabilities_requested says so",
    ),
    "zero_logprobs": (
        "misreported",
        "every emitted token reported with probability 1.0 / logprob 0.0 (llama.cpp#27972)",
    ),
    "first_token_only": (
        "misreported",
        "only the first token's reported probability is the target's, later ones are the draft "
        "model's (PR#27196)",
    ),
    "ignores_seed": ("contract_violation", "a fixed private seed: every request decodes alike"),
    "ignores_top_k": (
        "usage_error",
        "top_k accepted but not applied, in the law and in sampling alike (refused before sampling)",
    ),
    "flaky": ("pass", "every flaky_every-th request fails: HTTP 503 and a dropped connection alternately"),
    "dies": (
        "underpowered",
        "stops answering after dies_after requests (connections refused, or hung past the timeout)",
    ),
}

#: the private seed of ``ignores_seed``
FIXED_SEED = 1234
#: the log-probability shown for an id the cut-offs removed (vLLM clamps -inf to this)
NEG_LOGPROB = -9999.0


def token_texts(vocab: int) -> list[str]:
    """The stand-in's token texts, id -> text: the token map of the ``openai`` profile."""
    return [f"<t{i}>" for i in range(vocab)]


def _logprob(p: float) -> float:
    return math.log(p) if p > 0 else NEG_LOGPROB


class RequestError(SpecproofError):
    """A request the stand-in refuses (HTTP ``status``, 400 unless said)."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.message, self.status = message, status


# --------------------------------------------------------------------------- the served model


class ServedModel:
    """The model a stand-in serves: the target, its laws (memoized logits), the ``draft``
    proposer's drafter and the reference loops. Not thread-safe: :class:`StandIn` calls it from
    one worker thread."""

    def __init__(self, seed: int = 0, vocab: int = 8) -> None:
        base = engine_target()
        if (seed, vocab) == (0, base.vocab):
            self.target = base
        else:
            self.target = TinyTransformer(dataclasses.replace(base.config, vocab=vocab), seed=seed)
        self.seed, self.vocab = seed, vocab
        self.proposer = PROPOSERS["draft"]
        self.drafter = self.proposer.make_drafter(self.target, trained=False)
        self.name = f"tiny-transformer-seed{seed}-v{vocab}"
        self.params = sum(p.numel() for p in self.target.parameters())
        self._logits: dict[Seq, np.ndarray] = {}
        self._loops: dict[tuple[float, str], ReferenceEngine] = {}
        self._lms: dict[float, TransformerLM] = {}

    def logits(self, context: Seq) -> np.ndarray:
        if context not in self._logits:
            with torch.no_grad():
                out, _ = self.target.forward(torch.tensor(context), KVCache())
            self._logits[context] = out[-1].to(torch.float64).numpy().copy()
        return self._logits[context]

    def law(self, context: Seq, s: Sampling, joint: bool = False) -> np.ndarray:
        """The law after ``context`` under ``s``: HF's order of the cut-offs, or SGLang's
        (top-k and top-p jointly on the tempered law, then min-p) with ``joint``."""
        z = self.logits(context)
        if joint and s.truncated and not s.greedy:
            tempered = np.asarray(Sampling(s.temperature).law(list(z)))
            return np.asarray(_joint_cutoffs(tempered, s))
        return np.asarray(s.law(list(z)))

    def draft_prob(self, context: Seq, token: int) -> float:
        """The draft model's probability of ``token`` after ``context`` (its law at T = 1)."""
        return float(self.drafter(context).law(context)[token])

    def loop(self, temperature: float, rule: str) -> ReferenceEngine:
        """The reference loop (KV cache, tree forward) at ``temperature`` verified by ``rule``."""
        key = (temperature, rule)
        if key not in self._loops:
            p = self.proposer
            self._loops[key] = ReferenceEngine(
                self.target, self.drafter, p.process, rule, p.shape, Sampling(temperature)
            )
        return self._loops[key]

    def tempered(self, temperature: float) -> Callable[[Seq], Sequence[float]]:
        """The target's law at ``temperature`` as the reference loop computes it (memoized)."""
        if temperature not in self._lms:
            self._lms[temperature] = TransformerLM(self.target, temperature)
        return self._lms[temperature].law

    def laws_loop(
        self,
        context: Seq,
        n: int,
        rng: np.random.Generator,
        law: Callable[[Seq], Sequence[float]],
        rule: str,
    ) -> tuple[list[int], int, int]:
        """The reference loop's steps on the target laws ``law`` (no KV cache): the same process,
        rule and draws from ``rng`` as :func:`specproof.reference.decode.decode` (with
        :meth:`tempered` laws, the same tokens). Returns the first ``n`` tokens and the drafted
        and accepted counts."""
        proc, verify = self.proposer.process, RULES[rule]
        shape = DraftTree(self.proposer.shape, "shape")
        tokens, drafted, accepted = list(context), 0, 0
        while len(tokens) - len(context) < n:
            ctx = tuple(tokens)
            draft = self.drafter(ctx)
            proposal = proc.propose(Sampler(rng), shape, ctx, draft)
            laws = [law(c) for c in node_contexts(ctx, proposal)]
            step = make_step(proposal.parents, proposal.tokens, proc.draft_probs(ctx, proposal, draft), laws)
            emitted = verify(Sampler(rng), step).emitted(step)
            tokens.extend(emitted)
            drafted += len(proposal.tokens) - 1
            accepted += len(emitted) - 1
        return tokens[len(context) :][:n], drafted, accepted


# --------------------------------------------------------------------------- requests and answers


@dataclass(frozen=True)
class Ask:
    """What a request asks, whatever its shape."""

    prompt: Seq
    tokens: int
    seed: int
    sampling: Sampling
    report: bool  # asks for the probability of each emitted token
    joint: bool = False  # SGLang's order of the cut-offs
    tempered_reports: bool = False  # SGLang reports the law before the cut-offs


@dataclass
class Drawn:
    """What the model produced for an :class:`Ask`."""

    tokens: list[int]
    drafted: int = 0
    accepted: int = 0
    #: per emitted token: its reported probability and the law shown with it (None: not asked)
    reported: list[float] = field(default_factory=list)
    shown: list[np.ndarray] = field(default_factory=list)
    raw: list[np.ndarray] = field(default_factory=list)  # the model's own law (T = 1, no cut-offs)


def _draw(p: np.ndarray, rng: np.random.Generator) -> int:
    cdf = np.cumsum(p)
    return int(min(np.searchsorted(cdf, rng.random() * cdf[-1], side="right"), len(p) - 1))


# --------------------------------------------------------------------------- the server


class StandIn:
    """A stand-in server (module docstring). ``bug``: one of :data:`BUGS` or None;
    ``speculative``: False serves the same model without speculation (a twin; no counters);
    ``model_seed``/``vocab``: the model (another one makes a wrong twin); ``loop``: ``"kv"``
    (the reference loop) or ``"laws"``; ``flaky_every``, ``dies_after``, ``die``: the fault
    bugs' parameters. Use as a context manager: ``url`` while it runs; ``answered`` logs the
    (path, seed, tokens, report) of every generation answered."""

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
    ) -> None:
        if bug is not None and bug not in BUGS:
            raise UsageError(f"bug: {bug!r} is unknown; bugs: {', '.join(BUGS)}")
        if loop not in ("kv", "laws"):
            raise UsageError(f"loop: {loop!r} is neither 'kv' nor 'laws'")
        if openai_style not in ("standard", "llamacpp"):
            raise UsageError(f"openai_style: {openai_style!r} is neither 'standard' nor 'llamacpp'")
        if die not in ("refuse", "hang"):
            raise UsageError(f"die: {die!r} is neither 'refuse' nor 'hang'")
        self.bug, self.speculative, self.loop_kind = bug, speculative, loop
        self.model = ServedModel(model_seed, vocab)
        self.model_name, self.openai_style = model_name, openai_style
        self.flaky_every, self.dies_after, self.die = flaky_every, dies_after, die
        self.texts = token_texts(vocab)
        self.requests = 0  # requests received
        self.failed = 0  # requests failed on purpose (flaky, dies)
        self.answered: list[tuple[str, int, int, bool]] = []
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

    def admit(self) -> str | None:
        """Count a request; what to do instead of answering it: ``"503"``, ``"drop"``,
        ``"hang"`` or None (answer)."""
        with self._lock:
            self.requests += 1
            n = self.requests
            if self.bug == "flaky" and n % self.flaky_every == 0:
                self.failed += 1
                return "503" if (n // self.flaky_every) % 2 else "drop"  # bug: flaky
            if self.bug == "dies" and (self._dead or n > self.dies_after):
                self.failed += 1
                first, self._dead = not self._dead, True  # bug: dies
            else:
                return None
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
        return self._worker.submit(self._generate, ask).result()

    def _generate(self, ask: Ask) -> Drawn:
        m, bug = self.model, self.bug
        bad = [x for x in ask.prompt if not 0 <= x < m.vocab]
        if not ask.prompt or bad:
            raise RequestError(f"prompt: ids must lie in [0, {m.vocab}), got {list(ask.prompt)}")
        seed = FIXED_SEED if bug == "ignores_seed" else ask.seed  # bug: ignores_seed
        try:
            return self._draws(ask, np.random.default_rng(seed))
        except SpecproofError as e:  # an ambiguous top-p cut, say
            raise RequestError(str(e)) from e

    def _draws(self, ask: Ask, rng: np.random.Generator) -> Drawn:
        m, s, bug = self.model, ask.sampling, self.bug
        law = functools.partial(m.law, s=s, joint=ask.joint)
        out = [_draw(law(ask.prompt), rng)]  # the first token, from the prompt's forward pass
        speculate = self.speculative
        if bug == "no_speculation":
            speculate = False  # bug: no_speculation
        if bug == "off_with_logprobs" and ask.report:
            speculate = False  # bug: off_with_logprobs
        drawn = Drawn(out)
        rest = ask.tokens - 1
        if rest > 0 and speculate:
            rule = "greedy" if s.greedy else "token"
            if bug == "greedy_verify":
                rule = "greedy"  # bug: greedy_verify
            context = ask.prompt + (out[0],)
            if self.loop_kind == "kv" and not s.truncated:
                loop = m.loop(s.temperature, rule)
                more = loop.run(context, rest, rng)
                drawn.drafted, drawn.accepted = loop.last_counters["drafted"], loop.last_counters["accepted"]
            else:
                target = m.tempered(s.temperature) if not s.truncated else (lambda c: tuple(law(c)))
                more, drawn.drafted, drawn.accepted = m.laws_loop(context, rest, rng, target, rule)
            out.extend(more)
        else:
            while len(out) < ask.tokens:
                out.append(_draw(law(ask.prompt + tuple(out)), rng))
        if ask.report:
            for d, x in enumerate(out):
                ctx = ask.prompt + tuple(out[:d])
                shown = m.law(ctx, Sampling(s.temperature)) if ask.tempered_reports else law(ctx)
                p = float(shown[x])
                if bug == "zero_logprobs":
                    p = 1.0  # bug: zero_logprobs
                if bug == "first_token_only" and d > 0:
                    p = m.draft_prob(ctx, x)  # bug: first_token_only
                drawn.reported.append(p)
                drawn.shown.append(shown)
                drawn.raw.append(m.law(ctx, Sampling(1.0)))
        return drawn

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

    def seed(self, value: Any) -> int:
        """A request's seed; absent, None or -1 (llama.cpp's 2**32 - 1 too): a random one."""
        if value is None or int(value) in (-1, 2**32 - 1):
            return int.from_bytes(os.urandom(4), "little")
        if int(value) < 0:
            raise RequestError(f"seed: must be >= 0, got {value}")
        return int(value)


def _ids(value: Any, what: str) -> Seq:
    if not isinstance(value, list) or not all(isinstance(x, int) and not isinstance(x, bool) for x in value):
        raise RequestError(f"{what}: expected a list of token ids, got {str(value)[:80]}")
    return tuple(value)


def _count(value: Any, what: str, default: int) -> int:
    n = default if value is None else value
    if not isinstance(n, int) or isinstance(n, bool) or n < 1:
        raise RequestError(f"{what}: expected an integer >= 1, got {value!r}")
    return n


def _top(law: np.ndarray, n: int | None, nonzero: bool = False) -> list[tuple[int, float]]:
    """The ``n`` most likely ids of ``law`` (all for None or a negative n), ties to the smaller id."""
    order = sorted(range(len(law)), key=lambda i: (-float(law[i]), i))
    if nonzero:
        order = [i for i in order if law[i] > 0]
    if n is not None and n >= 0:
        order = order[:n]
    return [(i, float(law[i])) for i in order]


# --------------------------------------------------------------------------- the shapes


def llamacpp_completion(si: StandIn, body: dict[str, Any]) -> dict[str, Any]:
    """``POST /completion``: llama-server's answer."""
    n_probs = body.get("n_probs") or 0
    if not isinstance(n_probs, int) or n_probs < 0:
        raise RequestError(f"n_probs: expected an integer >= 0, got {n_probs!r}")
    post = bool(body.get("post_sampling_probs", False))
    ask = Ask(
        _ids(body.get("prompt"), "prompt"),
        _count(body.get("n_predict"), "n_predict", 16),
        si.seed(body.get("seed")),
        si.sampling(
            body.get("temperature", 0.8),
            body.get("top_k", 40),
            body.get("top_p", 0.95),
            body.get("min_p", 0.05),
        ),
        n_probs > 0,
    )
    d = si.run(ask)
    si.record("/completion", ask)
    out: dict[str, Any] = {
        "index": 0,
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
        "stop_type": "limit",
        "truncated": False,
        "timings": {"prompt_n": len(ask.prompt), "predicted_n": len(d.tokens)},
    }
    if si.speculative:
        out["timings"].update(draft_n=d.drafted, draft_n_accepted=d.accepted)
    if ask.report:
        probs = []
        for x, p, shown, raw in zip(d.tokens, d.reported, d.shown, d.raw):
            entry: dict[str, Any] = {"id": x, "token": si.texts[x], "bytes": list(si.texts[x].encode())}
            if post:
                entry["prob"] = p
                entry["top_probs"] = [
                    {"id": i, "token": si.texts[i], "bytes": list(si.texts[i].encode()), "prob": q}
                    for i, q in _top(shown, n_probs, nonzero=True)
                ]
            else:  # the model's own log-probabilities, before the sampler chain
                entry["logprob"] = _logprob(float(raw[x]))
                entry["top_logprobs"] = [
                    {
                        "id": i,
                        "token": si.texts[i],
                        "bytes": list(si.texts[i].encode()),
                        "logprob": _logprob(q),
                    }
                    for i, q in _top(raw, n_probs)
                ]
            probs.append(entry)
        out["completion_probabilities"] = probs
    return out


def v1_completions(si: StandIn, body: dict[str, Any]) -> dict[str, Any]:
    """``POST /v1/completions``: vLLM's answer when the request asks for token ids, else the
    generic OpenAI one."""
    vllm = "return_token_ids" in body or "return_tokens_as_token_ids" in body
    model = body.get("model")
    if model is not None and model != si.model_name:
        raise RequestError(f"The model `{model}` does not exist.", 404)
    logprobs = body.get("logprobs")
    if logprobs is not None and (not isinstance(logprobs, int) or logprobs < -1):
        raise RequestError(f"logprobs: expected an integer >= -1, got {logprobs!r}")
    ask = Ask(
        _ids(body.get("prompt"), "prompt"),
        _count(body.get("max_tokens"), "max_tokens", 16),
        si.seed(body.get("seed")),
        si.sampling(body.get("temperature"), body.get("top_k"), body.get("top_p"), body.get("min_p")),
        logprobs is not None,
    )
    d = si.run(ask)
    si.record("/v1/completions", ask)
    n_top = None if logprobs == -1 else logprobs
    choice: dict[str, Any] = {
        "index": 0,
        "text": "".join(si.texts[x] for x in d.tokens),
        "logprobs": None,
        "finish_reason": "length",
    }
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
    if vllm:
        key = (
            (lambda i: f"token_id:{i}") if body.get("return_tokens_as_token_ids") else (lambda i: si.texts[i])
        )
        choice["token_ids"] = d.tokens
        if body.get("return_token_ids"):
            choice["prompt_token_ids"] = list(ask.prompt)
        if ask.report:
            tops = []
            for x, shown in zip(d.tokens, d.shown):
                top = {key(i): _logprob(q) for i, q in _top(shown, n_top)}
                top[key(x)] = _logprob(float(shown[x]))  # vLLM lists the sampled token too
                tops.append(top)
            choice["logprobs"] = {
                "text_offset": list(range(len(d.tokens))),
                "token_logprobs": [_logprob(p) for p in d.reported],
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
    elif ask.report and si.openai_style == "llamacpp":
        choice["logprobs"] = {
            "content": [
                {
                    "id": x,
                    "token": si.texts[x],
                    "bytes": list(si.texts[x].encode()),
                    "logprob": _logprob(p),
                    "top_logprobs": [
                        {
                            "id": i,
                            "token": si.texts[i],
                            "bytes": list(si.texts[i].encode()),
                            "logprob": _logprob(q),
                        }
                        for i, q in _top(shown, n_top)
                    ],
                }
                for x, p, shown in zip(d.tokens, d.reported, d.shown)
            ]
        }
    elif ask.report:
        choice["logprobs"] = {
            "text_offset": list(range(len(d.tokens))),
            "token_logprobs": [_logprob(p) for p in d.reported],
            "tokens": [si.texts[x] for x in d.tokens],
            "top_logprobs": [{si.texts[i]: _logprob(q) for i, q in _top(shown, n_top)} for shown in d.shown],
        }
    return out


def sglang_generate(si: StandIn, body: dict[str, Any]) -> dict[str, Any]:
    """``POST /generate``: SGLang's answer."""
    sp = body.get("sampling_params") or {}
    if not isinstance(sp, dict):
        raise RequestError("sampling_params: expected an object")
    report = bool(body.get("return_logprob", False))
    n_top = body.get("top_logprobs_num") or 0
    ask = Ask(
        _ids(body.get("input_ids"), "input_ids"),
        _count(sp.get("max_new_tokens"), "max_new_tokens", 128),
        si.seed(sp.get("sampling_seed")),
        si.sampling(sp.get("temperature"), sp.get("top_k"), sp.get("top_p"), sp.get("min_p")),
        report,
        joint=True,
        tempered_reports=True,
    )
    d = si.run(ask)
    si.record("/generate", ask)
    meta: dict[str, Any] = {
        "id": f"{ask.seed:x}",
        "finish_reason": {"type": "length", "length": len(d.tokens)},
        "prompt_tokens": len(ask.prompt),
        "completion_tokens": len(d.tokens),
        "cached_tokens": 0,
    }
    if si.speculative:
        meta.update(spec_num_proposed_drafts=d.drafted, spec_num_correct_drafts=d.accepted)
    if report:
        meta["input_token_logprobs"] = []
        meta["output_token_logprobs"] = [[_logprob(p), x, None] for x, p in zip(d.tokens, d.reported)]
        meta["output_top_logprobs"] = [
            [[_logprob(q), i, None] for i, q in _top(shown, n_top)] if n_top else None for shown in d.shown
        ]
    return {"text": "".join(si.texts[x] for x in d.tokens), "output_ids": d.tokens, "meta_info": meta}


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


POSTS = {"/completion": llamacpp_completion, "/v1/completions": v1_completions, "/generate": sglang_generate}


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
        data = json.dumps(obj).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _fault(self) -> bool:
        """Whether this request is failed on purpose (and was)."""
        what = self.si.admit()
        if what is None:
            return False
        if what == "503":
            self._send(503, {"error": {"code": 503, "message": "Service Unavailable (planted)"}})
            return True
        if what == "hang":
            self.si.hang()
        self.close_connection = True  # no answer at all
        return True

    def do_GET(self) -> None:
        if self._fault():
            return
        path = self.path.split("?", 1)[0]
        if path == "/health":
            self._send(200, {"status": "ok"})
        elif path in ("/v1/models", "/models"):
            self._send(200, models(self.si))
        elif path == "/get_model_info":
            self._send(
                200,
                {
                    "model_path": self.si.model.name,
                    "tokenizer_path": self.si.model.name,
                    "is_generation": True,
                },
            )
        else:
            self._send(404, {"error": {"code": 404, "message": f"no route {path}"}})

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        if self._fault():
            return
        path = self.path.split("?", 1)[0]
        handler = POSTS.get(path)
        if handler is None:
            self._send(404, {"error": {"code": 404, "message": f"no route {path}"}})
            return
        try:
            body = json.loads(raw or b"null")
            if not isinstance(body, dict):
                raise RequestError("expected a JSON object")
            self._send(200, handler(self.si, body))
        except json.JSONDecodeError as e:
            self._send(400, {"error": {"code": 400, "message": f"invalid JSON: {e}"}})
        except RequestError as e:
            self._send(
                e.status, {"error": {"code": e.status, "message": e.message, "type": "invalid_request_error"}}
            )
        except concurrent.futures.CancelledError:  # stopping
            self.close_connection = True
        except Exception as e:  # a fault of the stand-in itself: say what it is (HTTP 500)
            if self.si._stopping.is_set():
                self.close_connection = True
                return
            self._send(500, {"error": {"code": 500, "message": f"{type(e).__name__}: {e}"}})


@contextlib.contextmanager
def serve(
    bug: str | None = None, speculative: bool = True, model_seed: int = 0, vocab: int = 8, **options: Any
) -> Iterator[str]:
    """A :class:`StandIn` started for the block; its URL. ``options``: :class:`StandIn`'s."""
    with StandIn(bug, speculative, model_seed, vocab, **options) as si:
        yield si.url
