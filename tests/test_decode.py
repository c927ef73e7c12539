"""The decoding loop on transformer targets, and the ``specproof e2e`` command.

The loop with a KV cache and tree forwards uses the tree forward's laws, keeps a cache equal
to one rebuilt from the emitted tokens, and emits more than one token per target forward with
a draft model. Every proposer's exactness, typical flagging and greedy equality over several
steps: tests/test_proposers.py.
"""

from __future__ import annotations

import numpy as np
import torch

from specproof.reference.decode import decode, e2e_models
from specproof.reference.proposers import PROPOSERS, NgramLM
from specproof.reference.transformer import KVCache, TransformerLM

SMALL, BIG = e2e_models()  # the targets `specproof e2e` uses


def test_the_loop_uses_the_tree_forward_laws_and_a_draft_model_speeds_it_up():
    target = TransformerLM(BIG)
    out = decode(
        BIG,
        PROPOSERS["draft"].make_drafter(BIG),
        "iid_chain",
        "token",
        (-1, 0, 1, 2),
        (3, 4),
        40,
        np.random.default_rng(1),
    )
    assert out.mean_emitted > 1.0  # at least some drafts accepted over 40 steps
    # the committed cache equals one rebuilt from the emitted tokens: continue both
    cache = KVCache()
    BIG.forward(torch.tensor(out.tokens), cache)
    logits, _ = BIG.forward(torch.tensor([0]), cache)
    law = torch.softmax(logits[-1], -1)
    assert torch.allclose(
        law, torch.tensor(target.law(tuple(out.tokens) + (0,)), dtype=torch.float64), atol=1e-10
    )


def test_ngram_lookup_continues_the_last_match():
    lm = NgramLM(8, max_n=2)
    assert lm.lookup((1, 2, 3, 1, 2)) == 3  # "1 2" was followed by 3
    assert lm.lookup((4, 5, 6)) == 6  # no earlier match: repeat the last token
    assert lm.law((1, 2, 1))[2] == 1.0


def test_e2e_command_exit_codes_and_json(tmp_path):
    import json

    from specproof.properties.cli import main

    path = tmp_path / "e2e.json"
    args = ["e2e", "--proposer", "draft", "--steps", "4", "--runs", "40", "--json", str(path)]
    assert main(args) == 0
    report = json.loads(path.read_text())
    assert report["lossless"] and report["exact_check"]["lossless"] and report["sampled"]["steps"] == 4
    assert report["statistical"]["runs"] == 40 and report["statistical"]["lossless"]
    assert report["sampled"]["closed_form_iid"] is not None  # token rule on a chain
    assert main(["e2e", "--proposer", "ngram", "--rule", "typical", "--steps", "2", "--runs", "0"]) == 1
    # EAGLE's top-k drafts judged against q by RRS: not declared exact, and found lossy
    topk = ["e2e", "--proposer", "eagle1", "--process", "topk_siblings", "--steps", "2", "--runs", "0"]
    assert main(topk) == 1
    for bad in (
        ["e2e", "--proposer", "medusa9"],
        ["e2e"],
        ["e2e", "--proposer", "medusa", "--rule", "block"],  # chains only
        ["e2e", "--proposer", "medusa", "--process", "iid_chain"],
        ["e2e", "--proposer", "draft", "--rule", "nope"],
        ["e2e", "--proposer", "draft", "--steps", "0"],
        ["e2e", "--proposer", "draft", "--runs", "-1"],
    ):
        assert main(bad) == 4, bad  # usage errors exit 4
