"""The tiny llama models of :mod:`.gguf_models` as Hugging Face checkpoints, for servers that load HF folders.

vLLM (and transformers itself) load a model from a folder with ``config.json``, the weights in
safetensors and a tokenizer, not from GGUF. :func:`write_hf` writes the same weights as a
``LlamaForCausalLM`` checkpoint (float32) whose logits equal :func:`.gguf_models.logits`, so the
exact law of :func:`.gguf_models.next_token_law` holds for a server of either format.

RoPE: the numpy forward (like llama.cpp's ``llama`` architecture) rotates adjacent pairs
``(2i, 2i+1)`` of each head; transformers' llama rotates the two halves ``(i, i + head_dim/2)``
(``rotate_half``). The export therefore permutes the rows of each head of ``attn_q`` and
``attn_k``: even rows first, then odd rows. This is the inverse of the permutation that
llama.cpp's ``convert_hf_to_gguf.py`` applies from HF to GGUF. Query and key get the same
permutation, so their dot products, and the logits, are unchanged.

Head width: vLLM's CPU attention kernel rejects heads 8 wide (it runs 32, 64, 80, ...), so by
default each head is exported 32 wide (:data:`VLLM_HEAD_DIM`): the 8 real dims are placed on the
rotate-half pairs of the same RoPE frequencies, the other dims are zero, and q is scaled by
``sqrt(32/8) = 2`` to keep the ``1/sqrt(8)`` attention scale. The function computed is unchanged.

The output matrix is its own tensor (``tie_word_embeddings`` false), as in the GGUF files.

The tokenizer (``tokenizer.json``, a ``tokenizers`` WordLevel model) gives each of the 16
strings of :data:`.gguf_models.VOCAB` one id: ``</s>`` is a special added token (id 0, EOS, also
BOS, UNK and PAD), the pre-tokenizer splits the rest into single characters, there is no
normalizer and no BOS is added, and the ``Fuse`` decoder joins the pieces with no separator, so
decoding ids gives :func:`.gguf_models.to_text` (without ``</s>`` when special tokens are skipped).
``generation_config.json`` holds only the token ids: no sampling defaults for a server to apply.

Writing needs numpy alone (:func:`write_safetensors` writes the format itself); reading the
folder back needs transformers or a server.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from specproof.properties.servers import gguf_models as gm
from specproof.reference.errors import SpecproofError

# vLLM's CPU attention (vllm/v1/attention/backends/cpu_attn.py, vLLM 0.32) runs head sizes 32, 64,
# 80, ... only; the tiny models' heads are 8 wide, so the export pads them to this width by default.
VLLM_HEAD_DIM = 32

# GGUF tensor role of a layer -> transformers' name inside ``model.layers.{i}.``
_LAYER_ROLES = {
    "attn_norm": "input_layernorm",
    "attn_q": "self_attn.q_proj",
    "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj",
    "ffn_norm": "post_attention_layernorm",
    "ffn_gate": "mlp.gate_proj",
    "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj",
}


class TinyHFError(SpecproofError, RuntimeError):
    """A tiny HF checkpoint cannot be written (a spec the tokenizer does not fit)."""


def write_safetensors(path: Path, tensors: dict[str, np.ndarray], metadata: dict[str, str]) -> None:
    """``tensors`` (float32) in the safetensors format, without the package: an 8-byte little-endian
    header length, the JSON header (each tensor's dtype, shape and byte range, keys sorted),
    padded with spaces to a multiple of 8, then the raw little-endian bytes in that order."""
    header: dict[str, Any] = {"__metadata__": dict(metadata)}
    blobs, offset = [], 0
    for key in sorted(tensors):
        data = np.ascontiguousarray(tensors[key], dtype="<f4").tobytes()
        header[key] = {
            "dtype": "F32",
            "shape": list(tensors[key].shape),
            "data_offsets": [offset, offset + len(data)],
        }
        blobs.append(data)
        offset += len(data)
    head = json.dumps(header, separators=(",", ":")).encode()
    head += b" " * (-len(head) % 8)
    with open(path, "wb") as f:
        f.write(len(head).to_bytes(8, "little"))
        f.write(head)
        for data in blobs:
            f.write(data)


def rope_rows(w: np.ndarray, n_head: int, head_dim: int) -> np.ndarray:
    """The rows of ``w`` (q or k, adjacent-pair RoPE) in rotate-half layout, heads padded to ``head_dim``.

    Pair ``j`` of a head of width ``hd`` (rows ``2j``, ``2j+1``, angle ``pos * base^(-2j/hd)``) goes
    to dims ``r*j`` and ``r*j + head_dim/2`` with ``r = head_dim/hd``, the rotate-half pair whose angle
    ``pos * base^(-2rj/head_dim)`` is the same; the other dims are zero rows, so they add nothing to
    any query-key product. With ``head_dim == hd`` this is the plain permutation (even rows, then odd).
    """
    rows, cols = w.shape
    hd = rows // n_head
    pairs = w.reshape(n_head, hd // 2, 2, cols)
    out = np.zeros((n_head, head_dim, cols), dtype=w.dtype)
    idx = (head_dim // hd) * np.arange(hd // 2)
    out[:, idx] = pairs[:, :, 0]
    out[:, idx + head_dim // 2] = pairs[:, :, 1]
    return out.reshape(n_head * head_dim, cols)


def _pad_heads(w: np.ndarray, n_head: int, head_dim: int, axis: int) -> np.ndarray:
    """``w`` with each head's block along ``axis`` (v rows, o columns) zero-padded to ``head_dim``."""
    w = np.moveaxis(w, axis, 0)
    hd = w.shape[0] // n_head
    heads = w.reshape(n_head, hd, *w.shape[1:])
    pad = [(0, 0), (0, head_dim - hd)] + [(0, 0)] * (heads.ndim - 2)
    return np.moveaxis(np.pad(heads, pad).reshape(n_head * head_dim, *w.shape[1:]), 0, axis)


def hf_tensors(
    weights: dict[str, np.ndarray], spec: gm.Spec = gm.SPEC, head_dim: int = VLLM_HEAD_DIM
) -> dict[str, np.ndarray]:
    """``weights`` (GGUF names) under transformers' llama names, q/k rows in rotate-half layout.

    With ``head_dim`` above ``spec.head_dim`` every head is zero-padded (:func:`rope_rows`,
    :func:`_pad_heads`) and q is multiplied by ``sqrt(head_dim / spec.head_dim)`` (2 for 32 over
    8, exact in float32), which undoes the larger ``1/sqrt(head_dim)`` attention scale.
    """
    hd = spec.head_dim
    if head_dim < hd or head_dim % hd:
        raise TinyHFError(f"head_dim must be a multiple of the model's {hd}, got {head_dim}")
    q_scale = np.float32(np.sqrt(head_dim / hd))
    out = {
        "model.embed_tokens.weight": weights["token_embd.weight"],
        "model.norm.weight": weights["output_norm.weight"],
        "lm_head.weight": weights["output.weight"],
    }
    for i in range(spec.n_layer):
        for role, hf_name in _LAYER_ROLES.items():
            w = weights[f"blk.{i}.{role}.weight"]
            if role == "attn_q":
                w = rope_rows(w, spec.n_head, head_dim) * q_scale
            elif role == "attn_k":
                w = rope_rows(w, spec.n_head_kv, head_dim)
            elif role == "attn_v":
                w = _pad_heads(w, spec.n_head_kv, head_dim, axis=0)
            elif role == "attn_output":
                w = _pad_heads(w, spec.n_head, head_dim, axis=1)
            out[f"model.layers.{i}.{hf_name}.weight"] = w
    return {k: np.ascontiguousarray(v, dtype=np.float32) for k, v in sorted(out.items())}


def config(spec: gm.Spec = gm.SPEC, head_dim: int = VLLM_HEAD_DIM) -> dict[str, Any]:
    """The ``config.json`` of a tiny model (both rope spellings: transformers 4's and 5's)."""
    return {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "vocab_size": spec.n_vocab,
        "hidden_size": spec.n_embd,
        "intermediate_size": spec.n_ff,
        "num_hidden_layers": spec.n_layer,
        "num_attention_heads": spec.n_head,
        "num_key_value_heads": spec.n_head_kv,
        "head_dim": head_dim,
        "hidden_act": "silu",
        "max_position_embeddings": spec.n_ctx,
        "rms_norm_eps": spec.rms_eps,
        "rope_theta": spec.rope_base,
        "rope_parameters": {"rope_type": "default", "rope_theta": spec.rope_base},
        "attention_bias": False,
        "mlp_bias": False,
        "tie_word_embeddings": False,
        "bos_token_id": gm.EOS_ID,
        "eos_token_id": gm.EOS_ID,
        "pad_token_id": gm.EOS_ID,
        "torch_dtype": "float32",
        "dtype": "float32",
    }


def tokenizer_json() -> dict[str, Any]:
    """A ``tokenizers`` WordLevel tokenizer: one id per string of the vocabulary, pieces joined as is."""
    eos = gm.VOCAB[gm.EOS_ID]
    return {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": [
            {
                "id": gm.EOS_ID,
                "content": eos,
                "single_word": False,
                "lstrip": False,
                "rstrip": False,
                "normalized": False,
                "special": True,
            }
        ],
        "normalizer": None,
        "pre_tokenizer": {
            "type": "Split",
            "pattern": {"Regex": "."},
            "behavior": "Isolated",
            "invert": False,
        },
        "post_processor": None,
        "decoder": {"type": "Fuse"},
        "model": {"type": "WordLevel", "vocab": {s: i for i, s in enumerate(gm.VOCAB)}, "unk_token": eos},
    }


