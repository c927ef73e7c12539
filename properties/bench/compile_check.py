"""Compile every kernel for a GPU target without a GPU
(``python -m specproof.properties.bench.compile_check``).

Under the interpreter a kernel is plain Python, so type errors that only the compiler sees
(loop-carried values changing type, unsupported control flow) would first show on a GPU. This
compiles each kernel ahead of time for ``cuda:<arch>`` down to a cubin with Triton's bundled
toolchain, which needs no driver. Run it as ``TRITON_INTERPRET=0 python -m
specproof.properties.bench.compile_check``: the variable must be 0 before Triton is first imported
(tests/test_optimized_compile.py does so in a subprocess).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from typing import Any

import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

Spec = tuple[str, Any, dict[str, str], dict[str, Any]]


def _specs() -> list[Spec]:
    """Every kernel's compile signature: the chain and tree kernels at each dtype, the tree
    buffers, the tree attention and the split paths."""
    specs: list[Spec] = []
    for dt in ("fp32", "bf16"):
        specs += _chain_specs(dt) + _tree_specs(dt)
    from specproof.optimized.tree_attention import compile_specs as attention_specs

    return specs + _buffer_specs() + attention_specs() + _split_specs()


def _chain_specs(dt: str) -> list[Spec]:
    """token_chain, block_chain and multi_draft at dtype ``dt``, with and without a draft law."""
    from specproof.optimized.kernels.block_chain import block_chain_kernel
    from specproof.optimized.kernels.multi_draft import multi_draft_kernel
    from specproof.optimized.kernels.token_chain import token_chain_kernel

    chain = {"x_ptr": "*i64", "q_ptr": "*fp32", "p_ptr": "*fp32", "ua_ptr": "*fp64", "uf_ptr": "*fp64"}
    specs: list[Spec] = []
    for has_q in (True, False):
        c = {k: (f"*{dt}" if k in ("q_ptr", "p_ptr") else v) for k, v in chain.items()}
        consts = {"HAS_Q": has_q, "KB": 8, "BLOCK": 1024}
        tail = {"out_ptr": "*i64", "K": "i32", "V": "i32", **dict.fromkeys(consts, "constexpr")}
        specs.append((f"token_chain[{dt},has_q={has_q}]", token_chain_kernel, {**c, **tail}, consts))
        cb = {("ue_ptr" if k == "ua_ptr" else k): v for k, v in c.items()}
        specs.append((f"block_chain[{dt},has_q={has_q}]", block_chain_kernel, {**cb, **tail}, consts))
        for wor in (False, True):
            consts2 = {"HAS_Q": has_q, "WITHOUT_REPLACEMENT": wor, "BLOCK": 1024}
            sig = {
                "par_ptr": "*i64",
                "tok_ptr": "*i64",
                "q_ptr": f"*{dt}",
                "p_ptr": f"*{dt}",
                "ua_ptr": "*fp64",
                "uf_ptr": "*fp64",
                "pw_ptr": "*fp64",
                "qw_ptr": "*fp64",
                "acc_ptr": "*i64",
                "nxt_ptr": "*i64",
                "N": "i32",
                "V": "i32",
                **dict.fromkeys(consts2, "constexpr"),
            }
            specs.append((f"multi_draft[{dt},has_q={has_q},wor={wor}]", multi_draft_kernel, sig, consts2))
    return specs


def _tree_specs(dt: str) -> list[Spec]:
    """target_only_tree, greedy_tree and typical_tree at dtype ``dt``."""
    from specproof.optimized.kernels.greedy_tree import greedy_tree_kernel
    from specproof.optimized.kernels.target_only_tree import target_only_tree_kernel
    from specproof.optimized.kernels.typical_tree import typical_tree_kernel

    tree = {"par_ptr": "*i64", "tok_ptr": "*i64", "p_ptr": f"*{dt}"}
    consts = {"NB": 16, "BLOCK": 1024}
    out = {"acc_ptr": "*i64", "nxt_ptr": "*i64", "N": "i32", "V": "i32"}
    const_sig = dict.fromkeys(consts, "constexpr")
    target_only = {
        **tree,
        "uc_ptr": "*fp64",
        "uf_ptr": "*fp64",
        **out,
        "ts": "fp64",
        "ta": "fp64",
        **const_sig,
    }
    typical = {**tree, "uf_ptr": "*fp64", **out, "eps": "fp64", "delta": "fp64", **const_sig}
    return [
        (f"target_only_tree[{dt}]", target_only_tree_kernel, target_only, consts),
        (f"greedy_tree[{dt}]", greedy_tree_kernel, {**tree, **out, **const_sig}, consts),
        (f"typical_tree[{dt}]", typical_tree_kernel, typical, consts),
    ]


def _buffer_specs() -> list[Spec]:
    """The tree buffers' kernels: the mask and depths, and the KV rows gathered after a step."""
    from specproof.optimized.kernels.tree_buffers import gather_rows_kernel, tree_buffers_kernel

    buffers = {"par_ptr": "*i64", "mask_ptr": "*i32", "depth_ptr": "*i64", "N": "i32", "W": "constexpr"}
    gather = {
        "src_ptr": "*fp32",
        "src_slot_ptr": "*i64",
        "dst_ptr": "*fp32",
        "dst_slot_ptr": "*i64",
        "H": "i32",
        "S": "i32",
        "N": "i32",
        "D": "i32",
        "DB": "constexpr",
    }
    return [
        ("tree_buffers[fp32]", tree_buffers_kernel, buffers, {"W": 2}),
        ("gather_rows[fp32]", gather_rows_kernel, gather, {"DB": 64}),
    ]


