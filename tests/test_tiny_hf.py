"""The tiny llama models exported as Hugging Face checkpoints: transformers computes the numpy law.

The exported target and draft must give, in transformers (float32), the logits of
:func:`gguf_models.logits` (float64 numpy) on the same tokens, and the tokenizer must map each of
the 16 strings to one id with ``</s>`` as EOS id 0, so that an HF-format server (vLLM) serves the
law the tests know. Needs transformers, safetensors and torch; skipped without them.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("safetensors", reason="the tiny HF checkpoints need the safetensors package")
transformers = pytest.importorskip(
    "transformers", reason="reading the tiny HF checkpoints needs transformers"
)
torch = pytest.importorskip("torch")

from specproof.properties.servers import gguf_models as gm  # noqa: E402
from specproof.properties.servers import tiny_hf  # noqa: E402

CONTEXTS = [[1], [2, 3], [5, 1, 9, 14], [15, 15, 15], [3, 8, 2, 11, 7, 6, 13, 4, 10, 12, 1, 9, 0, 4]]
TOL = 1e-4  # float32 transformers against float64 numpy; measured max |difference| about 1e-6


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The seed-0 pair written once for the module."""
    return tiny_hf.write_models_hf(tmp_path_factory.mktemp("tiny_hf"), seed=0)


def _hf_logits(folder: Path, tokens: list[int]) -> np.ndarray:
    """transformers' float32 logits (positions, vocab) of the checkpoint in ``folder`` on ``tokens``."""
    model = transformers.AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    with torch.no_grad():
        return model(torch.tensor([tokens])).logits[0].double().numpy()


@pytest.mark.parametrize("role", ["target", "draft"])
def test_logits_equal_the_numpy_forward(models: dict[str, Any], role: str) -> None:
    """Every position of every context: transformers' logits are the numpy logits within TOL."""
    tw = gm.target_weights(0)
    weights = tw if role == "target" else gm.draft_weights(tw, 0)
    model = transformers.AutoModelForCausalLM.from_pretrained(models[role], dtype=torch.float32).eval()
    for tokens in CONTEXTS:
        with torch.no_grad():
            got = model(torch.tensor([tokens])).logits[0].double().numpy()
        assert got.shape == (len(tokens), gm.SPEC.n_vocab)
        np.testing.assert_allclose(got, gm.logits(weights, tokens), atol=TOL, rtol=0)


def test_unpadded_heads_and_the_permutation(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Heads exported at their own width give the same logits; without the q/k permutation they do not."""
    tw = gm.target_weights(0)
    tokens = CONTEXTS[-1]
    exact = gm.logits(tw, tokens)
    folder = tiny_hf.write_hf(tmp_path / "unpadded", tw, "unpadded", head_dim=gm.SPEC.head_dim)
    assert json.loads((folder / "config.json").read_text())["head_dim"] == gm.SPEC.head_dim
    np.testing.assert_allclose(_hf_logits(folder, tokens), exact, atol=TOL, rtol=0)
    monkeypatch.setattr(tiny_hf, "rope_rows", lambda w, n_head, head_dim: w)
    folder = tiny_hf.write_hf(tmp_path / "unpermuted", tw, "unpermuted", head_dim=gm.SPEC.head_dim)
    diff = np.abs(_hf_logits(folder, tokens) - exact)
    assert diff[0].max() < TOL  # position 0: no rotation
    assert diff[1:].max() > 100 * TOL


def test_checkpoint_files(models: dict[str, Any]) -> None:
    """Config, generation config and the returned dict: untied output, no sampling defaults, EOS 0."""
    assert models["eos_id"] == gm.EOS_ID == 0 and models["vocab"] == list(gm.VOCAB)
    for role in ("target", "draft"):
        folder = models[role]
        assert folder == Path(folder) and (folder / "model.safetensors").is_file()
        cfg = json.loads((folder / "config.json").read_text())
        assert cfg["tie_word_embeddings"] is False and cfg["eos_token_id"] == 0
        assert cfg["head_dim"] == tiny_hf.VLLM_HEAD_DIM
        assert json.loads((folder / "generation_config.json").read_text()) == {
            "bos_token_id": 0,
            "eos_token_id": 0,
            "pad_token_id": 0,
        }
    assert (models["target"] / "model.safetensors").read_bytes() != (
        models["draft"] / "model.safetensors"
    ).read_bytes()


def test_tokenizer_one_id_per_string(models: dict[str, Any]) -> None:
    """Each of the 16 strings is one id, text tokenizes piece by piece, decoding concatenates."""
    tok = transformers.AutoTokenizer.from_pretrained(models["target"])
    assert tok.eos_token == "</s>" and tok.eos_token_id == gm.EOS_ID
    assert len(tok) == len(gm.VOCAB)
    for i, piece in enumerate(gm.VOCAB):
        assert tok.encode(piece, add_special_tokens=True) == [i]
        assert tok.convert_ids_to_tokens(i) == piece
    ids = [3, 8, 2, 0, 11, 15, 1]
    text = gm.to_text(ids)
    assert tok.encode(text) == ids == gm.detokenize(text)
    assert tok.decode(ids) == text
    assert tok.decode(ids, skip_special_tokens=True) == text.replace("</s>", "")


def test_the_own_safetensors_writer_reads_back_with_the_package(tmp_path: Path) -> None:
    """The file :func:`tiny_hf.write_safetensors` writes (without the package) is read back by
    ``safetensors.numpy`` with every tensor, shape and value, and its metadata."""
    from safetensors import safe_open
    from safetensors.numpy import load_file

    rng = np.random.default_rng(0)
    tensors = {"b.weight": rng.normal(size=(3, 5)), "a": rng.normal(size=(7,)), "c": np.zeros((2, 1, 4))}
    path = tmp_path / "t.safetensors"
    tiny_hf.write_safetensors(path, tensors, {"format": "pt", "name": "x"})
    back = load_file(str(path))
    assert set(back) == set(tensors)
    for k, v in tensors.items():
        assert back[k].dtype == np.float32 and back[k].shape == v.shape
        assert np.array_equal(back[k], v.astype(np.float32))
    with safe_open(str(path), "np") as f:
        assert f.metadata() == {"format": "pt", "name": "x"}
