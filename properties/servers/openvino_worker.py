"""OpenVINO GenAI behind JSON lines, run with the OpenVINO environment's Python (standalone: it
imports nothing of the project, whose environment it does not share).

``export --hf DIR --ir DIR``: the tiny HF pair (``DIR/target``, ``DIR/draft``) exported to fp32
OpenVINO IR with optimum-intel, each with its OpenVINO tokenizer and detokenizer.

``serve --ir DIR --mode draft|lookup|plain [--assistant K]``: one pipeline (the target with the
draft model, with prompt lookup, or alone), ``INFERENCE_PRECISION_HINT=f32``, prefix caching
off (with it on, the draft pipeline fails a check on some requests and stops drafting after the
first such failure). It prints ``{"ready": ...}`` and then answers one JSON request a line:

* ``{"op": "generate", "prompt": [ids], "tokens": M, "seeds": [..], "sampling": {...}}``: one
  sample a seed, each ``{"tokens": [...], "accepted", "drafted", "forwards"}`` (the pipeline's
  speculative counters, read as they are, and the main model's iterations), ``sampling`` in
  GenerationConfig's words (``do_sample``, ``temperature``, ``top_k``, ``top_p``);
* ``{"op": "quit"}``.

A request that fails answers ``{"error": "..."}`` and the worker goes on.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
import time
from typing import Any

# optimum-intel declares torchvision; the registry's build does not match the CPU torch and
# breaks transformers' import ("operator torchvision::nms does not exist"): hidden, it is skipped
sys.modules["torchvision"] = None  # type: ignore[assignment]

PROPS = {"INFERENCE_PRECISION_HINT": "f32"}


def export(hf: str, ir: str) -> None:
    import openvino as ov
    from openvino_tokenizers import convert_tokenizer
    from optimum.intel import OVModelForCausalLM
    from transformers import AutoTokenizer

    for name in ("target", "draft"):
        out = os.path.join(ir, name)
        if os.path.isfile(os.path.join(out, "openvino_detokenizer.xml")):
            continue
        t0 = time.time()
        model = OVModelForCausalLM.from_pretrained(
            os.path.join(hf, name), export=True, compile=False, load_in_8bit=False
        )
        model.save_pretrained(out)
        tok = AutoTokenizer.from_pretrained(os.path.join(hf, name))
        enc, dec = convert_tokenizer(tok, with_detokenizer=True)
        ov.save_model(enc, os.path.join(out, "openvino_tokenizer.xml"))
        ov.save_model(dec, os.path.join(out, "openvino_detokenizer.xml"))
        tok.save_pretrained(out)
        print(json.dumps({"exported": name, "seconds": round(time.time() - t0, 1)}), flush=True)


def pipeline(ir: str, mode: str) -> Any:
    import openvino_genai as g

    sc = g.SchedulerConfig()
    sc.enable_prefix_caching = False
    target = os.path.join(ir, "target")
    if mode == "draft":
        draft = g.draft_model(os.path.join(ir, "draft"), "CPU", **PROPS)
        return g.LLMPipeline(target, "CPU", draft_model=draft, scheduler_config=sc, **PROPS)
    if mode == "lookup":
        return g.LLMPipeline(target, "CPU", prompt_lookup=True, scheduler_config=sc, **PROPS)
    return g.LLMPipeline(target, "CPU", scheduler_config=sc, **PROPS)


def counters(result: Any) -> dict[str, Any]:
    m = result.extended_perf_metrics
    if m is None or not hasattr(m, "get_num_accepted_tokens"):
        return {"accepted": None, "drafted": None, "forwards": None}
    return {
        "accepted": int(m.get_num_accepted_tokens()),
        "drafted": int(m.get_num_draft_tokens()),
        "forwards": len(m.main_model_metrics.raw_metrics.m_durations),
    }


def generate(pipe: Any, mode: str, assistant: int, req: dict[str, Any]) -> dict[str, Any]:
    import numpy as np
    import openvino as ov
    import openvino_genai as g

    ids = ov.Tensor(np.array([req["prompt"]], dtype=np.int64))
    s = req.get("sampling") or {}
    out = []
    for seed in req["seeds"]:
        cfg = g.GenerationConfig(
            max_new_tokens=int(req["tokens"]),
            ignore_eos=True,
            rng_seed=int(seed),
            do_sample=bool(s.get("do_sample", True)),
        )
        for key in ("temperature", "top_k", "top_p"):
            if key in s:
                setattr(cfg, key, s[key])
        if mode != "plain":
            cfg.num_assistant_tokens = assistant
        if mode == "lookup":
            cfg.max_ngram_size = 2
        r = pipe.generate(ids, cfg)
        out.append({"tokens": [int(x) for x in r.tokens[0]], **counters(r)})
    return {"samples": out}


def serve(ir: str, mode: str, assistant: int) -> None:
    import openvino_genai as g

    pipe = pipeline(ir, mode)
    ready = {"openvino_genai": getattr(g, "__version__", "?"), "mode": mode}
    _loop().answer_requests(ready, lambda req: generate(pipe, mode, assistant, req))


def _loop() -> Any:
    """``worker_loop.py``, beside this file (a script's folder leads ``sys.path``)."""
    return importlib.import_module("worker_loop")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    e = sub.add_parser("export")
    e.add_argument("--hf", required=True)
    e.add_argument("--ir", required=True)
    s = sub.add_parser("serve")
    s.add_argument("--ir", required=True)
    s.add_argument("--mode", choices=("draft", "lookup", "plain"), required=True)
    s.add_argument("--assistant", type=int, default=3)
    a = ap.parse_args()
    if a.cmd == "export":
        export(a.hf, a.ir)
    else:
        serve(a.ir, a.mode, a.assistant)


if __name__ == "__main__":
    main()
