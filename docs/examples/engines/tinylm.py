"""A small speculative engine written as a user would: a one-layer attention language model in
numpy, its KV cache (flat or paged), a draft model, and token-level speculative sampling with a
chain of drafts. ``specproof audit engine docs/examples/engines/tinylm.py:exact`` audits it; the
other builders of this folder plant one bug each, as engines shipped them.

Nothing here is specproof's: the engine contract is plain methods (``generate``, ``target_law``,
``target_laws_along``, ``draft_law``, ``last_steps``, ``last_counters``), declared in the class's
``capabilities``.
"""

from __future__ import annotations

import numpy as np


def draw(rng: np.random.Generator, p: np.ndarray) -> int:
    """One token from law ``p`` by inverse CDF on one uniform."""
    c = np.cumsum(p)
    return int(min(np.searchsorted(c, rng.random() * c[-1], side="right"), len(p) - 1))


def _softmax(z: np.ndarray) -> np.ndarray:
    z = z - z.max(axis=-1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=-1, keepdims=True)


class Cache:
    """Keys and values of the tokens forwarded so far, in one array each (grown by doubling)."""

    def __init__(self, width: int) -> None:
        self.k = np.zeros((64, width))
        self.v = np.zeros((64, width))
        self.length = 0
        self.ids: list[int] = []  # the token id of each position (the first ``length`` hold)

    def append(self, k: np.ndarray, v: np.ndarray) -> None:
        n = len(k)
        while self.length + n > len(self.k):
            self.k = np.concatenate([self.k, np.zeros_like(self.k)])
            self.v = np.concatenate([self.v, np.zeros_like(self.v)])
        self.k[self.length : self.length + n], self.v[self.length : self.length + n] = k, v
        self.length += n

    def keys(self) -> tuple[np.ndarray, np.ndarray]:
        return self.k[: self.length], self.v[: self.length]

    def crop(self, length: int) -> None:
        self.length = length


