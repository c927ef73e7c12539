"""The optimized engine against the reference, sample for sample (Triton interpreter on CPU).

Fed the same uniforms, the kernel and the reference rule return the same tokens on every drawn
batch: vocabularies that are not powers of two nor multiples of the block size (128), K from 1
to 8, sampled and deterministic drafts, float32 / float16 / bfloat16 laws with zeros, ties and
tiny masses. Malformed inputs raise the reference's exceptions before any kernel launch.
"""

from __future__ import annotations

import importlib

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from optimized_helpers import BIG_VOCABS, DTYPES, laws

from specproof.optimized import block, token
from specproof.optimized.typical import typical_chain_verifier
from specproof.reference import RULES, TapeReader, make_step
from specproof.reference.errors import (
    DTypeError,
    NegativeMassError,
    NonFiniteError,
    NotNormalizedError,
    ShapeError,
    TokenOutOfRangeError,
    ZeroDraftProbabilityError,
)
from specproof.reference.validate import tolerance

token_module = importlib.import_module("specproof.optimized.token")

#: A split path may differ from the reference only where the reference's own run passes within
#: this distance of a decision boundary (a coin's probability, or a partial sum of a draw).
BOUNDARY = 1e-9


class MarginReader(TapeReader):
    """A TapeReader that records how close each draw came to flipping: ``|u - p|`` for a coin,
    ``min_i |u - cdf_i|`` for a categorical (cdf over the normalized partial sums)."""

    def __init__(self, tape):
        super().__init__(tape)
        self.margin = float("inf")

    def bernoulli(self, p, site):
        u = self._tape[site[0]][site[1]]
        self.margin = min(self.margin, abs(float(u) - float(p)))
        return super().bernoulli(p, site)

    def categorical(self, weights, site):
        u = float(self._tape[site[0]][site[1]])
        w = np.asarray([float(v) for v in weights], dtype=np.float64)
        cdf = np.cumsum(w) / w.sum()
        self.margin = min(self.margin, float(np.min(np.abs(u - cdf[w > 0]))))
        return super().categorical(weights, site)


def split_agrees(got, want, margins):
    """Every row equal, except rows whose reference run came within BOUNDARY of a decision."""
    for b, (g, w) in enumerate(zip(got, want)):
        assert g == w or margins[b] < BOUNDARY, (b, g, w, margins[b])


def reference_rows(x, dp, tp, ua, uf, dtype, rule="token", site="accept", margins=None):
    B, K = x.shape
    out = []
    for b in range(B):
        step = make_step(
            list(range(-1, K)),
            [0] + x[b].tolist(),
            None if dp is None else [r.tolist() for r in dp[b].double()] + [tp[b, K].double().tolist()],
            [r.tolist() for r in tp[b].double()],
            tol=tolerance(dtype, tp.shape[-1]),
        )
        reader = MarginReader({site: ua[b].tolist(), "final": [float(uf[b])]})
        oc = RULES[rule](reader, step)
        out.append(list(oc.emitted(step)))
        if margins is not None:
            margins.append(reader.margin)
    return out


chain_cases = given(
    B=st.integers(1, 3),
    K=st.integers(1, 8),
    V=st.sampled_from([2, 3, 5, 7, 13, 100, 129, 200] + BIG_VOCABS),
    dtype=st.sampled_from(sorted(DTYPES)),
    deterministic=st.booleans(),
    style=st.sampled_from(["random", "ties", "onehot", "tiny"]),
    draft_is_target=st.booleans(),
    seed=st.integers(0, 2**32 - 1),
)


def chain_inputs(B, K, V, dtype, deterministic, style, draft_is_target, seed):
    """Drafts, laws and two uniform arrays ([B, K+1] and [B]) for one drawn chain batch."""
    rng = np.random.default_rng(seed)
    tp = laws(rng, (B, K + 1, V), dtype, style)
    if deterministic:
        dp = None
        x = torch.tensor(rng.integers(0, V, (B, K)))
    else:
        dp = tp[:, :K].clone() if draft_is_target else laws(rng, (B, K, V), dtype, "random")
        gen = torch.Generator().manual_seed(int(rng.integers(2**62)))  # never the global RNG
        x = torch.stack([torch.multinomial(dp[b].float(), 1, generator=gen).squeeze(1) for b in range(B)])
    return x, dp, tp, torch.tensor(rng.random((B, K + 1))), torch.tensor(rng.random(B))