def _split_specs() -> list[Spec]:
    """The split paths' kernels (one launch per pass, the last chunk program draws)."""
    from specproof.optimized.kernels.block_split import block_level_kernel
    from specproof.optimized.kernels.token_split import token_split_kernel

    specs: list[tuple[str, Any, dict[str, str], dict[str, Any]]] = []
    for dt in ("fp32", "bf16"):
        for has_q in (True, False):
            ptrs = {
                "x_ptr": "*i64",
                "q_ptr": f"*{dt}",
                "p_ptr": f"*{dt}",
                "ua_ptr": "*fp64",
                "uf_ptr": "*fp64",
            }
            consts = {"HAS_Q": has_q, "KB": 8, "CB": 64, "BLOCK": 1024}
            sig = {**ptrs, "out_ptr": "*i64", "part_ptr": "*fp64", "cnt_ptr": "*i32",
                   "K": "i32", "V": "i32", "C": "i32", "CH": "i32"}  # fmt: skip
            specs.append(
                (
                    f"token_split[{dt},has_q={has_q}]",
                    token_split_kernel,
                    {**sig, **dict.fromkeys(consts, "constexpr")},
                    consts,
                )
            )
            bptrs = {("ue_ptr" if k == "ua_ptr" else k): v for k, v in ptrs.items()}
            consts = {"HAS_Q": has_q, "KB": 8, "KB1": 16, "CB": 64, "BLOCK": 1024}
            sig = {**bptrs, "out_ptr": "*i64", "pw_ptr": "*fp64", "state_ptr": "*i32",
                   "part_ptr": "*fp64", "cnt_ptr": "*i32", "K": "i32", "V": "i32", "C": "i32",
                   "CH": "i32", "LEVEL": "i32"}  # fmt: skip
            specs.append(
                (
                    f"block_split[{dt},has_q={has_q}]",
                    block_level_kernel,
                    {**sig, **dict.fromkeys(consts, "constexpr")},
                    consts,
                )
            )
    specs.extend(_tree_split_specs())
    return specs