class PagedCache:
    """Keys and values in pages of ``page`` positions and a block table, as paged attention keeps
    them: writing position ``i`` takes page ``i // page`` (a new one when the table is short)."""

    def __init__(self, width: int, page: int = 16) -> None:
        self.width, self.page = width, page
        self.pages: list[tuple[np.ndarray, np.ndarray]] = []
        self.length = 0
        self.ids: list[int] = []  # the token id of each position (the first ``length`` hold)

    def append(self, k: np.ndarray, v: np.ndarray) -> None:
        for i in range(len(k)):
            slot = self.length % self.page
            if self.length // self.page >= len(self.pages):
                self.pages.append((np.zeros((self.page, self.width)), np.zeros((self.page, self.width))))
            pk, pv = self.pages[self.length // self.page]
            pk[slot], pv[slot] = k[i], v[i]
            self.length += 1

    def keys(self) -> tuple[np.ndarray, np.ndarray]:
        if not self.pages:
            return np.zeros((0, self.width)), np.zeros((0, self.width))
        k = np.concatenate([p[0] for p in self.pages])[: self.length]
        v = np.concatenate([p[1] for p in self.pages])[: self.length]
        return k, v

    def crop(self, length: int) -> None:
        """Back to ``length`` positions; the pages past it are released."""
        self.length = length
        del self.pages[-(-length // self.page) :]


class AttentionLM:
    """One attention layer over token and sinusoidal position embeddings, then a projection to
    ``vocab`` logits; ``window``: attend to the last ``window`` positions only (sliding window)."""

    def __init__(
        self, vocab: int, width: int = 32, seed: int = 0, window: int | None = None, scale: float = 7.0
    ):
        rng = np.random.default_rng(seed)
        self.vocab, self.width, self.window = vocab, width, window
        self.embed = rng.standard_normal((vocab, width)) / np.sqrt(width)
        self.wq, self.wk, self.wv = (rng.standard_normal((width, width)) / np.sqrt(width) for _ in range(3))
        self.out = rng.standard_normal((width, vocab)) * scale / np.sqrt(width)
        self.bias = rng.standard_normal(vocab) * 0.5

    def positions(self, start: int, n: int) -> np.ndarray:
        t = np.arange(start, start + n)[:, None]
        f = np.exp(-np.arange(0, self.width, 2) / self.width * np.log(1000.0))[None, :]
        pe = np.zeros((n, self.width))
        pe[:, 0::2], pe[:, 1::2] = np.sin(t * f), np.cos(t * f)
        return 0.5 * pe

    def forward(
        self,
        tokens: list[int],
        cache: Cache | PagedCache,
        window: int | None | str = "own",
        offset: int = 0,
        masked_id: int | None = None,
    ) -> np.ndarray:
        """Logits after each of ``tokens`` (appended to ``cache``): ``[len(tokens), vocab]``;
        ``offset``: added to the position ids (0 in a correct engine); ``masked_id``: keys of this
        token id left out of attention (None in a correct engine)."""
        window = self.window if window == "own" else window
        start = cache.length
        h = self.embed[tokens] + self.positions(start + offset, len(tokens))
        q, k, v = h @ self.wq, h @ self.wk, h @ self.wv
        cache.append(k, v)
        del cache.ids[start:]
        cache.ids.extend(int(x) for x in tokens)
        keys, values = cache.keys()
        scores = q @ keys.T / np.sqrt(self.width)
        t = np.arange(start, start + len(tokens))[:, None]
        j = np.arange(len(keys))[None, :]
        mask = j <= t
        if window is not None:
            mask &= j > t - window
        if masked_id is not None:
            mask &= np.asarray(cache.ids[: len(keys)])[None, :] != masked_id
        scores = np.where(mask, scores, -np.inf)
        h = h + _softmax(scores) @ values
        return h @ self.out + self.bias

    def draft_of(self, noise: float, seed: int) -> AttentionLM:
        """A draft model: the same network with its output projection perturbed (it agrees with
        this one on most of the mass)."""
        rng = np.random.default_rng(seed)
        d = AttentionLM.__new__(AttentionLM)
        d.__dict__.update(self.__dict__)
        d.out = self.out + noise * rng.standard_normal(self.out.shape) * self.out.std()
        d.window = self.window
        return d


class Speculative:
    """Token-level speculative sampling (Leviathan et al., Chen et al.): ``k`` drafts a step from
    the draft model, one verify forward of the target, accept draft ``i`` with probability
    ``min(1, p_i / q_i)``, else draw from ``norm(max(p_i - q_i, 0))``; a bonus token after all
    ``k``. The KV caches keep the committed tokens only. ``temperature`` on both models."""

    capabilities = frozenset(
        {"counters", "steps", "sequential", "teacher_forcing", "draft_law", "prompt_len"}
    )
    sequential_verification = True
    paged = False

    def __init__(self, target: AttentionLM, draft: AttentionLM, k: int = 4, temperature: float = 1.0) -> None:
        self.target, self.draft, self.k, self.temperature = target, draft, k, temperature
        self.vocab = target.vocab
        self.last_steps: list[int] = []
        self.last_counters: dict[str, int] = {}

    # -- the laws -------------------------------------------------------------------------------

    def law_from_logits(self, z: np.ndarray) -> np.ndarray:
        if self.temperature == 0:
            out = np.zeros(z.shape)
            out[..., np.argmax(z, axis=-1)] = 1.0
            return out
        return _softmax(z / self.temperature)

    def verify_law(self, z: np.ndarray) -> np.ndarray:
        """The target's law the verifier uses (its own temperature law)."""
        return self.law_from_logits(z)

    def cache(self) -> Cache | PagedCache:
        return PagedCache(self.target.width) if self.paged else Cache(self.target.width)

    def target_laws_along(
        self, prompt_ids: list[int], tokens: list[int], prompt_len: int | None = None
    ) -> np.ndarray:
        """The target's law after ``prompt + tokens[:d]`` for each ``d``: one forward."""
        seq = list(prompt_ids) + list(tokens)
        z = self.target.forward(seq[:-1] if tokens else seq, Cache(self.target.width))
        return self.law_from_logits(z[len(prompt_ids) - 1 : len(prompt_ids) - 1 + len(tokens)])

    def target_law(self, context: list[int], prompt_len: int | None = None) -> np.ndarray:
        return self.law_from_logits(self.target.forward(list(context), Cache(self.target.width))[-1])

    def draft_law(self, context: list[int]) -> np.ndarray:
        return self.law_from_logits(self.draft.forward(list(context), Cache(self.draft.width))[-1])

    def draft_laws_along(self, prompt_ids: list[int], tokens: list[int]) -> np.ndarray:
        """The draft's law after ``prompt + tokens[:d]`` for each ``d``: one forward."""
        seq = list(prompt_ids) + list(tokens)
        z = self.draft.forward(seq[:-1] if tokens else seq, Cache(self.draft.width))
        return self.law_from_logits(z[len(prompt_ids) - 1 : len(prompt_ids) - 1 + len(tokens)])

    # -- one generation -------------------------------------------------------------------------

    def accept(self, rng: np.random.Generator, p: np.ndarray, q: np.ndarray, x: int, step: dict) -> bool:
        return rng.random() < min(1.0, p[x] / q[x])

    def residual(self, p: np.ndarray, q: np.ndarray) -> np.ndarray:
        r = np.maximum(p - q, 0.0)
        return r / r.sum()

    def bonus(self, rng: np.random.Generator, p: np.ndarray) -> int:
        return draw(rng, p)

    def keep(self, cache: Cache | PagedCache, length: int) -> None:
        """Roll the target's cache back to the ``length`` committed positions it holds."""
        cache.crop(length)

    def verify_forward(self, tokens: list[int], cache: Cache | PagedCache) -> np.ndarray:
        return self.target.forward(tokens, cache)

    def draft_stream(self, rng: np.random.Generator, seed: int) -> np.random.Generator:
        """The generator a step's drafts are drawn from: the request's one stream."""
        return rng

    def generate(self, prompt_ids: list[int], max_new_tokens: int, seed: int) -> list[int]:
        rng = np.random.default_rng(seed)
        out, tcache, dcache = list(prompt_ids), self.cache(), Cache(self.draft.width)
        self.target.forward(out[:-1], tcache)
        self.draft.forward(out[:-1], dcache)
        self.last_steps, drafted, accepted = [], 0, 0
        while len(out) - len(prompt_ids) < max_new_tokens:
            step: dict = {}
            drafts, qs = [], []
            tail = out[dcache.length :]  # committed tokens the draft has not seen
            drafting = self.draft_stream(rng, seed)
            for _ in range(self.k):
                q = self.law_from_logits(self.draft.forward(tail, dcache)[-1])
                x = draw(drafting, q)
                drafts.append(x)
                qs.append(q)
                tail = [x]
            base = len(out) - 1  # positions committed before this step: the engine's own count
            ps = self.verify_law(self.verify_forward(out[base:] + drafts, tcache)[len(out) - base - 1 :])
            emitted = []
            for i, (x, q) in enumerate(zip(drafts, qs)):
                if self.accept(rng, ps[i], q, x, step):
                    emitted.append(x)
                    continue
                emitted.append(draw(rng, self.residual(ps[i], q)))
                break
            else:
                emitted.append(self.bonus(rng, ps[self.k]))
            drafted += self.k
            accepted += len(emitted) - 1
            self.keep(tcache, len(out) + len(emitted) - 1)
            dcache.crop(min(dcache.length, len(out) + len(emitted) - 1))
            out += emitted
            self.last_steps.append(len(emitted))
        self.last_counters = {"drafted": drafted, "accepted": accepted}
        return out[len(prompt_ids) :][:max_new_tokens]


def spec(
    name: str,
    engine: type,
    vocab: int,
    tokens: int,
    temperature: float = 1.0,
    temperatures: tuple[float, ...] | None = None,
    prompt: tuple[int, ...] = (3, 17, 5),
    expect: str = "pass",
    **kw: object,
):
    """The EngineSpec of an engine class of this folder on its own model (imported lazily, so this
    file needs specproof only to be audited); ``temperatures``: several settings, one case each."""
    from specproof import EngineSpec, Sampling

    def build(sampling: Sampling) -> Speculative:
        target = AttentionLM(vocab, seed=1, **kw)  # type: ignore[arg-type]
        return engine(target, target.draft_of(0.25, seed=2), temperature=sampling.temperature)

    doc = " ".join((engine.__doc__ or "").split()).split(". ")[0].rstrip(".") + "."  # first sentence
    settings = tuple(Sampling(t) for t in (temperatures or (temperature,)))
    return EngineSpec(name, "user", doc, build, vocab, (prompt,), settings, tokens=tokens, expect=expect)


exact = spec("tinylm.exact", Speculative, 4096, 256)
#: the plan-fits row at V = 32,768 (M = 64, T = 1 and 0.7): at the default plan it comes near the
#: 600 s guard in one process on 2 cores, and has room with two Ray actors drawing
#: (docs/token-audit.md)
wide = spec("tinylm[V=32768]", Speculative, 32768, 64, temperatures=(1.0, 0.7))