def tokenizer_config() -> dict[str, Any]:
    """``tokenizer_config.json``: the fast tokenizer of ``tokenizer.json``, ``</s>`` as EOS, no BOS added."""
    eos = gm.VOCAB[gm.EOS_ID]
    return {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "eos_token": eos,
        "bos_token": eos,
        "unk_token": eos,
        "pad_token": eos,
        "add_bos_token": False,
        "add_eos_token": False,
        "clean_up_tokenization_spaces": False,
        "model_max_length": gm.SPEC.n_ctx,
    }


def _write_json(path: Path, obj: dict[str, Any]) -> None:
    """Write ``obj`` as indented, key-sorted JSON: same model, same bytes."""
    path.write_text(json.dumps(obj, indent=2, sort_keys=True) + "\n")


def write_hf(
    folder: Path | str,
    weights: dict[str, np.ndarray],
    name: str,
    spec: gm.Spec = gm.SPEC,
    head_dim: int = VLLM_HEAD_DIM,
) -> Path:
    """Write ``weights`` as a float32 ``LlamaForCausalLM`` folder with the tiny tokenizer; return it.

    ``head_dim`` is the width of the exported heads (:func:`hf_tensors`): the default pads to what
    vLLM's CPU attention accepts; ``spec.head_dim`` exports the heads unpadded. Either way the
    logits are those of :func:`.gguf_models.logits`.
    """
    if spec.n_vocab != len(gm.VOCAB):
        raise TinyHFError(f"the vocabulary has {len(gm.VOCAB)} tokens, the spec asks for {spec.n_vocab}")
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    write_safetensors(
        folder / "model.safetensors", hf_tensors(weights, spec, head_dim), {"format": "pt", "name": name}
    )
    _write_json(folder / "config.json", config(spec, head_dim))
    ids = {"bos_token_id": gm.EOS_ID, "eos_token_id": gm.EOS_ID, "pad_token_id": gm.EOS_ID}
    _write_json(folder / "generation_config.json", ids)
    _write_json(folder / "tokenizer.json", tokenizer_json())
    _write_json(folder / "tokenizer_config.json", tokenizer_config())
    eos = gm.VOCAB[gm.EOS_ID]
    _write_json(
        folder / "special_tokens_map.json",
        {k: eos for k in ("bos_token", "eos_token", "unk_token", "pad_token")},
    )
    return folder


