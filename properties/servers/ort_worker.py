"""ONNX Runtime GenAI behind JSON lines, run with the ONNX Runtime GenAI environment's Python
(standalone: of the project it imports only ``worker_loop.py`` beside it, the JSON-lines loop every
tier's worker runs; the project's environment it does not share).

``build --weights DIR --out DIR [--draft-tokens K]``: the models as ONNX graphs, written with the
``onnx`` package from the float32 weights the project wrote (``DIR/spec.json``, the shapes;
``DIR/target.npz``, ``DIR/draft.npz``, ``DIR/mtp.npz``), each beside its ``genai_config.json``:

* ``target``: the tiny llama decoder (token embedding, RMSNorm, grouped-query attention with RoPE on
  adjacent pairs, SwiGLU, output matrix), logits for every position fed, its KV cache as
  ``past_key_values.%d.key/value`` (``past_present_share_buffer`` off: genai hands the graph the
  past, the graph returns past and new);
* ``spec``: the target with ``model.draft`` (the draft, the same graph on the draft's weights) and
  ``speculative.max_draft_tokens`` K, the two graphs copied under it (genai refuses ``..`` in a
  config path);
* ``mtp/main``: the target with a ``hidden_states`` output (the final norm's output) and a
  ``model.mtp`` section; ``mtp/head``: a one-layer head reading that hidden state and a token
  (``fc(concat(norm(embed(token)), norm(hidden)))``, one decoder layer, a norm, the output matrix)
  with its own KV cache and a ``hidden_states_out`` output, as ``og.MtpGenerator`` loads them.

The graphs use standard ONNX operators only (no contrib attention, so no head-size constraint)
and compute in float32 what the project computes in float64 numpy
(properties/servers/gguf_models.py).

``serve --models DIR --mode plain|draft|ngram|mtp [--draft-tokens K] [--ngram-size N]``: one
model loaded (``target``, ``spec`` or ``mtp``), then one JSON request a line:

* ``{"op": "generate", "prompt": [ids], "tokens": M, "seeds": [..], "sampling": {...}}``: one
  sample a seed, each a fresh generator with ``random_seed`` the seed and ``max_length`` prompt +
  M, run until it is done: ``{"tokens": [...], "drafted", "accepted", "forwards"}`` (the
  generator's own counters: ``draft_tokens_proposed``, ``draft_tokens_accepted``,
  ``target_forward_passes``; None for plain decoding). ``sampling`` holds ``do_sample``,
  ``temperature``, ``top_k`` (0: off), ``top_p`` (1: off) and, where asked, ``repetition_penalty``;
* ``{"op": "logits", "contexts": [[ids], ...]}``: the plain target's logits after each context
  (one forward of a fresh generator: ``{"logits": [[V floats], ...]}``);
* ``{"op": "quit"}``.

A generation that the library's own calls refuse (a ``RuntimeError`` of onnxruntime-genai) answers
``{"raised": "..."}``: the engine's answer to that request, which a user's script would see. Any
other failure answers ``{"error": "..."}`` (the worker's own fault). The worker goes on either way.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import shutil
from typing import Any

#: each mode's model folder under the models' root
FOLDER = {
    "plain": "target",
    "draft": "spec",
    "ngram": "target",
    "mtp": "mtp/main",
    "plain16": "mtp/main16",
    "mtp16": "mtp/main16",
}
MODES = tuple(FOLDER)
NEG = -1e30  # an attention logit that softmax turns into exactly 0 in float32


# --------------------------------------------------------------------------- the graphs


class Graph:
    """Nodes, initializers and fresh names for one ONNX graph."""

    def __init__(self) -> None:
        self.nodes: list[Any] = []
        self.inits: list[Any] = []
        self.count = 0

    def name(self, hint: str) -> str:
        self.count += 1
        return f"{hint}_{self.count}"

    def op(self, kind: str, inputs: list[str], hint: str = "", **attrs: Any) -> str:
        from onnx import helper

        out = self.name(hint or kind.lower())
        self.nodes.append(helper.make_node(kind, inputs, [out], **attrs))
        return out

    def const(self, value: Any, hint: str = "c") -> str:
        import numpy as np
        from onnx import numpy_helper

        name = self.name(hint)
        self.inits.append(numpy_helper.from_array(np.asarray(value), name))
        return name

    def rename(self, src: str, dst: str) -> None:
        from onnx import helper

        self.nodes.append(helper.make_node("Identity", [src], [dst]))


def _linear(g: Graph, x: str, w: Any, hint: str) -> str:
    """``x @ w.T`` for a weight ``w`` laid out (out, in)."""
    import numpy as np

    return g.op("MatMul", [x, g.const(np.ascontiguousarray(w.T.astype(np.float32)), hint)], hint)


def _rms(g: Graph, x: str, weight: Any, eps: float) -> str:
    import numpy as np

    mean = g.op("ReduceMean", [g.op("Mul", [x, x])], axes=[-1], keepdims=1)
    root = g.op("Sqrt", [g.op("Add", [mean, g.const(np.float32(eps))])])
    return g.op("Mul", [g.op("Div", [x, root]), g.const(weight.astype(np.float32), "norm")])


def _rope(g: Graph, x: str, heads: int, hd: int, cos: str, sin: str) -> str:
    """Rotate ``x`` ([B, S, heads*hd]) in adjacent pairs; returns [B, heads, S, hd]."""
    import numpy as np

    pairs = g.op("Reshape", [x, g.const(np.array([0, 0, heads, hd // 2, 2], dtype=np.int64))])
    even = g.op("Gather", [pairs, g.const(np.array(0, dtype=np.int64))], axis=4)
    odd = g.op("Gather", [pairs, g.const(np.array(1, dtype=np.int64))], axis=4)
    new_even = g.op("Sub", [g.op("Mul", [even, cos]), g.op("Mul", [odd, sin])])
    new_odd = g.op("Add", [g.op("Mul", [even, sin]), g.op("Mul", [odd, cos])])
    axis = g.const(np.array([4], dtype=np.int64))
    both = g.op("Concat", [g.op("Unsqueeze", [new_even, axis]), g.op("Unsqueeze", [new_odd, axis])], axis=4)
    flat = g.op("Reshape", [both, g.const(np.array([0, 0, heads, hd], dtype=np.int64))])
    return g.op("Transpose", [flat], perm=[0, 2, 1, 3])


def _layer(
    g: Graph,
    x: str,
    w: dict[str, Any],
    prefix: str,
    spec: dict[str, Any],
    layer: int,
    rot: tuple[str, str, str],
) -> str:
    """One decoder layer on ``x`` ([B, S, D]) with its KV cache ``past_key_values.{layer}.*``;
    ``rot`` is (cos, sin, attention bias)."""
    import numpy as np

    nh, nkv, d = spec["n_head"], spec["n_head_kv"], spec["n_embd"]
    hd = d // nh
    cos, sin, bias = rot
    h = _rms(g, x, w[f"{prefix}.attn_norm.weight"], spec["rms_eps"])
    q = _rope(g, _linear(g, h, w[f"{prefix}.attn_q.weight"], "wq"), nh, hd, cos, sin)
    k = _rope(g, _linear(g, h, w[f"{prefix}.attn_k.weight"], "wk"), nkv, hd, cos, sin)
    v = g.op(
        "Transpose",
        [
            g.op(
                "Reshape",
                [
                    _linear(g, h, w[f"{prefix}.attn_v.weight"], "wv"),
                    g.const(np.array([0, 0, nkv, hd], dtype=np.int64)),
                ],
            )
        ],
        perm=[0, 2, 1, 3],
    )
    keys = g.op("Concat", [f"past_key_values.{layer}.key", k], axis=2)
    values = g.op("Concat", [f"past_key_values.{layer}.value", v], axis=2)
    g.rename(keys, f"present.{layer}.key")
    g.rename(values, f"present.{layer}.value")
    group = nh // nkv

    def repeat(t: str) -> str:  # [B, nkv, T, hd] -> [B, nh, T, hd], kv head j serving heads j*group..
        shape = g.op("Shape", [t])
        b = g.op("Slice", [shape, g.const(np.array([0], np.int64)), g.const(np.array([1], np.int64))])
        tt = g.op("Slice", [shape, g.const(np.array([2], np.int64)), g.const(np.array([3], np.int64))])
        five = g.op(
            "Concat",
            [b, g.const(np.array([nkv, group], np.int64)), tt, g.const(np.array([hd], np.int64))],
            axis=0,
        )
        wide = g.op("Expand", [g.op("Unsqueeze", [t, g.const(np.array([2], np.int64))]), five])
        return g.op("Reshape", [wide, g.const(np.array([0, nh, -1, hd], dtype=np.int64))])

    scores = g.op("MatMul", [q, g.op("Transpose", [repeat(keys)], perm=[0, 1, 3, 2])])
    scores = g.op("Add", [g.op("Div", [scores, g.const(np.float32(np.sqrt(hd)))]), bias])
    att = g.op("MatMul", [g.op("Softmax", [scores], axis=-1), repeat(values)])
    merged = g.op(
        "Reshape",
        [g.op("Transpose", [att], perm=[0, 2, 1, 3]), g.const(np.array([0, 0, nh * hd], dtype=np.int64))],
    )
    x = g.op("Add", [x, _linear(g, merged, w[f"{prefix}.attn_output.weight"], "wo")])
    h = _rms(g, x, w[f"{prefix}.ffn_norm.weight"], spec["rms_eps"])
    gate = _linear(g, h, w[f"{prefix}.ffn_gate.weight"], "wg")
    act = g.op("Mul", [gate, g.op("Sigmoid", [gate])])
    up = _linear(g, h, w[f"{prefix}.ffn_up.weight"], "wu")
    return g.op("Add", [x, _linear(g, g.op("Mul", [act, up]), w[f"{prefix}.ffn_down.weight"], "wd")])


def _positions(g: Graph, spec: dict[str, Any]) -> tuple[str, str, str]:
    """(cos, sin, attention bias) for the tokens fed: positions from the KV cache's length P on,
    each token seeing the keys at positions up to its own and unmasked by ``attention_mask``."""
    import numpy as np

    hd = spec["n_embd"] // spec["n_head"]
    past = g.op(
        "Slice",
        [
            g.op("Shape", ["past_key_values.0.key"]),
            g.const(np.array([2], np.int64)),
            g.const(np.array([3], np.int64)),
        ],
    )
    fed = g.op(
        "Slice",
        [g.op("Shape", ["input_ids"]), g.const(np.array([1], np.int64)), g.const(np.array([2], np.int64))],
    )
    p0 = g.op("Squeeze", [past, g.const(np.array([0], np.int64))])
    total = g.op("Add", [p0, g.op("Squeeze", [fed, g.const(np.array([0], np.int64))])])
    one = g.const(np.array(1, np.int64))
    pos = g.op("Range", [p0, total, one])  # [S]
    inv = (spec["rope_base"] ** (-np.arange(0, hd, 2, dtype=np.float64) / hd)).astype(np.float32)
    ang = g.op(
        "Mul",
        [
            g.op("Unsqueeze", [g.op("Cast", [pos], to=1), g.const(np.array([1], np.int64))]),
            g.const(inv[None, :], "inv_freq"),
        ],
    )  # [S, hd/2]
    axis = g.const(np.array([1], np.int64))
    cos = g.op("Unsqueeze", [g.op("Cos", [ang]), axis])  # [S, 1, hd/2]: broadcast over [B, S, h, hd/2]
    sin = g.op("Unsqueeze", [g.op("Sin", [ang]), axis])
    keys = g.op("Range", [g.const(np.array(0, np.int64)), total, one])  # [T]
    seen = g.op(
        "LessOrEqual",
        [
            g.op("Unsqueeze", [keys, g.const(np.array([0], np.int64))]),
            g.op("Unsqueeze", [pos, g.const(np.array([1], np.int64))]),
        ],
    )  # [S, T]
    causal = g.op("Where", [seen, g.const(np.float32(0.0)), g.const(np.float32(NEG))])
    mask = g.op("Cast", ["attention_mask"], to=1)  # [B, T]: 0 where padded
    pad = g.op("Mul", [g.op("Sub", [g.const(np.float32(1.0)), mask]), g.const(np.float32(NEG))])
    pad = g.op("Unsqueeze", [pad, g.const(np.array([1, 2], np.int64))])  # [B, 1, 1, T]
    return cos, sin, g.op("Add", [causal, pad])


def _io(
    spec: dict[str, Any], layers: int, extra_in: list[Any], extra_out: list[Any], logits_type: int = 1
) -> tuple[Any, Any]:
    from onnx import TensorProto, helper

    nkv, hd, v = spec["n_head_kv"], spec["n_embd"] // spec["n_head"], spec["n_vocab"]
    ins = [
        helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch", "sequence"]),
        helper.make_tensor_value_info("attention_mask", TensorProto.INT64, ["batch", "total"]),
        *extra_in,
    ]
    outs = [helper.make_tensor_value_info("logits", logits_type, ["batch", "sequence", v]), *extra_out]
    for i in range(layers):
        for kind in ("key", "value"):
            ins.append(
                helper.make_tensor_value_info(
                    f"past_key_values.{i}.{kind}", TensorProto.FLOAT, ["batch", nkv, "past", hd]
                )
            )
            outs.append(
                helper.make_tensor_value_info(
                    f"present.{i}.{kind}", TensorProto.FLOAT, ["batch", nkv, "total", hd]
                )
            )
    return ins, outs


def _save(g: Graph, ins: Any, outs: Any, path: str) -> None:
    import onnx
    from onnx import helper

    graph = helper.make_graph(g.nodes, "specproof_tiny", ins, outs, g.inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    onnx.save(model, path)


def decoder(
    w: dict[str, Any], spec: dict[str, Any], path: str, hidden: bool = False, half_logits: bool = False
) -> None:
    """The llama decoder on weights ``w`` (GGUF names), optionally with a ``hidden_states`` output;
    ``half_logits``: its logits cast to float16 (the MTP generator on a CPU reads no float32 logits)."""
    from onnx import TensorProto, helper

    g = Graph()
    rot = _positions(g, spec)
    x = g.op("Gather", [g.const(w["token_embd.weight"], "embed"), "input_ids"], axis=0)
    for i in range(spec["n_layer"]):
        x = _layer(g, x, w, f"blk.{i}", spec, i, rot)
    normed = _rms(g, x, w["output_norm.weight"], spec["rms_eps"])
    logits = _linear(g, normed, w["output.weight"], "wout")
    g.rename(g.op("Cast", [logits], to=TensorProto.FLOAT16) if half_logits else logits, "logits")
    extra = []
    if hidden:
        g.rename(normed, "hidden_states")
        extra.append(
            helper.make_tensor_value_info(
                "hidden_states", TensorProto.FLOAT, ["batch", "sequence", spec["n_embd"]]
            )
        )
    ins, outs = _io(
        spec, spec["n_layer"], [], extra, TensorProto.FLOAT16 if half_logits else TensorProto.FLOAT
    )
    _save(g, ins, outs, path)


def mtp_head(w: dict[str, Any], spec: dict[str, Any], path: str) -> None:
    """The one-layer MTP head (module docstring) on weights ``w``: ``embed``, ``norm_embed``,
    ``norm_hidden``, ``fc`` ([D, 2D]), the layer ``blk.0.*``, ``output_norm``, ``output``."""
    from onnx import TensorProto, helper

    g = Graph()
    rot = _positions(g, spec)
    e = _rms(
        g,
        g.op("Gather", [g.const(w["embed"], "embed"), "input_ids"], axis=0),
        w["norm_embed"],
        spec["rms_eps"],
    )
    h = _rms(g, "hidden_states", w["norm_hidden"], spec["rms_eps"])
    x = _linear(g, g.op("Concat", [e, h], axis=2), w["fc"], "fc")
    x = _layer(g, x, w, "blk.0", spec, 0, rot)
    normed = _rms(g, x, w["output_norm"], spec["rms_eps"])
    g.rename(normed, "hidden_states_out")
    g.rename(_linear(g, normed, w["output"], "wout"), "logits")
    d = spec["n_embd"]
    hid_in = helper.make_tensor_value_info("hidden_states", TensorProto.FLOAT, ["batch", "sequence", d])
    hid_out = helper.make_tensor_value_info("hidden_states_out", TensorProto.FLOAT, ["batch", "sequence", d])
    ins, outs = _io(spec, 1, [hid_in], [hid_out])
    _save(g, ins, outs, path)


# --------------------------------------------------------------------------- the configs


def _decoder_config(spec: dict[str, Any], layers: int, filename: str) -> dict[str, Any]:
    return {
        "session_options": {"provider_options": [], "intra_op_num_threads": 1, "inter_op_num_threads": 1},
        "filename": filename,
        "head_size": spec["n_embd"] // spec["n_head"],
        "hidden_size": spec["n_embd"],
        "num_attention_heads": spec["n_head"],
        "num_key_value_heads": spec["n_head_kv"],
        "num_hidden_layers": layers,
        "inputs": {
            "input_ids": "input_ids",
            "attention_mask": "attention_mask",
            "past_key_names": "past_key_values.%d.key",
            "past_value_names": "past_key_values.%d.value",
        },
        "outputs": {
            "logits": "logits",
            "present_key_names": "present.%d.key",
            "present_value_names": "present.%d.value",
        },
    }


def _config(spec: dict[str, Any], decoder_block: dict[str, Any]) -> dict[str, Any]:
    eos = spec["eos"]
    return {
        "model": {
            "type": "llama",
            "vocab_size": spec["n_vocab"],
            "context_length": spec["n_ctx"],
            "bos_token_id": eos,
            "eos_token_id": eos,
            "pad_token_id": eos,
            "decoder": decoder_block,
        },
        "search": {"max_length": spec["n_ctx"], "past_present_share_buffer": False},
    }


def _write(folder: str, config: dict[str, Any]) -> None:
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "genai_config.json"), "w") as f:
        json.dump(config, f, indent=2)


def build(weights: str, out: str, draft_tokens: int) -> None:
    import numpy as np

    with open(os.path.join(weights, "spec.json")) as f:
        spec = json.load(f)
    w = {name: dict(np.load(os.path.join(weights, f"{name}.npz"))) for name in ("target", "draft", "mtp")}
    n = spec["n_layer"]
    for name in ("target", "draft"):
        decoder(w[name], spec, os.path.join(out, name, "model.onnx"))
        _write(os.path.join(out, name), _config(spec, _decoder_config(spec, n, "model.onnx")))
    # draft model: the two graphs under one folder, the draft as model.draft
    spec_dir = os.path.join(out, "spec")
    for name in ("target", "draft"):
        os.makedirs(os.path.join(spec_dir, name), exist_ok=True)
        shutil.copyfile(os.path.join(out, name, "model.onnx"), os.path.join(spec_dir, name, "model.onnx"))
    composite = _config(spec, _decoder_config(spec, n, "target/model.onnx"))
    composite["model"]["draft"] = _decoder_config(spec, n, "draft/model.onnx")
    composite["speculative"] = {"max_draft_tokens": draft_tokens}
    _write(spec_dir, composite)
    # MTP: the target with its hidden state out (float32 logits, and float16 logits in main16),
    # and the head as a model of its own
    head_dir = os.path.join(out, "mtp", "head")
    for folder, half in (("main", False), ("main16", True)):
        main_dir = os.path.join(out, "mtp", folder)
        decoder(w["target"], spec, os.path.join(main_dir, "model.onnx"), hidden=True, half_logits=half)
        main = _config(spec, _decoder_config(spec, n, "model.onnx"))
        main["model"]["decoder"]["outputs"]["hidden_states"] = "hidden_states"
        main["model"]["mtp"] = {
            "num_hidden_layers": 1,
            "num_key_value_heads": spec["n_head_kv"],
            "head_size": spec["n_embd"] // spec["n_head"],
            "main_hidden_states": "hidden_states",
            "inputs": {"hidden_states": "hidden_states"},
            "outputs": {"hidden_states": "hidden_states_out"},
        }
        _write(main_dir, main)
    mtp_head(w["mtp"], spec, os.path.join(head_dir, "model.onnx"))
    head = _config(spec, _decoder_config(spec, 1, "model.onnx"))
    head["model"]["decoder"]["inputs"]["hidden_states"] = "hidden_states"
    _write(head_dir, head)
    print(json.dumps({"built": out}), flush=True)


# --------------------------------------------------------------------------- serving


class Runner:
    """One mode's model(s) and its generation (module docstring)."""

    def __init__(self, models: str, mode: str, draft_tokens: int, ngram_size: int) -> None:
        import onnxruntime_genai as og

        self.og, self.mode, self.k, self.ngram = og, mode, draft_tokens, ngram_size
        self.model = og.Model(os.path.join(models, FOLDER[mode]))
        self.head = og.Model(os.path.join(models, "mtp", "head")) if mode.startswith("mtp") else None
        self.plain = self.model if mode in ("plain", "ngram") else None
        self.models = models

    def _params(self, seed: int, max_length: int, sampling: dict[str, Any]) -> Any:
        p = self.og.GeneratorParams(self.model)
        opts: dict[str, Any] = {"max_length": max_length, "random_seed": int(seed)}
        opts["do_sample"] = bool(sampling.get("do_sample", True))
        for key in ("temperature", "top_k", "top_p", "repetition_penalty"):
            if key in sampling:
                opts[key] = sampling[key]
        p.set_search_options(**opts)
        if self.mode == "ngram":
            p.set_speculative_options(ngram_size=self.ngram, max_draft_tokens=self.k)
        elif self.mode in ("draft", "mtp", "mtp16"):
            p.set_speculative_options(max_draft_tokens=self.k)
        return p

    def sample(self, prompt: list[int], tokens: int, seed: int, sampling: dict[str, Any]) -> dict[str, Any]:
        import numpy as np

        params = self._params(seed, len(prompt) + tokens, sampling)
        ids = np.array(prompt, dtype=np.int32)
        if self.head is not None:
            gen = self.og.MtpGenerator(self.model, self.head, params)
            gen.append_tokens(ids)
            while not gen.is_done():
                gen.generate_next_token()
            seq = [int(x) for x in np.asarray(gen.get_sequence()).reshape(-1)]
            stats: dict[str, Any] | None = dict(gen.get_stats())
        else:
            gen = self.og.Generator(self.model, params)
            gen.append_tokens(ids)
            while not gen.is_done():
                gen.generate_next_token()
            seq = [int(x) for x in np.asarray(gen.get_sequence(0)).reshape(-1)]
            stats = dict(gen.get_speculative_stats()) if self.mode in ("draft", "ngram") else None
        out: dict[str, Any] = {"tokens": seq[len(prompt) :]}
        if stats is None:
            out.update(drafted=None, accepted=None, forwards=None)
        else:
            out.update(
                drafted=int(stats["draft_tokens_proposed"]),
                accepted=int(stats["draft_tokens_accepted"]),
                forwards=int(stats["target_forward_passes"]),
            )
        return out

    def logits(self, contexts: list[list[int]]) -> list[list[float]]:
        import numpy as np

        if self.plain is None:
            self.plain = self.og.Model(os.path.join(self.models, "target"))
        out = []
        for ctx in contexts:
            p = self.og.GeneratorParams(self.plain)
            p.set_search_options(max_length=len(ctx) + 1)
            gen = self.og.Generator(self.plain, p)
            gen.append_tokens(np.array(ctx, dtype=np.int32))
            out.append([float(x) for x in np.asarray(gen.get_logits(), dtype=np.float64).reshape(-1)])
        return out


