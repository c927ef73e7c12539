"""ONNX Runtime GenAI 0.18.0: two defects of `og.MtpGenerator` on the CPU execution provider.

Needs `pip install onnxruntime-genai==0.18.0 onnx numpy` and this repository's checkout: the
models are written by its graph writer, properties/servers/ort_worker.py (it imports only onnx and
numpy; this script loads it by its path). Nothing is downloaded. The script writes a tiny llama
(V = 16, two layers, random weights) as ONNX graphs of standard operators in a temporary folder:
the main model twice, with float32 logits (what a float32 export gives) and with its logits cast
to float16, and a one-layer MTP head, each beside its genai_config.json. Then:

1. float32 main model: `MtpGenerator.append_tokens` raises "Cast - input and output types are the
   same" (its host fallback casts the logits to float32 whatever their type, and the CPU cast
   refuses a cast to the same type), greedy or sampled;
2. float16 main model, `do_sample` with `top_k = 1` (`top_p = 1`, `temperature = 1`): the law
   is the argmax alone, so every seed must give the greedy tokens; the MtpGenerator samples the
   whole softmax instead, and seeds give other tokens.

Exit 0: both fixed; exit 1: a defect holds (each one printed).
"""

import json
import os
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "..", "properties", "servers"))
import onnxruntime_genai as og  # noqa: E402
import ort_worker  # noqa: E402  (the repository's graph writer: onnx and numpy only)

SPEC = {
    "n_vocab": 16,
    "n_embd": 32,
    "n_layer": 2,
    "n_head": 4,
    "n_head_kv": 2,
    "n_ff": 64,
    "n_ctx": 512,
    "rope_base": 10000.0,
    "rms_eps": 1e-5,
    "eos": 0,
}
PROMPT = [1, 2, 3, 4]
NEW_TOKENS = 12


def layer(rng, i):
    d, f, hd = SPEC["n_embd"], SPEC["n_ff"], SPEC["n_embd"] // SPEC["n_head"]

    def mat(rows, cols):
        return (rng.standard_normal((rows, cols)) / np.sqrt(cols)).astype(np.float32)

    return {
        f"blk.{i}.attn_norm.weight": np.ones(d, np.float32),
        f"blk.{i}.attn_q.weight": mat(SPEC["n_head"] * hd, d),
        f"blk.{i}.attn_k.weight": mat(SPEC["n_head_kv"] * hd, d),
        f"blk.{i}.attn_v.weight": mat(SPEC["n_head_kv"] * hd, d),
        f"blk.{i}.attn_output.weight": mat(d, SPEC["n_head"] * hd),
        f"blk.{i}.ffn_norm.weight": np.ones(d, np.float32),
        f"blk.{i}.ffn_gate.weight": mat(f, d),
        f"blk.{i}.ffn_up.weight": mat(f, d),
        f"blk.{i}.ffn_down.weight": mat(d, f),
    }


def write_models(folder):
    rng = np.random.default_rng(0)
    d, v = SPEC["n_embd"], SPEC["n_vocab"]
    target = {"token_embd.weight": rng.standard_normal((v, d)).astype(np.float32)}
    for i in range(SPEC["n_layer"]):
        target.update(layer(rng, i))
    target["output_norm.weight"] = np.ones(d, np.float32)
    target["output.weight"] = (rng.standard_normal((v, d)) * 0.25).astype(np.float32)
    head = {
        "embed": target["token_embd.weight"],
        "output": target["output.weight"],
        "output_norm": target["output_norm.weight"],
        "norm_embed": np.ones(d, np.float32),
        "norm_hidden": np.ones(d, np.float32),
        "fc": (rng.standard_normal((d, 2 * d)) / np.sqrt(2 * d)).astype(np.float32),
        **layer(rng, 0),  # its one decoder layer
    }
    weights = os.path.join(folder, "weights")
    os.makedirs(weights)
    for name, w in (("target", target), ("draft", target), ("mtp", head)):
        np.savez(os.path.join(weights, f"{name}.npz"), **w)
    with open(os.path.join(weights, "spec.json"), "w") as f:
        json.dump(SPEC, f)
    out = os.path.join(folder, "models")
    ort_worker.build(weights, out, 3)
    return out


def mtp_tokens(models, main, seed, **search):
    main_model = og.Model(os.path.join(models, "mtp", main))
    head_model = og.Model(os.path.join(models, "mtp", "head"))
    params = og.GeneratorParams(main_model)
    params.set_search_options(max_length=len(PROMPT) + NEW_TOKENS, random_seed=seed, **search)
    params.set_speculative_options(max_draft_tokens=3)
    gen = og.MtpGenerator(main_model, head_model, params)
    gen.append_tokens(np.array(PROMPT, dtype=np.int32))
    while not gen.is_done():
        gen.generate_next_token()
    return [int(x) for x in np.asarray(gen.get_sequence()).reshape(-1)][len(PROMPT) :]


def main():
    print(f"onnxruntime-genai {og.__version__}")
    holds = 0
    with tempfile.TemporaryDirectory() as tmp:
        models = write_models(tmp)
        # 1. float32 logits
        sampled = {"do_sample": True, "temperature": 1.0, "top_k": 0, "top_p": 1.0}  # top-k and top-p off
        for search in ({"do_sample": False}, sampled):
            try:
                mtp_tokens(models, "main", 1, **search)
                print(f"1. float32 main model, {search}: generated (fixed)")
            except RuntimeError as e:
                print(f"1. float32 main model, {search}: RuntimeError: {e}  <- the defect holds")
                holds = 1
        # 2. top_k = 1 on the float16 main model
        greedy = mtp_tokens(models, "main16", 1, do_sample=False)
        print(f"2. float16 main model, greedy: {greedy}")
        other = {}
        for seed in range(1, 11):
            got = mtp_tokens(models, "main16", seed, do_sample=True, top_k=1, top_p=1.0, temperature=1.0)
            if got != greedy:
                other[seed] = got
        if other:
            seed, got = next(iter(other.items()))
            print(
                f"   do_sample with top_k 1: {len(other)} of 10 seeds gave other tokens, e.g. seed {seed}: "
                f"{got}  <- the defect holds"
            )
            holds = 1
        else:
            print("   do_sample with top_k 1: every seed gave the greedy tokens (fixed)")
    sys.exit(holds)


if __name__ == "__main__":
    main()