def _tree_split_specs() -> list[tuple[str, Any, dict[str, str], dict[str, Any]]]:
    from specproof.optimized.kernels.greedy_tree import greedy_level_kernel
    from specproof.optimized.kernels.multi_draft import multi_draft_level_kernel
    from specproof.optimized.kernels.target_only_tree import target_only_split_kernel

    specs: list[tuple[str, Any, dict[str, str], dict[str, Any]]] = []
    tree = {"par_ptr": "*i64", "tok_ptr": "*i64"}
    for dt in ("fp32", "bf16"):
        consts = {"NB": 16, "CB": 64, "BLOCK": 1024}
        sig = {**tree, "p_ptr": f"*{dt}", "uc_ptr": "*fp64", "uf_ptr": "*fp64", "acc_ptr": "*i64",
               "nxt_ptr": "*i64", "part_ptr": "*fp64", "cnt_ptr": "*i32", "N": "i32", "V": "i32",
               "ts": "fp64", "ta": "fp64", "C": "i32", "CH": "i32"}  # fmt: skip
        specs.append(
            (
                f"target_only_split[{dt}]",
                target_only_split_kernel,
                {**sig, **dict.fromkeys(consts, "constexpr")},
                consts,
            )
        )
        sig = {**tree, "p_ptr": f"*{dt}", "acc_ptr": "*i64", "nxt_ptr": "*i64", "node_ptr": "*i64",
               "part_v_ptr": "*fp64", "part_i_ptr": "*i64", "cnt_ptr": "*i32", "N": "i32", "V": "i32",
               "C": "i32", "CH": "i32", "LEVEL": "i32"}  # fmt: skip
        specs.append(
            (
                f"greedy_split[{dt}]",
                greedy_level_kernel,
                {**sig, **dict.fromkeys(consts, "constexpr")},
                consts,
            )
        )
        for has_q in (True, False):
            for wor in (False, True):
                consts2 = {"HAS_Q": has_q, "WITHOUT_REPLACEMENT": wor, "NB": 16, "CB": 64, "BLOCK": 1024}
                sig = {**tree, "q_ptr": f"*{dt}", "p_ptr": f"*{dt}", "ua_ptr": "*fp64", "uf_ptr": "*fp64",
                       "acc_ptr": "*i64", "nxt_ptr": "*i64", "st_ptr": "*i64", "hx_ptr": "*i64",
                       "hz_ptr": "*fp64", "hs_ptr": "*fp64", "part_ptr": "*fp64", "part_s_ptr": "*fp64",
                       "cnt_ptr": "*i32", "N": "i32", "V": "i32", "C": "i32", "CH": "i32",
                       "LEVEL": "i32"}  # fmt: skip
                specs.append(
                    (
                        f"multi_draft_split[{dt},has_q={has_q},wor={wor}]",
                        multi_draft_level_kernel,
                        {**sig, **dict.fromkeys(consts2, "constexpr")},
                        consts2,
                    )
                )
    return specs


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m specproof.properties.bench.compile_check")
    ap.add_argument("--arch", type=int, default=90, help="CUDA compute capability, e.g. 80, 90 (default 90)")
    ap.add_argument("--only", default="", help="compile only kernels whose name contains this")
    args = ap.parse_args(argv)
    if os.environ.get("TRITON_INTERPRET", "0") not in ("", "0"):
        print(
            "TRITON_INTERPRET is on, so the kernels are interpreted functions; run this as "
            "`TRITON_INTERPRET=0 python -m specproof.properties.bench.compile_check`",
            file=sys.stderr,
        )
        return 2
    target = GPUTarget("cuda", args.arch, 32)
    failed = 0
    for name, fn, sig, consts in _specs():
        if args.only not in name:
            continue
        t0 = time.perf_counter()
        try:
            src = ASTSource(fn=fn, signature=sig, constexprs=consts)
            k = triton.compile(src, target=target, options={"enable_fp_fusion": False})
            print(f"ok    {name}  ({time.perf_counter() - t0:.1f} s, {len(k.asm['cubin'])} bytes of cubin)")
        except Exception as e:  # report every kernel, then fail
            failed += 1
            print(f"FAIL  {name}: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
