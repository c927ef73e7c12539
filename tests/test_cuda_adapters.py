"""The CUDA-only adapters' plumbing, on CPU, against stand-ins of the kernels they call.

FlashInfer's ``chain_speculative_sampling`` and SGLang's ``tree_speculative_sampling_target_only``
run only on CUDA (tests/test_thirdparty.py audits the real kernels there). Here each adapter
calls a Python stand-in with the kernel's signature and semantics (FlashInfer's documented
rejection sampling; SGLang's from its ``sampling.cuh``), so what is checked is the adapter:
the layout it builds, the randomness it hands over and how it reads the result back. The
stand-ins pass the audit (seed 0, alpha 1e-6), and one broken stand-in each is caught: SGLang's
without its write of the rejected children into ``draft_probs`` (the residual keeps them) is
lossy, and FlashInfer's with an emitted count that keeps counting after the first rejection is
a ``count`` contract violation.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch

from specproof.properties.audit.stages import AuditConfig, audit, default_cases
from specproof.properties.conformance.backends import Backend
from specproof.properties.conformance.backends.thirdparty import flashinfer, sglang_cuda


def _sample(w: torch.Tensor, u: float) -> int:
    """The first index whose running sum of the nonnegative ``w`` exceeds ``u * sum(w)``."""
    cdf = torch.cumsum(w.double(), 0)
    return int(torch.searchsorted(cdf, u * cdf[-1], right=True).clamp(max=len(w) - 1))


def _sglang_kernel(write_rejected: bool = True):  # type: ignore[no-untyped-def]
    def kernel(  # type: ignore[no-untyped-def]
        *,
        predicts,
        accept_index,
        accept_token_num,
        candidates,
        retrive_index,
        retrive_next_token,
        retrive_next_sibling,
        uniform_samples,
        uniform_samples_for_final_sampling,
        target_probs,
        draft_probs,
        threshold_single,
        threshold_acc,
        deterministic,
    ):
        B, N = candidates.shape
        S = accept_index.shape[1]
        for b in range(B):
            prob_acc, row, coin = 0.0, 0, float(uniform_samples[b, 0])
            last = int(retrive_index[b, 0])
            accept_index[b, 0] = last
            n, cur = 0, 0
            for _ in range(1, S):
                cur = int(retrive_next_token[b, cur])
                while cur != -1:
                    tok = int(candidates[b, cur])
                    pt = float(target_probs[b, row, tok])
                    prob_acc += pt
                    if pt > 0 and (coin < prob_acc / threshold_acc or pt >= threshold_single):
                        prob_acc, row, coin = 0.0, cur, float(uniform_samples[b, cur])
                        predicts[last] = tok
                        n += 1
                        accept_index[b, n] = retrive_index[b, cur]
                        last = int(retrive_index[b, cur])
                        break
                    if write_rejected:
                        draft_probs[b, row, tok] = target_probs[b, row, tok]
                    cur = int(retrive_next_sibling[b, cur])
                if cur == -1:
                    break
            accept_token_num[b] = n
            w = target_probs[b, row] - (0 if n == S - 1 else draft_probs[b, row])
            predicts[last] = _sample(w.clamp(min=0), float(uniform_samples_for_final_sampling[b]))

    return kernel


def _flashinfer_kernel(count_after_rejection: bool = False):  # type: ignore[no-untyped-def]
    def kernel(q, ids, p, generator=None):  # type: ignore[no-untyped-def]
        B, K, V = q.shape
        out = torch.full((B, K + 1), -1, dtype=torch.int32)
        accepted = torch.zeros(B, dtype=torch.int32)
        emitted = torch.zeros(B, dtype=torch.int32)
        for b in range(B):
            u = torch.rand(K + 1, generator=generator, dtype=torch.float64)
            passes = [bool(u[i] * q[b, i, ids[b, i]] < p[b, i, ids[b, i]]) for i in range(K)]
            accepted[b] = sum(passes)
            i = 0
            while i < K and passes[i]:
                out[b, i] = ids[b, i]
                i += 1
            emitted[b] = sum(passes) if count_after_rejection else i
            w = p[b, i] if i == K else (p[b, i] - q[b, i]).clamp(min=0)
            out[b, i] = _sample(w, float(u[K]))
        return out, accepted, emitted

    return kernel


def _run(backend: Backend, process: str, tv: float) -> object:
    """Two small cases planned for TV ``tv`` (about 3,000 steps each at 0.12), no probes."""
    backend = dataclasses.replace(backend, processes=(process,))
    cases = [c for c in default_cases(backend, 0) if c.vocab <= 8][:2]
    return audit(backend, AuditConfig(seed=0, tv=tv, budget_seconds=600, cases=cases, probes=False))


def _backend(module, **over: object) -> Backend:  # type: ignore[no-untyped-def]
    spec = dict(module.backends()[0])
    spec.update(over)
    return Backend(**spec)  # type: ignore[arg-type]


@pytest.mark.parametrize("process", ["onehot_siblings", "topk_siblings"])
def test_sglang_cuda_adapter_plumbing(monkeypatch, process: str):
    monkeypatch.setattr(sglang_cuda, "_kernel", lambda: _sglang_kernel())
    res = _run(_backend(sglang_cuda), process, 0.12)
    assert res.verdict == "pass", res.summary()  # type: ignore[attr-defined]
    monkeypatch.setattr(sglang_cuda, "_kernel", lambda: _sglang_kernel(write_rejected=False))
    res = _run(_backend(sglang_cuda, name="sglang.tree[residual keeps rejected]"), process, 0.12)
    assert res.verdict == "lossy", res.summary()  # type: ignore[attr-defined]


@pytest.mark.parametrize("process", ["iid_chain", "onehot_chain"])
def test_flashinfer_adapter_plumbing(monkeypatch, process: str):
    monkeypatch.setattr(flashinfer, "_kernel", lambda: _flashinfer_kernel())
    res = _run(_backend(flashinfer), process, 0.12)
    assert res.verdict == "pass", res.summary()  # type: ignore[attr-defined]
    monkeypatch.setattr(flashinfer, "_kernel", lambda: _flashinfer_kernel(count_after_rejection=True))
    res = _run(_backend(flashinfer, name="flashinfer[count after rejection]"), "iid_chain", 0.12)
    assert res.verdict == "contract_violation", res.summary()  # type: ignore[attr-defined]
    assert res.violation["kind"] == "count"  # type: ignore[attr-defined]


def test_adapters_say_why_they_are_unavailable(monkeypatch):
    """Each adapter's reason names its package and how to install it; a CUDA-only one whose
    package is present says that CUDA is missing (and is not imported)."""
    import importlib.metadata

    from specproof.properties.conformance.backends.thirdparty import ADAPTERS, availability

    def absent(package: str) -> str:
        raise importlib.metadata.PackageNotFoundError(package)

    monkeypatch.setattr(importlib.metadata, "version", absent)
    for a in ADAPTERS:
        ok, why = availability(a)
        assert not ok and a.package in why and (a.install or f"specproof[{a.module}]") in why, (a, why)
    monkeypatch.setattr(importlib.metadata, "version", lambda package: "9.9")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    cuda_only = [a for a in ADAPTERS if a.needs_cuda]
    assert {a.module for a in cuda_only} == {"flashinfer", "sglang_cuda"}
    for a in cuda_only:
        ok, why = availability(a)
        assert not ok and "CUDA" in why, (a, why)
