"""HTTP for the endpoint audit: JSON requests to one server or to several replicas of one
deployment, many at once, with bounded concurrency, timeouts and bounded retries.

Request ``i`` of a batch goes to replica ``i mod replicas``; since a sample is a function of its
seed alone, which replica served it never changes what it is. A request that fails in transit
(connection refused or dropped, a timeout, HTTP 429 or 5xx) is sent again, up to ``retries``
times with a growing pause; the same request gives the same sample, so a retry never counts a
sample twice. When a request still fails, :meth:`Client.post_many` raises
:class:`~specproof.properties.engine.contract.EngineUnavailable` holding the answers that
completed before it, in order: nothing drawn is lost. An answer the server gives deliberately
(HTTP 4xx other than 429) is not retried: :class:`RequestRefused` carries its message. A
failure states the request's first and last errors and the first error the client met on any
request: a server that crashed on one request refuses the connections of the rest, and the crash
is the cause worth reading.

The client's event loop runs in a thread of its own, so its blocking calls work from any caller,
one that is itself inside a running event loop (an async service, a notebook) included; a
``transport`` (any httpx transport) replaces the sockets, e.g. to reach a stand-in in process.
:meth:`Client.submit_many` returns at once with the answers to come: the batches it is given
share one gate of ``concurrency`` requests, served first come first served, so that a caller
which submits the next batch before it reads the last keeps the server as busy as a plain load
generator would (the audit's sample stage draws ahead so).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import threading
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import httpx

from specproof.properties.engine.contract import EngineUnavailable, NotStreamed
from specproof.reference.errors import SpecproofError, UsageError

RETRY_STATUS = {429, 500, 502, 503, 504}


class _Again(SpecproofError):
    """One attempt of a request failed in a way a retry may cure; ``what`` says how. Never leaves
    the client: the retry loop catches it (a project error all the same, like every other)."""

    def __init__(self, what: str) -> None:
        super().__init__(what)
        self.what = what


class RequestRefused(SpecproofError):
    """The server answered a request with an error of its own (HTTP 4xx): it refuses what was
    asked, so asking again will not help. ``status`` and ``body`` are its answer."""

    def __init__(self, url: str, status: int, body: str) -> None:
        super().__init__(f"{url} answered HTTP {status}: {body[:300]}")
        self.url, self.status, self.body = url, status, body


def check_url(url: str, option: str = "URL") -> str:
    """``url`` without its trailing slash, or a :class:`UsageError` naming ``option``."""
    if not isinstance(url, str) or not url.startswith(("http://", "https://")):
        raise UsageError(f"{option}: {url!r} is not an http:// or https:// address")
    return url.rstrip("/")


class Client:
    """JSON over HTTP to ``urls`` (replicas of one deployment). Not thread-safe; one per audit."""

    def __init__(
        self,
        urls: Sequence[str],
        concurrency: int = 8,
        timeout: float = 60.0,
        retries: int = 3,
        backoff: float = 0.25,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        if not urls:
            raise UsageError("URL: at least one endpoint is needed")
        if not isinstance(concurrency, int) or concurrency < 1:
            raise UsageError(f"concurrency: must be an integer >= 1, got {concurrency!r}")
        if not timeout > 0:
            raise UsageError(f"timeout: must be positive, got {timeout!r}")
        if not isinstance(retries, int) or retries < 0:
            raise UsageError(f"retries: must be an integer >= 0, got {retries!r}")
        self.urls = [check_url(u) for u in urls]
        self.concurrency, self.timeout, self.retries, self.backoff = concurrency, timeout, retries, backoff
        self.transport = transport
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._http: httpx.AsyncClient | None = None
        self._gate: asyncio.Semaphore | None = None  # submit_many's, shared by its batches
        self.requests = 0  # requests sent, retries included
        self.retried = 0
        #: the first failed attempt of any request (kept to name the cause of later failures)
        self.first_error: str | None = None

    # -- the event loop this client owns, in its own thread ------------------------------------

    def _start(self, coro: Any) -> concurrent.futures.Future[Any]:
        """Schedule ``coro`` on the client's loop (started on first use); its future."""
        if self._loop is None:
            self._loop = asyncio.new_event_loop()
            self._thread = threading.Thread(target=self._loop.run_forever, daemon=True, name="specproof-http")
            self._thread.start()
        return asyncio.run_coroutine_threadsafe(coro, self._loop)

    def _run(self, coro: Any) -> Any:
        """Run ``coro`` on the client's loop and wait for it (from any thread, in a loop or not)."""
        future = self._start(coro)
        try:
            return future.result()
        except BaseException:
            future.cancel()  # Ctrl-C while waiting: the request stops too
            raise

    def _client(self) -> httpx.AsyncClient:
        if self._http is None:
            limits = httpx.Limits(
                max_connections=self.concurrency, max_keepalive_connections=self.concurrency
            )
            self._http = httpx.AsyncClient(timeout=self.timeout, limits=limits, transport=self.transport)
        return self._http

    def close(self) -> None:
        """Close the connections and stop the loop's thread (pending requests are cancelled)."""
        loop, self._loop = self._loop, None
        if loop is None:
            return
        http, self._http = self._http, None
        self._gate = None

        async def shut() -> None:
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            if http is not None:
                await http.aclose()

        try:
            asyncio.run_coroutine_threadsafe(shut(), loop).result(timeout=10)
        except Exception:
            pass  # closing: nothing is left to save
        loop.call_soon_threadsafe(loop.stop)
        if self._thread is not None:
            self._thread.join(timeout=10)
        if not loop.is_running():
            loop.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- requests ------------------------------------------------------------------------------

    def _note(self, what: str) -> str:
        """Record a failed attempt; the first one this client met is kept, since a server that
        crashed on one request answers the next ones with refused connections only."""
        if self.first_error is None:
            self.first_error = what
        return what

    def _failed(self, method: str, url: str, first: str, last: str) -> EngineUnavailable:
        text = f"{method} {url} failed {self.retries + 1} times; last: {last}"
        if first != last:
            text += f"; first: {first}"
        if self.first_error not in (None, first, last):
            text += f"; the first error this client met (another request): {self.first_error}"
        return EngineUnavailable(text)

    async def _retrying(self, method: str, url: str, attempt: Callable[[], Awaitable[Any]]) -> Any:
        """``attempt()`` until it returns, at most ``retries + 1`` times with a growing pause; an
        attempt that fails in transit raises :class:`_Again` with what went wrong (kept to name
        the failure), a refusal passes through."""
        first = last = ""
        for n in range(self.retries + 1):
            if n:
                self.retried += 1
                await asyncio.sleep(self.backoff * 2 ** (n - 1))
            self.requests += 1
            try:
                return await attempt()
            except _Again as again:
                last = self._note(again.what)
                first = first or last
            except httpx.TransportError as e:
                last = self._note(f"{type(e).__name__}: {e or 'no answer'}")
                first = first or last
        raise self._failed(method, url, first, last)

    def _refused(self, url: str, status: int, text: str) -> None:
        """An HTTP error status: retried (:class:`_Again`) where it may pass, else refused."""
        if status in RETRY_STATUS:
            raise _Again(f"HTTP {status}: {text[:200]}")
        self._note(f"HTTP {status}: {text[:200]}")
        raise RequestRefused(url, status, text)

    async def _send(self, method: str, url: str, body: Any) -> Any:
        async def once() -> Any:
            r = await self._client().request(method, url, json=body)
            if r.status_code >= 400:
                self._refused(url, r.status_code, r.text)
            try:
                return r.json()
            except json.JSONDecodeError as e:
                raise _Again(f"an answer that is not JSON: {r.text[:200]!r}") from e

        return await self._retrying(method, url, once)

    async def _send_stream(self, url: str, body: Any) -> list[Any]:
        """A POST whose answer is streamed (``text/event-stream``): its events' JSON, in order,
        up to ``data: [DONE]`` or the stream's end; retried as :meth:`_send` is."""

        async def once() -> list[Any]:
            events: list[Any] = []
            async with self._client().stream("POST", url, json=body) as r:
                if r.status_code >= 400:
                    self._refused(url, r.status_code, (await r.aread()).decode(errors="replace"))
                kind = r.headers.get("content-type", "")
                if "text/event-stream" not in kind:
                    await r.aread()
                    raise NotStreamed(url, kind.split(";")[0].strip())
                async for line in r.aiter_lines():
                    if not line.startswith("data:"):
                        continue
                    data = line[5:].strip()
                    if data == "[DONE]":
                        break
                    try:
                        events.append(json.loads(data))
                    except json.JSONDecodeError as e:
                        raise _Again(f"a streamed event that is not JSON: {e}") from e
            return events

        return list(await self._retrying("POST", url, once))

    def post_stream_many(self, path: str, bodies: Sequence[dict[str, Any]]) -> list[list[Any]]:
        """Every body POSTed with its answer streamed (at most ``concurrency`` at once); each
        answer's events in order. Failures as :meth:`post_many`'s."""
        return list(self._run(self._post_many(path, list(bodies), self.concurrency, stream=True)))

    def get(self, path: str, replica: int = 0) -> Any:
        """``GET`` of one replica's ``path``, decoded."""
        return self._run(self._send("GET", self.urls[replica % len(self.urls)] + path, None))

    def get_text(self, path: str, replica: int = 0) -> str:
        """``GET`` of one replica's ``path``, its answer as text (a Prometheus page, say)."""

        async def once() -> str:
            url = self.urls[replica % len(self.urls)] + path
            r = await self._client().get(url)
            if r.status_code >= 400:
                self._refused(url, r.status_code, r.text)
            return r.text

        return str(self._run(self._retrying("GET", self.urls[replica % len(self.urls)] + path, once)))

    def post(self, path: str, body: dict[str, Any], replica: int = 0) -> Any:
        """One ``POST``, its JSON answer decoded."""
        return self._run(self._send("POST", self.urls[replica % len(self.urls)] + path, body))

    def post_many(
        self, path: str, bodies: Sequence[dict[str, Any]], concurrency: int | None = None
    ) -> list[Any]:
        """Every body POSTed (at most ``concurrency`` at once, the client's own by default, request
        ``i`` to replica ``i mod replicas``); the answers in order. A request that fails after its
        retries raises :class:`EngineUnavailable` with the answers before it."""
        if concurrency is not None and not 1 <= concurrency <= self.concurrency:
            raise UsageError(f"concurrency: {concurrency} is not in [1, {self.concurrency}] (the client's)")
        return list(self._run(self._post_many(path, list(bodies), concurrency or self.concurrency)))

    def submit_many(
        self, path: str, bodies: Sequence[dict[str, Any]]
    ) -> concurrent.futures.Future[list[Any]]:
        """Every body POSTed as :meth:`post_many` does, without waiting: the future of the answers
        (its ``result()`` returns them or raises as :meth:`post_many` would). The batches submitted
        share one gate of ``concurrency`` requests in flight, taken in the order they were asked
        for, so a batch submitted before the last one's answers are read waits behind it, never
        beside it (module docstring)."""
        bodies = list(bodies)

        async def go() -> list[Any]:
            if self._gate is None:
                self._gate = asyncio.Semaphore(self.concurrency)
            return await self._post_many(path, bodies, self.concurrency, gate=self._gate)

        return self._start(go())

    async def _post_many(
        self,
        path: str,
        bodies: list[dict[str, Any]],
        concurrency: int,
        stream: bool = False,
        gate: asyncio.Semaphore | None = None,
    ) -> list[Any]:
        gate = gate or asyncio.Semaphore(concurrency)
        out: list[Any] = [None] * len(bodies)
        failed: dict[int, BaseException] = {}

        async def one(i: int) -> None:
            async with gate:
                if failed and i > min(failed):
                    return  # its answer would be discarded: a request before it failed for good
                try:
                    url = self.urls[i % len(self.urls)] + path
                    if stream:
                        out[i] = await self._send_stream(url, bodies[i])
                    else:
                        out[i] = await self._send("POST", url, bodies[i])
                except (EngineUnavailable, RequestRefused, NotStreamed) as e:
                    failed[i] = e

        await asyncio.gather(*(one(i) for i in range(len(bodies))))
        if failed:
            first = min(failed)
            error = failed[first]
            if isinstance(error, EngineUnavailable):
                raise EngineUnavailable(error.detail, out[:first])
            raise error
        return out
