"""mistral.rs behind JSON lines, run with the mistral.rs environment's Python (standalone: it
imports nothing of the project, whose environment it does not share).

``serve --hf DIR --mode draft|plain [--gamma K] [--prefix-cache N]``: one ``mistralrs.Runner``
on the tiny HF pair (``DIR/target``, ``DIR/draft``) in float32, paged attention off,
``prefix_cache_n`` N (its default 16), with the draft model (``speculative_gamma`` K) or alone. It
prints ``{"ready": ...}`` and then answers one JSON request a line:

* ``{"op": "generate", "prompt": [ids], "tokens": K, "n": N, "sampling": {...}}``: N completion
  requests, one after the other, each ``CompletionRequest(prompt=TEXT, max_tokens=K, ...)`` with
  the prompt written as the tokens' texts (one character an id); each answer's text read back
  as ids, the end of sequence (id 0, a special token its text leaves out) appended where the
  answer finished on it: ``{"samples": [{"tokens": [...], "finish_reason": ...}, ...]}``.
  ``sampling`` holds ``temperature``, ``top_k``, ``top_p`` and ``min_p`` (None: off); a
  ``logit_bias`` beside it (id -> bias) is passed on as it is;
* ``{"op": "quit"}``.

There is no per-request seed (the runner's own generator draws everything; on a CPU it cannot even
be seeded). A request that fails answers ``{"error": "..."}`` and the worker goes on.
"""

from __future__ import annotations

import argparse
import importlib
import os
from typing import Any

#: the tiny vocabulary (properties/servers/gguf_models.py's VOCAB): id -> text
VOCAB = ("</s>", "a", "b", "c", "d", "e", "f", "g", "h", "i", "j", "k", "l", "m", "n", "o")
IDS = {t: i for i, t in enumerate(VOCAB) if len(t) == 1}
EOS = 0


def runner(hf: str, mode: str, gamma: int, prefix_cache: int) -> Any:
    from mistralrs import Architecture, ModelDType, Runner, Which

    def plain(name: str) -> Any:
        return Which.Plain(model_id=os.path.join(hf, name), arch=Architecture.Llama, dtype=ModelDType.F32)

    kw: dict[str, Any] = {"which": plain("target"), "no_paged_attn": True, "prefix_cache_n": prefix_cache}
    if mode == "draft":
        kw.update(which_draft=plain("draft"), speculative_gamma=gamma)
    return Runner(**kw)


def ids_of(text: str) -> list[int] | None:
    """The ids of a text of the tiny vocabulary's one-character tokens (None: another character)."""
    if any(c not in IDS for c in text):
        return None
    return [IDS[c] for c in text]


def generate(r: Any, req: dict[str, Any]) -> dict[str, Any]:
    from mistralrs import CompletionRequest

    s = req.get("sampling") or {}
    prompt = "".join(VOCAB[int(x)] for x in req["prompt"])
    out = []
    for _ in range(int(req["n"])):
        res = r.send_completion_request(
            CompletionRequest(
                prompt=prompt,
                model="tiny",
                max_tokens=int(req["tokens"]),
                temperature=s.get("temperature"),
                top_k=s.get("top_k"),
                top_p=s.get("top_p"),
                min_p=s.get("min_p"),
                logit_bias={int(k): float(v) for k, v in (req.get("logit_bias") or {}).items()} or None,
            )
        )
        c = res.choices[0]
        ids = ids_of(c.text)
        if ids is None:
            return {"error": f"an answer with a character outside the tiny vocabulary: {c.text!r}"}
        ended = [EOS] if c.finish_reason == "stop" else []  # no stop strings are sent: it is the eos
        out.append({"tokens": ids + ended, "finish_reason": c.finish_reason})
    return {"samples": out}


def serve(hf: str, mode: str, gamma: int, prefix_cache: int) -> None:
    import importlib.metadata as md

    r = runner(hf, mode, gamma, prefix_cache)
    ready = {"mistralrs": md.version("mistralrs"), "mode": mode}
    _loop().answer_requests(ready, lambda req: generate(r, req))


def _loop() -> Any:
    """``worker_loop.py``, beside this file (a script's folder leads ``sys.path``)."""
    return importlib.import_module("worker_loop")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("serve")
    s.add_argument("--hf", required=True)
    s.add_argument("--mode", choices=("draft", "plain"), required=True)
    s.add_argument("--gamma", type=int, default=3)
    s.add_argument("--prefix-cache", type=int, default=16, help="prefix_cache_n (mistral.rs's default 16)")
    a = ap.parse_args()
    serve(a.hf, a.mode, a.gamma, a.prefix_cache)


if __name__ == "__main__":
    main()