def unpad(out):
    return [[t for t in row if t >= 0] for row in out.tolist()]


@chain_cases
def test_token_kernel_equals_the_reference_on_the_same_uniforms(
    B, K, V, dtype, deterministic, style, draft_is_target, seed
):
    dt = DTYPES[dtype]
    x, dp, tp, ua, uf = chain_inputs(B, K, V, dt, deterministic, style, draft_is_target, seed)
    assert unpad(token(x, dp, tp, ua, uf)) == reference_rows(x, dp, tp, ua, uf, dt)


@chain_cases
def test_block_kernel_equals_the_reference_on_the_same_uniforms(
    B, K, V, dtype, deterministic, style, draft_is_target, seed
):
    dt = DTYPES[dtype]
    x, dp, tp, ue, uf = chain_inputs(B, K, V, dt, deterministic, style, draft_is_target, seed)
    got = unpad(block(x, dp, tp, ue, uf, block=None if BIG_VOCABS else 32))
    assert got == reference_rows(x, dp, tp, ue, uf, dt, rule="block", site="eta")


@chain_cases
def test_split_token_path_agrees_with_the_reference(
    B, K, V, dtype, deterministic, style, draft_is_target, seed
):
    # The GPU path for large V (chunk sums, no normalization before the draw), at chunk 16 and
    # block 8 for small V. Its tokens equal the reference's except when u * total falls within
    # rounding of a partial sum; any difference must be such a boundary case, checked here.
    dt = DTYPES[dtype]
    x, dp, tp, ua, uf = chain_inputs(B, K, V, dt, deterministic, style, draft_is_target, seed)
    small = {} if V > 1000 else {"chunk": 16, "block": 8}  # full sizes: the GPU's defaults
    got = unpad(token(x, dp, tp, ua, uf, path="split", **small))
    want = reference_rows(x, dp, tp, ua, uf, dt)
    for b in range(B):
        if got[b] == want[b]:
            continue
        assert got[b][:-1] == want[b][:-1], "acceptance must agree exactly"
        r = len(want[b]) - 1
        p = tp[b, r].double()
        if r == K:
            w = p
        else:
            w = (
                p - (dp[b, r].double() if dp is not None else torch.nn.functional.one_hot(x[b, r], V))
            ).clamp(min=0)
        cdf = torch.cumsum(w, 0) / w.sum()
        lo = min(got[b][-1], want[b][-1])
        assert abs(float(uf[b]) - float(cdf[lo])) < 1e-9, (got[b], want[b])


@chain_cases
def test_split_block_path_agrees_with_the_reference(
    B, K, V, dtype, deterministic, style, draft_is_target, seed
):
    # One launch per level (K..0), chunk sums instead of left-to-right sums: each coin compares
    # eta_i with h_i computed from a differently rounded Z, so a row may differ only where the
    # reference's own run came within BOUNDARY of a coin's probability or of a draw's partial sum.
    dt = DTYPES[dtype]
    x, dp, tp, ue, uf = chain_inputs(B, K, V, dt, deterministic, style, draft_is_target, seed)
    small = {} if V > 1000 else {"chunk": 16, "block": 8}
    got = unpad(block(x, dp, tp, ue, uf, path="split", **small))
    margins: list[float] = []
    want = reference_rows(x, dp, tp, ue, uf, dt, rule="block", site="eta", margins=margins)
    split_agrees(got, want, margins)


def test_split_paths_leave_their_counters_at_zero_and_write_every_position():
    # the check-in counters are reused across calls (on a GPU, one buffer per stream): the last
    # program of each row must reset its counter, and the split output starts uninitialized
    from specproof.optimized import _split

    seen = []
    real = _split.counters

    def spy(n, device):
        c = real(n, device)
        seen.append(c)
        return c

    rng = np.random.default_rng(11)
    x, dp, tp, ua, uf = chain_inputs(3, 4, 70, torch.float32, False, "random", False, 11)
    for name in ("token", "block"):
        mod = importlib.import_module(f"specproof.optimized.{name}")
        orig = mod.counters
        mod.counters = spy
        try:
            fn = token if name == "token" else block
            for _ in range(2):
                out = fn(x, dp, tp, ua, uf, path="split", chunk=16, block=8)
                assert int(seen[-1].abs().sum()) == 0
                want = reference_rows(
                    x, dp, tp, ua, uf, torch.float32, rule=name, site="accept" if name == "token" else "eta"
                )
                assert unpad(out) == want
                assert all(v == -1 for row in out.tolist() for v in row[len(row) - (row.count(-1)) :])
                ua = torch.tensor(rng.random((3, 5)))
        finally:
            mod.counters = orig