def eagle_tensors(
    draft: dict[str, np.ndarray], spec: gm.Spec = gm.SPEC, head_dim: int = VLLM_HEAD_DIM
) -> dict[str, np.ndarray]:
    """An EAGLE-1 head for the tiny target (vLLM's ``EagleLlamaForCausalLM``): ``fc`` maps the
    concatenation [embedding of the token; the target's hidden state] to the hidden width, here
    keeping the hidden state and dropping the embedding (``[0 | I]``), and one decoder layer, the
    draft model's last (its input norm left out, as EAGLE's first layer has none). The token
    embedding and the output matrix are not written: vLLM shares the target's. Its drafts are
    a plausible guess, not a trained one; the audit asks only that verification keep the law."""
    last = spec.n_layer - 1
    layer = {
        k.replace(f"model.layers.{last}.", "layers.0."): v
        for k, v in hf_tensors(draft, spec, head_dim).items()
        if k.startswith(f"model.layers.{last}.") and "input_layernorm" not in k
    }
    h = spec.n_embd
    fc = np.concatenate([np.zeros((h, h)), np.eye(h)], axis=1)
    return {"fc.weight": fc.astype(np.float32), **layer}


def write_eagle_hf(
    folder: Path | str, draft: dict[str, np.ndarray], name: str, spec: gm.Spec = gm.SPEC
) -> Path:
    """Write :func:`eagle_tensors` as a folder vLLM's ``"method": "eagle"`` loads (one layer; the
    architecture ``LlamaForCausalLM``, which vLLM renames ``EagleLlamaForCausalLM``)."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    write_safetensors(
        folder / "model.safetensors", eagle_tensors(draft, spec), {"format": "pt", "name": name}
    )
    _write_json(folder / "config.json", {**config(spec), "num_hidden_layers": 1})
    return folder


def write_models_hf(folder: Path | str, seed: int = 0) -> dict[str, Any]:
    """Write the target and draft of ``seed`` (the pair of :func:`.gguf_models.write_models`) as HF
    folders, and an EAGLE-1 head for the target (:func:`write_eagle_hf`).

    Returns ``{"target": Path, "draft": Path, "eagle": Path, "vocab": [str, ...], "eos_id": int,
    "seed": int}`` with the folders ``folder/target``, ``folder/draft`` and ``folder/eagle``.
    """
    folder = Path(folder)
    tw = gm.target_weights(seed)
    dw = gm.draft_weights(tw, seed)
    paths = {
        "target": write_hf(folder / "target", tw, f"specproof-tiny-target-{seed}"),
        "draft": write_hf(folder / "draft", dw, f"specproof-tiny-draft-{seed}"),
        "eagle": write_eagle_hf(folder / "eagle", dw, f"specproof-tiny-eagle-{seed}"),
    }
    return {**paths, "vocab": list(gm.VOCAB), "eos_id": gm.EOS_ID, "seed": seed}
