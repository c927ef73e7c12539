"""Tiny llama-architecture GGUF models written by specproof, and their exact next-token law in numpy.

The served-engine audit needs a target and a draft small enough that every law is known. This
module writes both as GGUF files (``llama`` architecture, f32 tensors, fixed random weights from
a numpy seed) and computes, in float64 numpy, the same forward pass as the server so that a
test can compare the server's reported probabilities with the exact law.

The vocabulary (:data:`VOCAB`): id 0 is ``</s>``, the end-of-sequence token (also named as
BOS and UNK, so every id of the vocabulary is either EOS or an ordinary token); ids 1..15 are
the letters ``a``..``o``. Every token is one distinct string, so text written with these letters
tokenizes one to one and the concatenated pieces of generated ids decode back uniquely (a
letter is one character; ``</s>`` starts with ``<``, which no letter is). The tokenizer is
SentencePiece-style (``tokenizer.ggml.model = "llama"``) with no space prefix and no BOS added.

EOS is an ordinary id that the law gives a small mass (about 1.5% on average for the target):
the server stops when EOS is sampled, so EOS is absorbing, and its id is :data:`EOS_ID`. Its
logit is held low by a constant channel: dimension 0 of the residual stream equals
``CHANNEL`` for every token and is never written by attention or the MLP (their output rows 0
are zero and the norms' weight 0 is zero), and only the EOS row of the output matrix reads it,
with a negative weight.

The draft is the target with Gaussian noise added to every weight (the channel structure kept),
so the two laws agree on much of their mass: drafts are both accepted and rejected.
"""

from __future__ import annotations

import functools
import hashlib
import importlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from specproof.reference.errors import SpecproofError, SpecproofInputError

EOS_ID = 0
LETTERS = "abcdefghijklmno"
VOCAB: tuple[str, ...] = ("</s>", *LETTERS)
CHANNEL = 4.0  # value of the constant residual dimension 0
EOS_WEIGHT = -0.4  # weight of the EOS output row on the constant channel (sets EOS's small mass)
DRAFT_NOISE = 0.2  # draft weight = target weight + DRAFT_NOISE * (std of the tensor) * N(0, 1)
GGUF_VERSION = "0.19.0"  # the gguf package these files were written and checked with
Tokens = list[int] | np.ndarray


class GGUFModelError(SpecproofError, RuntimeError):
    """A tiny model cannot be written or read back (missing ``gguf`` package, unexpected file)."""


@dataclass(frozen=True)
class Spec:
    """Shapes and hyper-parameters of one tiny llama model."""

    n_vocab: int = len(VOCAB)
    n_embd: int = 32
    n_layer: int = 2
    n_head: int = 4
    n_head_kv: int = 2
    n_ff: int = 64
    n_ctx: int = 512
    rope_base: float = 10000.0
    rms_eps: float = 1e-5

    @property
    def head_dim(self) -> int:
        """Width of one attention head (RoPE rotates all of it)."""
        return self.n_embd // self.n_head


SPEC = Spec()


def _layer_names(i: int) -> dict[str, str]:
    """GGUF tensor names of layer ``i``, by role."""
    return {
        role: f"blk.{i}.{role}.weight"
        for role in (
            "attn_norm",
            "attn_q",
            "attn_k",
            "attn_v",
            "attn_output",
            "ffn_norm",
            "ffn_gate",
            "ffn_up",
            "ffn_down",
        )
    }


def _impose_channel(w: dict[str, np.ndarray], spec: Spec) -> None:
    """Make residual dimension 0 the constant channel that only the EOS logit reads (in place)."""
    w["token_embd.weight"][:, 0] = CHANNEL
    for i in range(spec.n_layer):
        n = _layer_names(i)
        w[n["attn_norm"]][0] = 0.0
        w[n["ffn_norm"]][0] = 0.0
        w[n["attn_output"]][0, :] = 0.0
        w[n["ffn_down"]][0, :] = 0.0
    w["output_norm.weight"][0] = 1.0
    w["output.weight"][:, 0] = 0.0
    w["output.weight"][EOS_ID, 0] = EOS_WEIGHT


