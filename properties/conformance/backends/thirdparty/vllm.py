"""vLLM: the V1 rejection sampler and the model runner V2 verifier, as chain verifiers.

Both are Triton code inside a package whose import pulls its engine (config, platforms,
distributed layers, a CUDA torch of its own pinned version). The adapter instead executes the
few files the audited functions live in, from the installed distribution
(``pip install --no-deps vllm`` is enough), under their own module names, with stand-ins for
the names they import but the audited path never runs. A stand-in that is reached raises, so
a wrong guess fails loudly rather than changing the law. Without CUDA the kernels run under
Triton's interpreter (switched on by :mod:`specproof.optimized`).

**V1** (``vllm/v1/sample/rejection_sampler.py::rejection_sample``). Inputs, flattened over the
batch: the K drafts of each request, ``cu_num_draft_tokens``, ``draft_probs [B*K, V]`` (or
``None`` for one-hot drafts: the drafted token counts as q = 1, and the residual is p with the
drafted token removed), ``target_logits [B*K, V]`` (after temperature; ``log p`` here), the
bonus tokens (drawn by vLLM's ordinary sampler, outside this function; the adapter draws them
from p at position K with the contract's generator) and a ``SamplingMetadata``, of which the
function reads ``all_greedy``, ``all_random``, ``temperature`` and ``generators``. Each request
gets a ``torch.Generator`` seeded from the contract's generator, which vLLM uses for its coins
and for the exponential race that draws the recovered token (one race per request, shared by
its positions). Temperature 0 selects its greedy kernel, registered under the greedy law.

**MRV2** (``vllm/v1/worker/gpu/spec_decode/rejection_sampler_utils.py::rejection_sample``).
Per request, K + 1 logit rows (the drafts' positions and the bonus position) in
``target_logits [B*(K+1), V]``, ``draft_logits [B, K, V]`` indexed by request slot and step
(``None`` for one-hot drafts), ``draft_sampled`` the verify pass's input tokens (the last
committed token, then the drafts), a per-request ``seed`` and per-row sequence positions
``pos`` from which its counter-based Philox draws every coin and Gumbel variate; the adapter
takes a fresh seed per request from the contract's generator. ``use_block_verification=True``
selects block verification. The interpreter has no libdevice, so under it (only) the adapter
gives the module ``log1p`` written in Triton as ``log(u) * x / (u - 1)`` with ``u = 1 + x``
(exact to a few ulps in float32; Goldberg's form); on CUDA the module's own libdevice is used.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.metadata
import importlib.util
import logging
import sys
from collections.abc import Iterator
from types import ModuleType, SimpleNamespace

import numpy as np
import torch

from specproof.properties.conformance.backends.torch_chain import check_chain_inputs
from specproof.properties.conformance.contracts import draw_seeds
from specproof.reference.errors import InternalError


class _Absent:
    """A name the audited path imports but must never use."""

    def __init__(self, name: str) -> None:
        self._name = name

    def __call__(self, *args: object, **kwargs: object) -> None:
        raise InternalError(f"vllm adapter: {self._name} is a stand-in and must not be reached")

    def __getattr__(self, attr: str) -> object:
        if attr.startswith("__"):
            raise AttributeError(attr)
        raise InternalError(f"vllm adapter: {self._name}.{attr} is a stand-in and must not be reached")


def _absent_module(name: str, *names: str) -> ModuleType:
    module = ModuleType(name)
    for n in names:
        setattr(module, n, _Absent(f"{name}.{n}"))
    return module


def _triton_utils() -> ModuleType:
    import triton
    import triton.language as tl

    from specproof._triton import interpret_wanted, own_kernels

    module = ModuleType("vllm.triton_utils")
    if interpret_wanted():
        with own_kernels(fp_fusion=True):  # decorated as an interpreted function
            from specproof.properties.conformance.backends.thirdparty import _libdevice as tldevice
    else:  # pragma: no cover - CUDA only
        import triton.language.extra.libdevice as tldevice  # type: ignore[no-redef]
    module.__dict__.update(HAS_TRITON=True, triton=triton, tl=tl, tldevice=tldevice)
    return module


def _platforms() -> ModuleType:
    module = ModuleType("vllm.platforms")
    on_cuda = torch.cuda.is_available()
    module.current_platform = SimpleNamespace(  # type: ignore[attr-defined]
        is_cuda=lambda: on_cuda, is_rocm=lambda: False, is_xpu=lambda: False, is_cpu=lambda: not on_cuda
    )
    return module


def _logger() -> ModuleType:
    module = ModuleType("vllm.logger")
    module.init_logger = logging.getLogger  # type: ignore[attr-defined]
    return module


@contextlib.contextmanager
def _modules(stand_ins: dict[str, ModuleType]) -> Iterator[None]:
    """Make ``vllm.*`` resolve to our stand-ins and empty packages while files load; afterwards
    ``sys.modules`` is as before (the loaded modules keep their references)."""
    before = {k: v for k, v in sys.modules.items() if k == "vllm" or k.startswith("vllm.")}
    for k in before:
        del sys.modules[k]
    packages: set[str] = set()
    for name in [*stand_ins, *_FILES]:
        parts = name.split(".")
        packages.update(".".join(parts[:i]) for i in range(1, len(parts)))
    for pkg in sorted(packages):
        if pkg not in stand_ins:
            module = ModuleType(pkg)
            module.__path__ = []  # a package with nothing to find: unknown names fail to import
            sys.modules[pkg] = module
    sys.modules.update(stand_ins)
    try:
        yield
    finally:
        for k in [k for k in sys.modules if k == "vllm" or k.startswith("vllm.")]:
            del sys.modules[k]
        sys.modules.update(before)


# Every file the adapter executes, in load order (each one's vllm imports come before it).
_FILES = (
    "vllm.envs",
    "vllm.model_executor.warmup.jit_warmup",
    "vllm.model_executor.warmup.jit_warmup_triton_helper",
    "vllm.v1.spec_decode.fly",
    "vllm.v1.sample.rejection_sampler",
    "vllm.v1.watermarking.prfs.base",
    "vllm.v1.watermarking.prfs.philox",
    "vllm.v1.worker.gpu.sample.gumbel",
    "vllm.v1.worker.gpu.sample.watermark",
    "vllm.v1.worker.gpu.spec_decode.rejection_sampler_utils",
)


@functools.cache
def _load() -> dict[str, ModuleType]:
    from specproof._triton import own_kernels

    dist = importlib.metadata.distribution("vllm")
    stand_ins = {
        "vllm.triton_utils": _triton_utils(),
        "vllm.platforms": _platforms(),
        "vllm.logger": _logger(),
        "vllm.config.model": _absent_module("vllm.config.model", "PROCESSED_LOGPROBS_MODES"),
        "vllm.utils.torch_utils": _absent_module("vllm.utils.torch_utils", "async_tensor_h2d"),
        "vllm.v1.outputs": _absent_module(
            "vllm.v1.outputs", "LogprobsLists", "LogprobsTensors", "SamplerOutput"
        ),
        "vllm.v1.sample.logits_processor.builtin": _absent_module(
            "vllm.v1.sample.logits_processor.builtin", "MinTokensLogitsProcessor"
        ),
        "vllm.v1.sample.metadata": _absent_module("vllm.v1.sample.metadata", "SamplingMetadata"),
        "vllm.v1.sample.ops.bad_words": _absent_module(
            "vllm.v1.sample.ops.bad_words", "apply_bad_words_with_drafts"
        ),
        "vllm.v1.sample.ops.penalties": _absent_module("vllm.v1.sample.ops.penalties", "apply_all_penalties"),
        "vllm.v1.sample.ops.topk_topp_sampler": _absent_module(
            "vllm.v1.sample.ops.topk_topp_sampler", "apply_top_k_top_p"
        ),
        "vllm.v1.sample.sampler": _absent_module("vllm.v1.sample.sampler", "Sampler"),
        "vllm.v1.spec_decode.metadata": _absent_module("vllm.v1.spec_decode.metadata", "SpecDecodeMetadata"),
        "vllm.v1.spec_decode.utils": _absent_module(
            "vllm.v1.spec_decode.utils", "unconditional_to_conditional_rates"
        ),
    }
    loaded: dict[str, ModuleType] = {}
    # decorated under the interpreter when CUDA is absent; vLLM's own compile options otherwise
    with _modules(stand_ins), own_kernels(fp_fusion=True):
        for name in _FILES:
            path = str(dist.locate_file(name.replace(".", "/") + ".py"))
            spec = importlib.util.spec_from_file_location(name, path)
            if spec is None or spec.loader is None:  # pragma: no cover - an incomplete install
                raise ImportError(f"cannot load {path}")
            module = importlib.util.module_from_spec(spec)
            sys.modules[name] = module
            spec.loader.exec_module(module)
            loaded[name] = module
    return loaded


def probe() -> None:
    """Raise unless the audited files load (a vLLM release that moved a name fails here)."""
    _load()


def _log(probs: torch.Tensor) -> torch.Tensor:
    """Laws as float32 logits, ``-inf`` where p = 0 (softmax maps them back to p)."""
    return torch.log(probs.double()).float().contiguous()


def v1_rejection_sample(
    draft_token_ids: torch.Tensor,
    draft_probs: torch.Tensor | None,
    target_probs: torch.Tensor,
    generator: torch.Generator,
    greedy: bool = False,
    seeds: list[int | None] | None = None,
) -> torch.Tensor:
    """``seeds`` (one per request, None for an unseeded one) replaces the seeds drawn from
    ``generator``; the bonus tokens are drawn from ``generator`` either way."""
    from specproof.optimized._device import kernel_device

    B, K, V = check_chain_inputs(draft_token_ids, draft_probs, target_probs)
    rs = _load()["vllm.v1.sample.rejection_sampler"]
    dev = kernel_device() or torch.device("cpu")
    ids = draft_token_ids.to(dev, torch.int32).reshape(-1).contiguous()
    cu = (torch.arange(1, B + 1, dtype=torch.int32) * K).to(dev)
    logits = _log(target_probs[:, :K]).reshape(B * K, V).to(dev)
    q = None if draft_probs is None else draft_probs.float().reshape(B * K, V).contiguous().to(dev)
    if greedy:
        bonus = target_probs[:, K].double().argmax(-1)
    else:
        bonus = torch.multinomial(target_probs[:, K].double(), 1, generator=generator).squeeze(1)
    chosen = seeds if seeds is not None else draw_seeds(generator, B)
    metadata = SimpleNamespace(
        all_greedy=greedy,
        all_random=not greedy,
        temperature=torch.full((B,), 0.0 if greedy else 1.0, device=dev),
        generators={
            b: torch.Generator(device=dev).manual_seed(s) for b, s in enumerate(chosen) if s is not None
        },
    )
    # vLLM fills its coins from the global RNG, then overwrites them from the generators; numpy's
    # warnings come from the interpreter evaluating both sides of masked selects.
    with torch.random.fork_rng(devices=[]), np.errstate(invalid="ignore", divide="ignore"):
        out = rs.rejection_sample(
            ids, [K] * B, K, cu, q, logits, bonus.to(dev, torch.int64).reshape(B, 1).contiguous(), metadata
        )
    return out.cpu().long()


def v1_greedy(
    draft_token_ids: torch.Tensor,
    draft_probs: torch.Tensor | None,
    target_probs: torch.Tensor,
    generator: torch.Generator,
) -> torch.Tensor:
    return v1_rejection_sample(draft_token_ids, draft_probs, target_probs, generator, greedy=True)


def mrv2_rejection_sample(
    draft_token_ids: torch.Tensor,
    draft_probs: torch.Tensor | None,
    target_probs: torch.Tensor,
    generator: torch.Generator,
    block_verification: bool = False,
    greedy: bool = False,
    seeds: list[int] | None = None,
) -> torch.Tensor:
    """``seeds`` (one per request) replaces the seeds drawn from ``generator``."""
    from specproof.optimized._device import kernel_device

    B, K, V = check_chain_inputs(draft_token_ids, draft_probs, target_probs)
    utils = _load()["vllm.v1.worker.gpu.spec_decode.rejection_sampler_utils"]
    dev = kernel_device() or torch.device("cpu")
    S = K + 1
    logits = _log(target_probs).reshape(B * S, V).to(dev)
    draft_logits = None if draft_probs is None else _log(draft_probs).to(dev)
    inputs = torch.cat([torch.zeros(B, 1, dtype=torch.long), draft_token_ids.long()], 1)
    seed_t = torch.tensor(seeds if seeds is not None else draw_seeds(generator, B), dtype=torch.int64)
    start = 17  # the verify pass's first position; any value, the seed is fresh per call
    with np.errstate(invalid="ignore", divide="ignore"):  # masked lanes under the interpreter
        sampled, num_sampled = utils.rejection_sample(
            logits,
            draft_logits,
            inputs.reshape(-1).to(dev, torch.int32),
            (torch.arange(B + 1, dtype=torch.int32) * S).to(dev),
            (start + torch.arange(S, dtype=torch.int64)).repeat(B).to(dev),
            torch.arange(B, dtype=torch.int32).to(dev),
            torch.arange(B, dtype=torch.int32).repeat_interleave(S).to(dev),
            torch.arange(S, dtype=torch.int32).repeat(B).to(dev),
            torch.full((B,), 0.0 if greedy else 1.0, dtype=torch.float32).to(dev),
            seed_t.to(dev),
            K,
            use_block_verification=block_verification,
        )
    rows = sampled.cpu().long()
    n = num_sampled.cpu().long()
    keep = torch.arange(S)[None, :] < n[:, None]
    return torch.where(keep, rows, torch.full_like(rows, -1))


def mrv2_block(
    draft_token_ids: torch.Tensor,
    draft_probs: torch.Tensor | None,
    target_probs: torch.Tensor,
    generator: torch.Generator,
) -> torch.Tensor:
    return mrv2_rejection_sample(
        draft_token_ids, draft_probs, target_probs, generator, block_verification=True
    )


def mrv2_greedy(
    draft_token_ids: torch.Tensor,
    draft_probs: torch.Tensor | None,
    target_probs: torch.Tensor,
    generator: torch.Generator,
) -> torch.Tensor:
    return mrv2_rejection_sample(draft_token_ids, draft_probs, target_probs, generator, greedy=True)


def backends() -> list[dict[str, object]]:
    chains = ("iid_chain", "onehot_chain")
    v1 = "vllm/v1/sample/rejection_sampler.py::rejection_sample"
    mrv2 = "vllm/v1/worker/gpu/spec_decode/rejection_sampler_utils.py::rejection_sample"
    return [
        dict(
            name="vllm.v1.rejection_sample",
            kind="chain",
            fn=v1_rejection_sample,
            processes=chains,
            expect="pass",
            doc=f"{v1} (temperature 1)",
        ),
        dict(
            name="vllm.v1.rejection_sample[greedy]",
            kind="chain",
            fn=v1_greedy,
            processes=chains,
            expect="pass",
            law="greedy",
            doc=f"{v1} (temperature 0)",
        ),
        dict(
            name="vllm.mrv2.rejection_sample",
            kind="chain",
            fn=mrv2_rejection_sample,
            processes=chains,
            expect="pass",
            doc=f"{mrv2} (temperature 1)",
        ),
        dict(
            name="vllm.mrv2.rejection_sample[block_verification]",
            kind="chain",
            fn=mrv2_block,
            processes=chains,
            expect="pass",
            doc=f"{mrv2} with use_block_verification=True",
        ),
        dict(
            name="vllm.mrv2.rejection_sample[greedy]",
            kind="chain",
            fn=mrv2_greedy,
            processes=chains,
            expect="pass",
            law="greedy",
            doc=f"{mrv2} (temperature 0)",
        ),
    ]
