"""The engine of ``tinylm.py`` with one bug each, as engines shipped them (each a one-method
change of :class:`~tinylm.Speculative`, marked ``# bug:``). Audit one with
``specproof audit engine docs/examples/engines/bugs.py:position_ids``.
"""

from __future__ import annotations

import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from tinylm import Cache, PagedCache, Speculative, _softmax, spec  # noqa: E402


class KVCropPast40(Speculative):
    """The target's KV cache rolled back one position short once it holds more than 40 (a crop
    off by one past a length): the rejected draft's key and value stay in the cache, every later
    token attends to them and is written one position further on."""

    def keep(self, cache, length):  # type: ignore[no-untyped-def]
        if 40 < length < cache.length:
            length += 1  # bug: off by one past 40
        cache.crop(length)


class PositionsPast40(Speculative):
    """The verify forward's position ids one past the cache's length once it holds more than 40
    positions (an off-by-one in the position ids after a rollback): the first 40 tokens are
    exact, every later one is scored at a shifted position."""

    def verify_forward(self, tokens, cache):  # type: ignore[no-untyped-def]
        offset = 1 if cache.length > 40 else 0  # bug: off by one past 40
        return self.target.forward(tokens, cache, offset=offset)


class StalePage(Speculative):
    """A paged KV cache (pages of 16) whose rollback, when it crosses a page boundary, releases
    the page the kept positions end in too: its positions come back as zeros (a stale page after
    a rejection across a page)."""

    paged = True

    def keep(self, cache: PagedCache, length):  # type: ignore[no-untyped-def,override]
        crossed = (cache.length - 1) // cache.page > (length - 1) // cache.page
        cache.length = length
        if crossed:
            del cache.pages[length // cache.page :]  # bug: floor where ceil is meant
        else:
            del cache.pages[-(-length // cache.page) :]


class SlidingWindowBroken(Speculative):
    """A target with a sliding window of 16: plain decoding and its laws honour it, the verify
    forward of the speculative path attends to the whole context."""

    def verify_forward(self, tokens, cache):  # type: ignore[no-untyped-def]
        return self.target.forward(tokens, cache, window=None)  # bug: the window dropped


class SharedUniform(Speculative):
    """One uniform for every acceptance test of a step, instead of one per draft."""

    def accept(self, rng, p, q, x, step):  # type: ignore[no-untyped-def]
        if "u" not in step:
            step["u"] = rng.random()  # bug: drawn once per step
        return step["u"] < min(1.0, p[x] / q[x])


class GreedyAccept(Speculative):
    """A greedy acceptance check left on at T > 0: a draft is kept only when it is the target's
    argmax; the corrected and bonus tokens are still sampled (from the residual and the target's
    law). (With the corrected tokens greedy too the engine ignores its seed, and the audit says
    so as a contract violation before any law test.)"""

    def accept(self, rng, p, q, x, step):  # type: ignore[no-untyped-def]
        return x == int(np.argmax(p))  # bug: greedy acceptance


class TemperatureTwice(Speculative):
    """The verifier's target law divided by the temperature twice (once by the sampler's logits
    processor, once more in the verify kernel)."""

    def verify_law(self, z):  # type: ignore[no-untyped-def]
        return _softmax(z / self.temperature / self.temperature)  # bug: T applied twice


class ResidualFloor(Speculative):
    """The residual ``max(p - q, 0)`` given a small floor before it is normalized, so its sum is
    never 0: a little mass goes to every token after a rejection."""

    def residual(self, p, q):  # type: ignore[no-untyped-def]
        r = np.maximum(p - q, 0.0) + 1.1e-5  # bug: a floor on the residual
        return r / r.sum()


#: the end of sequence, which this engine also uses as its padding id
EOS = 2


class PadMask(Speculative):
    """The verify forward's attention mask built from the ids, ``ids != pad_id``, with the padding
    id equal to the end of sequence (a tokenizer without a pad token): every end of sequence
    already in the context (a turn's end in a two-turn prompt) is left out of attention on the
    speculative path, while plain decoding and its laws attend to it. The law moves a little at
    every position (a per-token TV of 0.0135), keeping the tokens' order by probability, toward
    the same ids every time: the token test's ``ids`` statistic finds it (docs/token-audit.md,
    "What a pass does not cover")."""

    def verify_forward(self, tokens, cache):  # type: ignore[no-untyped-def]
        return self.target.forward(tokens, cache, masked_id=EOS)  # bug: the pad mask masks EOS


class ReseededDrafts(Speculative):
    """The drafts' generator built from the request's seed at every step (a drafter that seeds its
    own sampler per call): every step's drafts reuse the same uniforms, and the step's first
    acceptance test, drawn from the request's stream started from the same seed, reuses the
    uniform that drew the first draft. Each token looks right on average; given the tokens
    before it, it is not."""

    def draft_stream(self, rng, seed):  # type: ignore[no-untyped-def]
        return np.random.default_rng(seed)  # bug: rebuilt from the seed every step


class MultiQueryWindow(Speculative):
    """A target with a sliding window of 16 and two attention kernels: the single-query one
    (decoding one token at a time: ``target_law``) keeps the window, the multi-query one (the
    prefill, the verify forward, and the laws read along a path in one forward) drops it. The
    laws the audit reads by teacher forcing share the bug; only the check against ``target_law``
    at one prefix sees it."""

    capabilities = Speculative.capabilities - {"prompt_len"}

    def multi_query(self, tokens, cache):  # type: ignore[no-untyped-def]
        return self.target.forward(tokens, cache, window=None)  # bug: the window dropped

    def verify_forward(self, tokens, cache):  # type: ignore[no-untyped-def]
        return self.multi_query(tokens, cache)

    def target_laws_along(self, prompt_ids, tokens, prompt_len=None):  # type: ignore[no-untyped-def]
        seq = list(prompt_ids) + list(tokens)
        z = self.multi_query(seq[:-1] if tokens else seq, Cache(self.target.width))
        return self.law_from_logits(z[len(prompt_ids) - 1 : len(prompt_ids) - 1 + len(tokens)])

    def target_law(self, context, prompt_len=None):  # type: ignore[no-untyped-def]
        cache = Cache(self.target.width)
        for t in context:  # one token at a time: the single-query kernel
            z = self.target.forward([t], cache)
        return self.law_from_logits(z[-1])


class TwoKernels(MultiQueryWindow):
    """The control of ``multi_query_window``: both kernels keep the window, the multi-query one
    computes in float32 (its logits rounded to float32), the single-query one in float64: two
    paths that differ by rounding only."""

    def multi_query(self, tokens, cache):  # type: ignore[no-untyped-def]
        return self.target.forward(tokens, cache).astype(np.float32).astype(np.float64)


kv_crop = spec("tinylm.kv_crop_past_40", KVCropPast40, 4096, 256, expect="lossy")
position_ids = spec("tinylm.position_ids_past_40", PositionsPast40, 4096, 256, expect="lossy")
stale_page = spec("tinylm.stale_page", StalePage, 4096, 256, expect="lossy")
sliding_window = spec("tinylm.sliding_window_16", SlidingWindowBroken, 4096, 256, window=16, expect="lossy")
shared_uniform = spec("tinylm.shared_uniform", SharedUniform, 4096, 256, expect="lossy")
greedy_accept = spec("tinylm.greedy_accept", GreedyAccept, 4096, 256, expect="lossy")
temperature_twice = spec(
    "tinylm.temperature_twice", TemperatureTwice, 4096, 256, temperature=0.7, expect="lossy"
)
residual_floor = spec("tinylm.residual_floor", ResidualFloor, 512, 256, expect="lossy")
pad_mask = spec("tinylm.pad_mask", PadMask, 4096, 256, prompt=(3, 17, EOS, 5), expect="lossy")
reseeded_drafts = spec("tinylm.reseeded_drafts", ReseededDrafts, 4096, 256, expect="lossy")
multi_query_window = spec(
    "tinylm.multi_query_window_16", MultiQueryWindow, 4096, 256, window=16, expect="contract_violation"
)


class PagedExact(Speculative):
    """The same paged KV cache (pages of 16), rolled back right: the control of ``stale_page``."""

    paged = True


#: controls: the correct engines the bugs were planted in (exact, at V = 4,096 and M = 256)
exact_paged = spec("tinylm.exact_paged", PagedExact, 4096, 256)
exact_window = spec("tinylm.exact_window_16", Speculative, 4096, 256, window=16)
#: the control of ``pad_mask``: the same two-turn prompt, every key attended to
exact_two_turns = spec("tinylm.exact_two_turns", Speculative, 4096, 256, prompt=(3, 17, EOS, 5))
#: the control of ``multi_query_window``: its two kernels differ by float32 rounding only
exact_two_kernels = spec("tinylm.exact_two_kernels_16", TwoKernels, 4096, 256, window=16)
