"""Prepare the peers for a GPU machine that cannot reach a package registry.

Usage (on a machine that reaches PyPI, in the repository root):
    python3 scripts/gpu_peers.py [--out .peers/site] [--max-mib 56]

The device machines this project is lent reach no registry and take at most 64 MiB of files per
call, while flashinfer-python's wheel alone is 101 MB. So this downloads the pinned wheels
(no dependencies) and lays out a *slim* site folder that `scripts/gpu_check.sh` puts on
PYTHONPATH, holding only what the side by side and the conformance adapters use, unmodified:

* FlashInfer 0.7.4: the Python files that ``import flashinfer.sampling`` and the JIT build of
  its sampling module load (traced here by running that import and the build up to the
  compiler call), the headers that build includes (include/, cccl/, spdlog/, the sampling
  sources of csrc/), and apache-tvm-ffi whole. On the GPU machine FlashInfer JIT-compiles its
  sampling kernels with that machine's nvcc (a minute or two, once).
* vLLM 0.33.0 and SGLang 0.5.23: the files the adapters execute (their Triton samplers and tree
  builder), with each distribution's METADATA so ``importlib.metadata`` finds them.

SGLang's CUDA tree sampler needs sglang's compiled kernels (sgl-kernel, hundreds of MB): it is
not carried; on a machine with a registry `gpu_check.sh` tries to install it.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

PINS = {
    "flashinfer-python": "0.7.4",
    "apache-tvm-ffi": "0.1.15.post2",
    "vllm": "0.33.0",
    "sglang": "0.5.23",
}
PLATFORM = [
    "--only-binary=:all:",
    "--python-version",
    "3.12",
    "--implementation",
    "cp",
    "--platform",
    "manylinux_2_34_x86_64",
    "--platform",
    "manylinux_2_31_x86_64",
    "--platform",
    "manylinux_2_28_x86_64",
    "--platform",
    "manylinux_2_24_x86_64",
    "--platform",
    "manylinux_2_17_x86_64",
    "--platform",
    "manylinux2014_x86_64",
]
VLLM_FILES = [
    "vllm/envs.py",
    "vllm/model_executor/warmup/jit_warmup.py",
    "vllm/model_executor/warmup/jit_warmup_triton_helper.py",
    "vllm/v1/spec_decode/fly.py",
    "vllm/v1/sample/rejection_sampler.py",
    "vllm/v1/watermarking/prfs/base.py",
    "vllm/v1/watermarking/prfs/philox.py",
    "vllm/v1/worker/gpu/sample/gumbel.py",
    "vllm/v1/worker/gpu/sample/watermark.py",
    "vllm/v1/worker/gpu/spec_decode/rejection_sampler_utils.py",
]
SGLANG_FILES = [
    "sglang/kernels/ops/speculative/reject_sampling.py",
    "sglang/kernels/ops/speculative/spec_tree.py",
]


def download(dest: Path) -> dict[str, Path]:
    dest.mkdir(parents=True, exist_ok=True)
    wheels = {}
    for dist, version in PINS.items():
        stem = dist.replace("-", "_")
        found = sorted(dest.glob(f"{stem}-{version}-*.whl"))  # only .py files and headers are taken
        if not found:
            cmd = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", *PLATFORM, "-d", str(dest)]
            subprocess.run([*cmd, f"{dist}=={version}"], check=True)
            found = sorted(dest.glob(f"{stem}-{version}-*.whl"))
        wheels[dist] = found[0]
    return wheels


def extract(wheel: Path, names: list[str], out: Path) -> None:
    """Copy ``names`` (paths inside the wheel) and the wheel's dist-info METADATA to ``out``."""
    with zipfile.ZipFile(wheel) as z:
        meta = [n for n in z.namelist() if n.endswith(".dist-info/METADATA")]
        for n in [*names, *meta]:
            target = out / n
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(z.read(n))


def flashinfer_files(wheels: dict[str, Path], out: Path) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        site = Path(tmp) / "site"
        for dist in ("flashinfer-python", "apache-tvm-ffi"):
            with zipfile.ZipFile(wheels[dist]) as z:
                z.extractall(site)
        # Which Python files the import and the JIT build load: run them here (the build stops at
        # the compiler, absent here), then list the loaded modules that live in the wheel.
        probe = (
            "import sys, flashinfer.sampling as s\n"
            "try:\n    s.get_sampling_module()\nexcept Exception:\n    pass\n"
            f"print('\\n'.join(sorted({{m.__file__ for m in list(sys.modules.values()) "
            f"if getattr(m, '__file__', None) and m.__file__.startswith({str(site)!r})}})))\n"
        )
        # tvm-ffi's wheel is built for the GPU machine's Python; the probe runs this one's
        local = Path(tmp) / "local"
        pin = f"apache-tvm-ffi=={PINS['apache-tvm-ffi']}"
        subprocess.run(
            [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(local), pin],
            check=True,
        )
        path = os.pathsep.join([str(local), str(site), os.environ.get("PYTHONPATH", "")])
        env = {**os.environ, "PYTHONPATH": path, "FLASHINFER_CUDA_ARCH_LIST": "9.0"}
        env["FLASHINFER_WORKSPACE_BASE"] = tmp
        r = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, check=True)
        keep = {Path(f).relative_to(site) for f in r.stdout.split()}
        data = site / "flashinfer" / "data"
        for sub in ("include", "cccl", "spdlog"):
            keep |= {p.relative_to(site) for p in (data / sub).rglob("*") if p.is_file()}
        for name in (
            "sampling.cu",
            "renorm.cu",
            "flashinfer_sampling_binding.cu",
            "sampling_utils.h",
            "tvm_ffi_utils.h",
        ):
            keep.add((data / "csrc" / name).relative_to(site))
        keep |= {p.relative_to(site) for p in (site / "tvm_ffi").rglob("*") if p.is_file()}
        keep |= {p.relative_to(site) for p in site.glob("*.dist-info/*") if p.is_file()}
        for rel in sorted(keep):
            if "__pycache__" in rel.parts:
                continue
            (out / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(site / rel, out / rel)


def size_mib(path: Path) -> float:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file()) / 2**20


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=".peers/site")
    ap.add_argument("--cache", default=os.path.join(tempfile.gettempdir(), "specproof-peer-wheels"))
    ap.add_argument("--max-mib", type=float, default=56.0, help="fail above this size (the call carries 64)")
    args = ap.parse_args()
    out = Path(args.out)
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    wheels = download(Path(args.cache))
    extract(wheels["vllm"], VLLM_FILES, out)
    extract(wheels["sglang"], SGLANG_FILES, out)
    flashinfer_files(wheels, out)
    (out / "PINS.txt").write_text("".join(f"{d}=={v}\n" for d, v in PINS.items()))
    mib = size_mib(out)
    print(f"{out}: {mib:.1f} MiB ({', '.join(f'{d} {v}' for d, v in PINS.items())})")
    exclude = Path(".git/info/exclude")
    if exclude.parent.is_dir() and "/.peers/" not in (exclude.read_text() if exclude.exists() else ""):
        with exclude.open("a") as f:
            f.write("/.peers/\n")
    return 0 if mib <= args.max_mib else 1


if __name__ == "__main__":
    sys.exit(main())