def target_weights(seed: int = 0, spec: Spec = SPEC) -> dict[str, np.ndarray]:
    """The target's weights (float32, numpy layout ``(out, in)``), a function of ``seed`` alone."""
    rng = np.random.default_rng([seed, 1])
    d, f, hd = spec.n_embd, spec.n_ff, spec.head_dim

    def mat(rows: int, cols: int, scale: float) -> np.ndarray:
        return (rng.standard_normal((rows, cols)) * scale).astype(np.float32)

    def norm() -> np.ndarray:
        return (1.0 + 0.1 * rng.standard_normal(d)).astype(np.float32)

    w: dict[str, np.ndarray] = {"token_embd.weight": mat(spec.n_vocab, d, 1.0)}
    for i in range(spec.n_layer):
        n = _layer_names(i)
        w[n["attn_norm"]] = norm()
        w[n["attn_q"]] = mat(spec.n_head * hd, d, 1.5 / np.sqrt(d))
        w[n["attn_k"]] = mat(spec.n_head_kv * hd, d, 1.5 / np.sqrt(d))
        w[n["attn_v"]] = mat(spec.n_head_kv * hd, d, 1.0 / np.sqrt(d))
        w[n["attn_output"]] = mat(d, spec.n_head * hd, 1.0 / np.sqrt(d))
        w[n["ffn_norm"]] = norm()
        w[n["ffn_gate"]] = mat(f, d, 1.0 / np.sqrt(d))
        w[n["ffn_up"]] = mat(f, d, 1.0 / np.sqrt(d))
        w[n["ffn_down"]] = mat(d, f, 1.0 / np.sqrt(f))
    w["output_norm.weight"] = norm()
    w["output.weight"] = mat(spec.n_vocab, d, 0.25)
    _impose_channel(w, spec)
    return w


def draft_weights(
    target: dict[str, np.ndarray], seed: int = 0, noise: float = DRAFT_NOISE, spec: Spec = SPEC
) -> dict[str, np.ndarray]:
    """The draft: ``target`` plus ``noise`` times each tensor's std times N(0, 1), channel kept."""
    rng = np.random.default_rng([seed, 2])
    w = {}
    for name in sorted(target):
        t = target[name].astype(np.float64)
        w[name] = (t + noise * float(t.std()) * rng.standard_normal(t.shape)).astype(np.float32)
    _impose_channel(w, spec)
    return w


def _gguf() -> Any:
    """The ``gguf`` package (``pip install gguf==0.19.0``), or a clear error."""
    try:
        return importlib.import_module("gguf")  # untyped on purpose: an optional dependency
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise GGUFModelError(
            f"writing the tiny GGUF models needs the gguf package: pip install gguf=={GGUF_VERSION}"
        ) from exc


def write_gguf(path: Path, weights: dict[str, np.ndarray], name: str, spec: Spec = SPEC) -> Path:
    """Write ``weights`` as a llama-architecture GGUF file with the tiny vocabulary; return ``path``."""
    gguf = _gguf()
    if spec.n_vocab != len(VOCAB):
        raise GGUFModelError(f"the vocabulary has {len(VOCAB)} tokens, the spec asks for {spec.n_vocab}")
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_name(name)
    writer.add_context_length(spec.n_ctx)
    writer.add_embedding_length(spec.n_embd)
    writer.add_block_count(spec.n_layer)
    writer.add_feed_forward_length(spec.n_ff)
    writer.add_head_count(spec.n_head)
    writer.add_head_count_kv(spec.n_head_kv)
    writer.add_rope_dimension_count(spec.head_dim)
    writer.add_rope_freq_base(spec.rope_base)
    writer.add_layer_norm_rms_eps(spec.rms_eps)
    writer.add_vocab_size(spec.n_vocab)
    writer.add_file_type(gguf.LlamaFileType.ALL_F32)
    writer.add_tokenizer_model("llama")
    writer.add_token_list(list(VOCAB))
    writer.add_token_scores([0.0] * len(VOCAB))
    control, normal = int(gguf.TokenType.CONTROL), int(gguf.TokenType.NORMAL)
    writer.add_token_types([control if i == EOS_ID else normal for i in range(len(VOCAB))])
    writer.add_bos_token_id(EOS_ID)
    writer.add_eos_token_id(EOS_ID)
    writer.add_unk_token_id(EOS_ID)
    writer.add_add_bos_token(False)
    writer.add_add_eos_token(False)
    writer.add_add_space_prefix(False)
    return _write_tensors(writer, weights, path)


