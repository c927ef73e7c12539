"""Every server family's wire format, both sides at once: its profile's requests answered by the
stand-in's answer in the same shape (in process, no socket), read back by the profile.

One test per family module (:data:`specproof.properties.endpoint.families.FAMILIES`), so a family
added there is tested here without a line written: the law its recipe reads is the stand-in
model's law under the setting (SGLang's order for SGLang), a generation read back is the one the
stand-in drew (the same seed twice, the same tokens; another seed, others), with the family's
counters where it has them and reported probabilities that are the law's where it reports them.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from specproof.properties.endpoint import families
from specproof.properties.endpoint.families.wire import token_texts
from specproof.properties.endpoint.standin import StandIn
from specproof.properties.engine.contract import Sampling

SETTINGS = (Sampling(1.0), Sampling(0.7), Sampling(0.7, top_k=3), Sampling(1.0, top_p=0.8))
PROMPT = (0, 6)


@pytest.fixture(scope="module")
def standin():
    with StandIn(loop="laws", listen=False) as si:
        yield si


def post(si: StandIn, path: str, body: dict) -> dict:
    status, answer = si.respond("POST", path, json.dumps(body).encode())
    assert status == 200, answer
    return json.loads(json.dumps(answer))  # what crosses the wire: JSON


@pytest.mark.parametrize("name", list(families.FAMILIES))
def test_a_family_reads_back_what_its_stand_in_answers(name, standin):
    module = families.module(name)
    if not getattr(module, "ROUTES", None):
        pytest.skip(
            f"{name} has no stand-in: audited against the real server (tests/test_endpoint_llamacpp.py)"
        )
    si, vocab = standin, standin.model.vocab
    profile = families.make_profile(name, token_texts(vocab))
    for s in SETTINGS:
        path, body = profile.law_request(PROMPT, s, vocab)
        law = np.asarray(profile.read_law(post(si, path, body), s, vocab))
        want = si.model.law(PROMPT, s, joint=name == "sglang")
        assert np.abs(law - want).max() < 1e-12, (name, s.label)
        path, body = profile.generation(PROMPT, 4, 11, s, report=True)
        first = profile.read_generation(post(si, path, body), report=True)
        again = profile.read_generation(post(si, path, body), report=True)
        other = profile.read_generation(post(si, *profile.generation(PROMPT, 4, 12, s, report=False)), False)
        assert first.tokens == again.tokens and len(first.tokens) == 4
        assert all(0 <= x < vocab for x in first.tokens + other.tokens)
        if profile.counters:
            assert (
                first.drafted is not None and first.accepted is not None and first.drafted >= first.accepted
            )
        else:
            assert first.drafted is None
        if profile.reports and profile.reports_checkable(s):
            context = PROMPT
            for x, p in zip(first.tokens, first.reported or ()):
                assert (
                    p is not None
                    and abs(p - float(si.model.law(context, s, joint=name == "sglang")[x])) < 1e-9
                )
                context += (x,)
    path_of = [profile.generation(PROMPT, 4, k, SETTINGS[0], False) for k in range(20)]
    seeds = {profile.read_generation(post(si, *pb), False).tokens for pb in path_of}
    assert len(seeds) > 1  # the seed is sent where the family takes it


def test_every_family_module_names_its_profile_and_is_listed():
    for name, (module, cls) in families.FAMILIES.items():
        profile = families.profile_class(name)
        assert profile.name == name and profile.__name__ == cls and profile.recipe
        assert families.module(name).__name__.endswith("." + module)
