"""mistral.rs (tier of its own: skipped unless ``specproof mistralrs install`` made its
environment and its wheel runs on this CPU): the runners on the project's tiny pair, each through
the engine audit, and what the adapter works around, checked exactly.

Every expectation here is what one release was seen to do: mistral.rs 0.6.0, the pinned release
(``mistralrs_env.VERSION``, :data:`PINNED`). Each is read for the pinned release from the
adapter's table beside it (properties/engine/adapters/mistralrs.py: ``DRAFT_VERDICT``,
``EXTRA_TOKENS``, ``PANICS_ON_LENGTH_CHANGE``, ``LOGIT_BIAS_APPLIED``, each with its 0.6.0
entry); under a pin without an entry the test fails, naming the table to measure again, rather
than hold a new release to 0.6.0's bugs. On 0.6.0:

* without speculation the law holds (the control);
* with the tiny draft model every sample is the target's greedy path, at T = 1 and 0.7 alike:
  ``contract_violation [ignores_seed]`` whose detail names "sampling replaced by greedy decoding",
  and the path is the numpy law's argmax path (exact; ``DRAFT_VERDICT``);
* a completion request for max_tokens = k answers k + 1 tokens, with and without the draft model
  (``EXTRA_TOKENS``);
* the speculative runner panics (and its process is gone) when the length asked changes from one
  request to the next, most of the time (``PANICS_ON_LENGTH_CHANGE``);
* ``logit_bias`` is accepted and not applied (a bias of -100 or +100 on a token leaves its share
  where it was; a two-sided test on counts, far from its threshold at these sizes;
  ``LOGIT_BIAS_APPLIED``).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from tier_helpers import closing_workers, tier_marks

from specproof.properties.engine.adapters import mistralrs as adapter
from specproof.properties.engine.audit import EngineAuditConfig, audit_engine
from specproof.properties.engine.registry import resolve_engine
from specproof.properties.oracle.findings import greedy_replacement_tv
from specproof.properties.servers import gguf_models as gm
from specproof.properties.servers import mistralrs_env
from specproof.properties.verdicts import Verdict

OK, WHY = mistralrs_env.usable()
#: a CPU without GFNI cannot run the wheel: the only reason the tier may skip under .ci/run
pytestmark = tier_marks(__file__, OK, WHY, platform=mistralrs_env.cpu_cannot_run())


_closed_workers = closing_workers("mistralrs")

#: the release installed and tested; every expectation below is read for it
PINNED = mistralrs_env.VERSION


def seen(table, what: str):
    """``table``'s entry for :data:`PINNED` (the adapter's tables: what each release was seen to
    do); a pin without one fails the test, naming what to measure again."""
    if PINNED not in table:
        pytest.fail(f"{what}: recorded for mistralrs {', '.join(table)}; the pin is {PINNED}: measure it")
    return table[PINNED]


T = {"top_k": None, "top_p": None, "min_p": None}


def _generate(mode: str, tokens: int, n: int, temperature: float = 1.0, **extra):
    return adapter._worker(mode).request(
        {
            "op": "generate",
            "prompt": [1, 2],
            "tokens": tokens,
            "n": n,
            "sampling": {"temperature": temperature, **T},
            **extra,
        }
    )["samples"]


def test_the_plain_runner_keeps_the_law():
    r = audit_engine(resolve_engine("mistralrs.plain"), EngineAuditConfig(samples=300, seed=0))
    assert r.verdict == Verdict.PASS, r.summary()
    assert r.speculation.status == "unobservable"


def test_with_a_draft_model_sampling_is_replaced_by_greedy_decoding():
    expected = seen(adapter.DRAFT_VERDICT, "the draft runner's verdict")  # 0.6.0: contract_violation
    assert expected == "contract_violation", f"mistralrs {PINNED} is declared {expected}: test that instead"
    r = audit_engine(resolve_engine("mistralrs.draft"), EngineAuditConfig(samples=300, seed=0))
    assert r.verdict == Verdict.CONTRACT_VIOLATION and r.agrees, r.summary()
    v = r.violation or {}
    assert v.get("kind") == "ignores_seed" and "sampling replaced by greedy decoding" in v["detail"], v
    # every sample at T = 1 and 0.7 is the argmax path of the exact law after the prompt
    w = gm.target_weights(0)
    path: list[int] = []
    for _ in range(adapter.TOKENS):
        path.append(int(np.argmax(gm.next_token_law(w, [1, 2, *path], 1.0))))
    for t in (1.0, 0.7):
        got = {tuple(s["tokens"]) for s in _generate("draft", adapter.TOKENS - 1, 8, t)}
        assert got == {tuple(path)}, (t, got, path)
    # the reproduction: the joint law is a point mass on that path, TV 1 - P(path) from the target's
    tv = greedy_replacement_tv(lambda ctx: gm.next_token_law(w, list(ctx), 1.0), (1, 2), adapter.TOKENS)
    p = math.prod(gm.next_token_law(w, [1, 2, *path[:i]], 1.0)[x] for i, x in enumerate(path))
    assert tv == pytest.approx(1 - p) and tv > 0.99


def _answers(mode: str, lengths: tuple[int, ...]) -> list[list[int]]:
    """In one fresh runner, 3 requests after one prompt for each max_tokens in ``lengths``, in
    order: the lengths of the answers that ended by length (one that ended on its end of
    sequence is shorter)."""
    with mistralrs_env.Worker(mode) as w:
        out = []
        for k in lengths:
            req = {
                "op": "generate",
                "prompt": [1, 2],
                "tokens": k,
                "n": 3,
                "sampling": {"temperature": 1.0, **T},
            }
            out.append(
                [len(s["tokens"]) for s in w.request(req)["samples"] if s["finish_reason"] == "length"]
            )
    return out


@pytest.mark.parametrize("mode", ["plain", "draft"])
def test_max_tokens_k_answers_k_plus_one_tokens(mode):
    extra = seen(adapter.EXTRA_TOKENS, "tokens beyond max_tokens")  # 0.6.0: 1
    for k in (1, 2, 3, 6):  # a runner a length: the speculative one dies when the length changes (below)
        (got,) = _answers(mode, (k,))
        assert set(got) <= {k + extra}, (mode, k, got)
    assert adapter.max_tokens_for(adapter.TOKENS) == adapter.TOKENS - extra  # what the audit asks


def test_the_speculative_runner_panics_when_the_asked_length_changes():
    """Requests for 1, 2, 3 and 6 tokens after one prompt, twice over, in a fresh runner: with the
    draft model the runner panics (speculative.rs: an unwrap of None) and its process is gone in
    9 of the 10 runs seen here; the same requests without the draft model always answer, and
    requests of one length (the audit's) never killed it in 60. Up to 8 fresh runners are tried,
    so the test misses the panic only if each of 8 survives (about 1e-8 at the rate seen)."""
    assert seen(adapter.PANICS_ON_LENGTH_CHANGE, "the speculative runner's panic"), f"mistralrs {PINNED}"
    pattern = (1, 2, 3, 6, 1, 2, 3, 6)
    died = 0
    for _ in range(8):
        try:
            _answers("draft", pattern)
        except mistralrs_env.MistralRSError as e:
            assert "exited" in str(e)
            died += 1
            break
    assert died == 1
    assert len(_answers("plain", pattern)) == len(pattern)


def test_logit_bias_is_accepted_and_not_applied():
    """Token 13 ('m') drawn at T = 1 with biases -100 and +100: applied, its share would be 0 and
    nearly 1; it stays near its share without bias. Two-sided z-test at 1e-6 on 400 tokens each."""
    assert not seen(adapter.LOGIT_BIAS_APPLIED, "logit_bias applied"), f"mistralrs {PINNED} applies it"
    shares = {}
    for bias in (-100.0, 100.0):
        got = [x for s in _generate("plain", 4, 80, logit_bias={13: bias}) for x in s["tokens"]]
        shares[bias] = (sum(x == 13 for x in got), len(got))
    for bias, (hits, n) in shares.items():
        assert 0.03 < hits / n < 0.5, (bias, hits, n)  # neither 0 nor about 1
    (a, na), (b, nb) = shares[-100.0], shares[100.0]
    pooled = (a + b) / (na + nb)
    z = abs(a / na - b / nb) / math.sqrt(pooled * (1 - pooled) * (1 / na + 1 / nb))
    assert z < 4.9, shares  # alpha about 1e-6: the two biases give one share
