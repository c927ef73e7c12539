"""The tiny EAGLE-1 head that vLLM's ``"method": "eagle"`` serves beside the tiny target
(properties/servers/tiny_hf.py): numpy alone, so it runs everywhere; the vLLM tier serves it
(tests/test_vllm_cpu.py)."""

from __future__ import annotations

import json

import numpy as np

from specproof.properties.servers import gguf_models as gm
from specproof.properties.servers import tiny_hf


def test_the_head_keeps_the_hidden_state_and_the_drafts_last_layer():
    tw = gm.target_weights(0)
    dw = gm.draft_weights(tw, 0)
    t = tiny_hf.eagle_tensors(dw)
    h = gm.SPEC.n_embd
    # fc maps [embedding; hidden] to the hidden width: the embedding dropped, the hidden state kept
    assert t["fc.weight"].shape == (h, 2 * h)
    assert not t["fc.weight"][:, :h].any() and np.array_equal(t["fc.weight"][:, h:], np.eye(h))
    # one layer, the draft's last, without the input norm EAGLE's first layer does not have
    last = gm.SPEC.n_layer - 1
    full = tiny_hf.hf_tensors(dw)
    layer = {k: v for k, v in t.items() if k != "fc.weight"}
    assert layer and all(k.startswith("layers.0.") for k in layer)
    assert "layers.0.input_layernorm.weight" not in layer
    for k, v in layer.items():
        assert np.array_equal(v, full[k.replace("layers.0.", f"model.layers.{last}.")])
    # no embedding, no output matrix: vLLM shares the target's
    assert not any("embed" in k or "lm_head" in k for k in t)


def test_the_folder_is_a_one_layer_llama_config(tmp_path):
    folder = tiny_hf.write_eagle_hf(tmp_path / "eagle", gm.draft_weights(gm.target_weights(0), 0), "eagle")
    cfg = json.loads((folder / "config.json").read_text())
    assert cfg["num_hidden_layers"] == 1 and cfg["architectures"] == ["LlamaForCausalLM"]
    assert cfg["vocab_size"] == len(gm.VOCAB) and (folder / "model.safetensors").stat().st_size > 0