def serve(models: str, mode: str, draft_tokens: int, ngram_size: int) -> None:
    import onnxruntime_genai as og

    runner = Runner(models, mode, draft_tokens, ngram_size)

    def handle(req: dict[str, Any]) -> dict[str, Any]:
        if req.get("op") == "logits":
            return {"logits": runner.logits(req["contexts"])}
        s = req.get("sampling") or {}
        return {"samples": [runner.sample(req["prompt"], int(req["tokens"]), x, s) for x in req["seeds"]]}

    ready = {"onnxruntime_genai": og.__version__, "commit": getattr(og, "__commit__", None), "mode": mode}
    # a RuntimeError is what the library's own calls raise: the engine's answer, not the worker's fault
    _loop().answer_requests(ready, handle, engine_errors=(RuntimeError,))


def _loop() -> Any:
    """``worker_loop.py``, beside this file (a script's folder leads ``sys.path``)."""
    return importlib.import_module("worker_loop")


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("build")
    b.add_argument("--weights", required=True)
    b.add_argument("--out", required=True)
    b.add_argument("--draft-tokens", type=int, default=3)
    s = sub.add_parser("serve")
    s.add_argument("--models", required=True)
    s.add_argument("--mode", choices=MODES, required=True)
    s.add_argument("--draft-tokens", type=int, default=3)
    s.add_argument("--ngram-size", type=int, default=2)
    a = ap.parse_args()
    if a.cmd == "build":
        build(a.weights, a.out, a.draft_tokens)
    else:
        serve(a.models, a.mode, a.draft_tokens, a.ngram_size)


if __name__ == "__main__":
    main()