def test_split_block_agreement_check_rejects_a_wrong_level_order():
    # The mutant: after level K, the levels run bottom-up (0, 1, ..., K-1) instead of K-1..0, so
    # every row the bonus coin rejects stops at tau = 0. With eta_K = 0.999 and the other coins
    # at 0.01 the reference stops high; the agreement check must flag the mutant.
    from specproof.optimized.kernels import block_split

    x, dp, tp, ue, uf = chain_inputs(4, 4, 40, torch.float32, False, "random", False, 6)
    ue = torch.full_like(ue, 0.01)
    ue[:, -1] = 0.999
    mod = importlib.import_module("specproof.optimized.block")
    calls = []

    class BottomUp:
        def __getitem__(self, grid):
            def launch(*args, **kw):
                calls.append((args, kw))
                if args[14] == 0:  # the wrapper's last launch: run K, then 0..K-1
                    for a, k in [calls[0], *reversed(calls[1:])]:
                        block_split.block_level_kernel[grid](*a, **k)

            return launch

    orig = mod.block_level_kernel
    mod.block_level_kernel = BottomUp()
    try:
        got = unpad(block(x, dp, tp, ue, uf, path="split", chunk=16, block=8))
    finally:
        mod.block_level_kernel = orig
    margins: list[float] = []
    want = reference_rows(x, dp, tp, ue, uf, torch.float32, rule="block", site="eta", margins=margins)
    K = x.shape[1]
    assert any(1 < len(w) <= K for w in want), "the reference must stop at a level in 1..K-1 somewhere"
    with pytest.raises(AssertionError):
        split_agrees(got, want, margins)
    split_agrees(unpad(block(x, dp, tp, ue, uf, path="split", chunk=16, block=8)), want, margins)


def test_typical_chain_wrapper_matches_the_reference_chain_adapter_layout():
    # the chain wrapper verifies [-1, 0, ..., K-1] and pads like every chain verifier
    rng = np.random.default_rng(5)
    tp = laws(rng, (3, 4, 6), torch.float32, "random")
    x = torch.stack([torch.multinomial(tp[b, :3], 1).squeeze(1) for b in range(3)])
    out = typical_chain_verifier(x, None, tp, torch.Generator().manual_seed(0))
    for b, row in enumerate(out.tolist()):
        L = sum(t >= 0 for t in row) - 1
        assert row[:L] == x[b, :L].tolist() and all(t == -1 for t in row[L + 1 :])


def test_extreme_uniforms_accept_everything_or_reject_at_once():
    rng = np.random.default_rng(3)
    tp = laws(rng, (2, 4, 7), torch.float32, "random")
    dp = laws(rng, (2, 3, 7), torch.float32, "random")
    x = torch.stack([torch.multinomial(dp[b], 1).squeeze(1) for b in range(2)])
    for u in (0.0, 1 - 2**-53):
        ua = torch.full((2, 4), u, dtype=torch.float64)
        uf = torch.full((2,), u, dtype=torch.float64)
        assert unpad(token(x, dp, tp, ua, uf)) == reference_rows(x, dp, tp, ua, uf, torch.float32)


def _valid(B=2, K=3, V=5):
    rng = np.random.default_rng(0)
    tp = laws(rng, (B, K + 1, V), torch.float32, "random")
    dp = laws(rng, (B, K, V), torch.float32, "ties")
    x = torch.zeros(B, K, dtype=torch.int64)
    return (
        x,
        dp,
        tp,
        torch.full((B, K + 1), 0.5, dtype=torch.float64),
        torch.full((B,), 0.5, dtype=torch.float64),
    )