def _write_tensors(writer: Any, tensors: dict[str, np.ndarray], path: Path) -> Path:
    """Add ``tensors`` (float32, in name order) to a GGUF ``writer`` whose keys are set, write
    the file and close it; return ``path``."""
    for tensor_name in sorted(tensors):
        writer.add_tensor(tensor_name, np.ascontiguousarray(tensors[tensor_name], dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def write_models(folder: Path | str, seed: int = 0) -> dict[str, Any]:
    """Write ``target.gguf`` and ``draft.gguf`` for ``seed`` into ``folder``; same seed, same bytes.

    Returns ``{"target": Path, "draft": Path, "vocab": [str, ...], "eos_id": int, "seed": int,
    "sha256": {"target": hex, "draft": hex}}``.
    """
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    tw = target_weights(seed)
    paths = {
        "target": write_gguf(folder / "target.gguf", tw, f"specproof-tiny-target-{seed}"),
        "draft": write_gguf(folder / "draft.gguf", draft_weights(tw, seed), f"specproof-tiny-draft-{seed}"),
    }
    digests = {role: hashlib.sha256(p.read_bytes()).hexdigest() for role, p in paths.items()}
    return {**paths, "vocab": list(VOCAB), "eos_id": EOS_ID, "seed": seed, "sha256": digests}


#: the rank of the tiny LoRA adapters (their alpha equals it, so a request's scale is the factor)
LORA_RANK = 2


def lora_weights(seed: int = 0, spec: Spec = SPEC) -> dict[str, np.ndarray]:
    """A rank-:data:`LORA_RANK` LoRA adapter of the output matrix (GGUF names: ``output.weight.lora_a``
    of shape ``(r, n_embd)``, ``output.weight.lora_b`` of ``(n_vocab, r)``), a function of ``seed``
    alone: it moves every logit but the end of sequence's (channel 0 and the EOS row stay zero,
    so the end of sequence stays as unreachable as in the target)."""
    rng = np.random.default_rng([seed, 3])
    a = rng.standard_normal((LORA_RANK, spec.n_embd)) / np.sqrt(spec.n_embd)
    b = rng.standard_normal((spec.n_vocab, LORA_RANK)) * 0.6
    a[:, 0] = 0.0
    b[EOS_ID, :] = 0.0
    return {"output.weight.lora_a": a.astype(np.float32), "output.weight.lora_b": b.astype(np.float32)}


def with_lora(
    weights: dict[str, np.ndarray], lora: dict[str, np.ndarray], scale: float
) -> dict[str, np.ndarray]:
    """``weights`` with ``lora`` merged at ``scale`` (what llama.cpp computes for a request asking
    that adapter at that scale: ``W x + scale * alpha / r * B (A x)``, alpha = r here)."""
    out = dict(weights)
    for name in {k.rsplit(".", 1)[0] for k in lora}:
        delta = lora[f"{name}.lora_b"].astype(np.float64) @ lora[f"{name}.lora_a"].astype(np.float64)
        out[name] = (weights[name].astype(np.float64) + scale * delta).astype(np.float32)
    return out


def write_lora(path: Path, lora: dict[str, np.ndarray], name: str) -> Path:
    """Write ``lora`` as a llama.cpp LoRA adapter GGUF (``general.type`` adapter, ``adapter.type``
    lora, alpha = its rank) for the tiny llama models; return ``path``."""
    gguf = _gguf()
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_type("adapter")
    writer.add_name(name)
    writer.add_string(gguf.Keys.Adapter.TYPE, "lora")
    writer.add_float32(gguf.Keys.Adapter.LORA_ALPHA, float(LORA_RANK))
    return _write_tensors(writer, lora, path)


def read_weights(path: Path | str) -> dict[str, np.ndarray]:
    """The tensors of a GGUF file written here, back in numpy layout ``(out, in)``."""
    gguf = _gguf()
    reader = gguf.GGUFReader(str(path))
    out = {}
    for t in reader.tensors:
        if t.tensor_type != gguf.GGMLQuantizationType.F32:
            raise GGUFModelError(f"{path}: tensor {t.name} is {t.tensor_type.name}, expected F32")
        shape = tuple(int(n) for n in reversed(t.shape))
        out[t.name] = np.array(t.data, dtype=np.float32).reshape(shape)
    return out


def _rms_norm(x: np.ndarray, g: np.ndarray, eps: float) -> np.ndarray:
    """RMSNorm over the last axis, then the elementwise weight ``g``."""
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * g


def _rope(x: np.ndarray, base: float) -> np.ndarray:
    """Rotate ``x`` (positions, heads, head_dim) in adjacent pairs (2i, 2i+1), angle pos * base^(-2i/d)."""
    n, _, hd = x.shape
    inv = base ** (-np.arange(0, hd, 2, dtype=np.float64) / hd)
    ang = np.arange(n, dtype=np.float64)[:, None] * inv[None, :]
    cos, sin = np.cos(ang)[:, None, :], np.sin(ang)[:, None, :]
    even, odd = x[..., 0::2], x[..., 1::2]
    out = np.empty_like(x)
    out[..., 0::2] = even * cos - odd * sin
    out[..., 1::2] = even * sin + odd * cos
    return out


def _attention(h: np.ndarray, w: dict[str, np.ndarray], n: dict[str, str], spec: Spec) -> np.ndarray:
    """Causal grouped-query self-attention of one layer on normalized inputs ``h`` (positions, d)."""
    t, hd = h.shape[0], spec.head_dim
    q = _rope((h @ w[n["attn_q"]].T).reshape(t, spec.n_head, hd), spec.rope_base)
    k = _rope((h @ w[n["attn_k"]].T).reshape(t, spec.n_head_kv, hd), spec.rope_base)
    v = (h @ w[n["attn_v"]].T).reshape(t, spec.n_head_kv, hd)
    group = spec.n_head // spec.n_head_kv
    k, v = np.repeat(k, group, axis=1), np.repeat(v, group, axis=1)
    scores = np.einsum("qhd,khd->hqk", q, k) / np.sqrt(hd)
    scores = np.where(np.tril(np.ones((t, t), dtype=bool))[None], scores, -np.inf)
    scores -= scores.max(axis=-1, keepdims=True)
    p = np.exp(scores)
    p /= p.sum(axis=-1, keepdims=True)
    out = np.einsum("hqk,khd->qhd", p, v).reshape(t, spec.n_head * hd)
    return out @ w[n["attn_output"]].T


def _mlp(h: np.ndarray, w: dict[str, np.ndarray], n: dict[str, str]) -> np.ndarray:
    """SwiGLU: down(silu(gate h) * up h)."""
    g = h @ w[n["ffn_gate"]].T
    return ((g / (1.0 + np.exp(-g))) * (h @ w[n["ffn_up"]].T)) @ w[n["ffn_down"]].T


def logits(weights: dict[str, np.ndarray], tokens: Tokens, spec: Spec = SPEC) -> np.ndarray:
    """Float64 logits (positions, vocab) of the model on ``tokens`` (positions 0, 1, ...; causal)."""
    ids = np.asarray(tokens, dtype=np.int64)
    if ids.ndim != 1 or ids.size == 0 or ids.min() < 0 or ids.max() >= spec.n_vocab:
        raise SpecproofInputError(
            "tokens", f"must be a non-empty list of ids in [0, {spec.n_vocab}), got {tokens!r}"
        )
    if ids.size > spec.n_ctx:
        raise SpecproofInputError("tokens", f"{ids.size} tokens exceed the context length {spec.n_ctx}")
    w = {k: v.astype(np.float64) for k, v in weights.items()}
    x = w["token_embd.weight"][ids]
    for i in range(spec.n_layer):
        n = _layer_names(i)
        x = x + _attention(_rms_norm(x, w[n["attn_norm"]], spec.rms_eps), w, n, spec)
        x = x + _mlp(_rms_norm(x, w[n["ffn_norm"]], spec.rms_eps), w, n)
    return _rms_norm(x, w["output_norm.weight"], spec.rms_eps) @ w["output.weight"].T


@functools.lru_cache(maxsize=4)
def _cached_target(seed: int) -> dict[str, np.ndarray]:
    return target_weights(seed)


def last_logits(context: Tokens, seed: int = 0) -> np.ndarray:
    """The float64 logits after ``context`` of the tiny target of ``seed`` (its weights made once a
    process): the law the engine tiers' adapters hold their engines to, put through each
    setting's ``Sampling.law``. A fresh array (the caller may change it)."""
    return logits(_cached_target(seed), context)[-1].astype(np.float64)


def next_token_law(
    weights: dict[str, np.ndarray], context: Tokens, temperature: float = 1.0, spec: Spec = SPEC
) -> np.ndarray:
    """The exact law of the token after ``context``: softmax(logits / temperature), float64, length V."""
    if not temperature > 0:
        raise SpecproofInputError("temperature", f"must be > 0, got {temperature}")
    z = logits(weights, context, spec)[-1] / temperature
    p = np.exp(z - z.max())
    return p / p.sum()


def detokenize(text: str) -> list[int]:
    """The ids whose pieces concatenate to ``text`` (letters and ``</s>``); raises on anything else."""
    ids, i = [], 0
    while i < len(text):
        if text.startswith(VOCAB[EOS_ID], i):
            ids.append(EOS_ID)
            i += len(VOCAB[EOS_ID])
        elif text[i] in LETTERS:
            ids.append(1 + LETTERS.index(text[i]))
            i += 1
        else:
            raise SpecproofInputError(
                "text", f"{text[i]!r} at offset {i} of {text!r} is not a piece of the tiny vocabulary"
            )
    return ids


def to_text(ids: list[int]) -> str:
    """The text whose tokenization is ``ids`` (the inverse of :func:`detokenize`)."""
    return "".join(VOCAB[i] for i in ids)