def _bad(case):
    x, dp, tp, ua, uf = _valid()
    if case == "nan":
        tp[1, 2, 3] = float("nan")
    elif case == "negative":
        dp[0, 1, 2] = -0.1
    elif case == "unnormalized":
        tp[0, 0] *= 0.9
    elif case == "token_range":
        x[1, 2] = 5
    elif case == "zero_draft":
        dp[0, 0, 0] = 0.0
        dp[0, 0] /= dp[0, 0].sum()
    elif case == "shape":
        x = x[:, :2]
    elif case == "dtype":
        x = x.float()
    elif case == "uniform":
        ua[0, 1] = 1.0
    return x, dp, tp, ua, uf


@pytest.mark.parametrize(
    ("case", "error", "argument"),
    [
        ("nan", NonFiniteError, "target_probs[1, 2, 3]"),
        ("negative", NegativeMassError, "draft_probs[0, 1, 2]"),
        ("unnormalized", NotNormalizedError, "target_probs[0, 0]"),
        ("token_range", TokenOutOfRangeError, "draft_token_ids[1, 2]"),
        ("zero_draft", ZeroDraftProbabilityError, "draft_probs[0, 0, 0]"),
        ("shape", ShapeError, "draft_token_ids"),
        ("dtype", DTypeError, "draft_token_ids"),
        ("uniform", ShapeError, "u_accept[0, 1]"),
    ],
)
def test_malformed_inputs_raise_before_any_launch(monkeypatch, case, error, argument):
    class NoLaunch:
        def __getitem__(self, grid):
            raise AssertionError("the kernel was launched on malformed input")

    monkeypatch.setattr(token_module, "token_chain_kernel", NoLaunch())
    with pytest.raises(error) as e:
        token(*_bad(case))
    assert e.value.argument == argument


def test_low_precision_laws_are_read_as_given_within_their_tolerance():
    x, dp, tp, ua, uf = _valid()
    half = tp.to(torch.bfloat16)
    assert abs(float(half.double().sum(-1).max()) - 1) <= tolerance(torch.bfloat16)
    token(x, dp.to(torch.bfloat16), half, ua, uf)  # accepted as it is
    off = half.clone()
    off[0, 0] *= 0.95
    with pytest.raises(NotNormalizedError):
        token(x, dp.to(torch.bfloat16), off, ua, uf)


def test_optimized_token_backend_meets_the_contract_and_passes_a_small_audit():
    # A plan for TV 0.6 (a contract-level audit: about a hundred steps on each of two small
    # cases), alpha 1e-6, seed 0, no id-range probes (an interpreted program walks all 262,144
    # ids of a probe row: minutes; on a GPU the audit runs them). Exercises the generator
    # wrapper and the contract; the coupling tests carry the weight of the law.
    from specproof.properties.audit.battery import chain_battery
    from specproof.properties.audit.stages import AuditConfig, audit
    from specproof.properties.conformance.backends import REGISTRY

    cases = [c for c in chain_battery() if c.name in ("iid/K2/V8", "onehot/K1/V8")]
    config = AuditConfig(tv=0.6, cases=cases, probes=False)
    result = audit(REGISTRY[("chain", "optimized.token")], config)
    assert result.verdict == "pass", result.summary()
    assert all(c.status == "ran" and c.n == c.planned for c in result.cases)


def test_side_by_side_smoke_run_times_ours_and_names_why_a_peer_is_not_timed():
    # The GPU side by side (properties/bench/peers.py) on CPU at a tiny size: our kernels are timed
    # (interpreted), and every peer is either timed or listed with the reason it is not.
    from specproof.properties.bench import peers as bench_peers

    rows = bench_peers.chain_rows(2, 2, 40, torch.float32, "cpu", None, 0.0, lambda s: None)
    ours = [r for r in rows if r.engine.startswith("optimized.")]
    assert {r.rule for r in ours} == {"token", "block"} and all(r.us and r.us > 0 for r in ours)
    peers = [r for r in rows if not r.engine.startswith("optimized.")]
    assert {r.engine.split()[0] for r in peers} == {"flashinfer", "vllm", "sglang"}
    for r in peers:
        assert r.us is not None or (r.note.startswith("not timed: ") and len(r.note) > 15), r
    table = bench_peers.markdown(bench_peers.versions(), rows)
    assert "flashinfer-python" in table and table.count("\n| ") == len(rows) + 1
