"""The engine audit (properties/engine/audit.py) on specproof's own loops (properties/engine/loops.py).

Every statistical test here runs at a fixed sample size with fixed seeds (the audit's seeds
derive from ``seed``; torch runs single-threaded inside the audit), so its verdicts are
deterministic and cannot flake; each names its alpha. Power, stated where it matters: at
``alpha`` 1e-3 and 150 samples per case, the exact-rule smoke runs detect a TV of about 0.35 on
their cells (power 0.99); the mutant runs below catch their deviation with the samples given
(measured in docs/measurements/engine-audit-reference.md at the audit's defaults).

* the reference loop passes for every exact rule (one engine per rule, one case each);
* the mutant loops fail: drafts made greedily but verified against the draft's soft law, a
  drafter fed the hidden state one position late, a KV cache not rolled back after a rejection,
  temperature applied to the target only; and the loops that look alike but are correct pass;
* contract faults are named: wrong length, ids out of range, nondeterminism under a seed, a seed
  that is ignored;
* calibration: 100 seeded audits of an exact engine at alpha 0.01 give at most 5 false alarms
  (a larger count has probability below 6e-4 under a calibrated test);
* the CLI hooks, the report, the JSON, and the pytest plugin.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os

import numpy as np
import pytest

from specproof.properties.engine import loops as L
from specproof.properties.engine import registry as E
from specproof.properties.engine.audit import EngineAuditConfig, audit_engine
from specproof.properties.engine.contract import GREEDY, T07, T1, EngineSpec, Sampling
from specproof.properties.engine.loops import DirectEngine, decode_without_rollback, engine_target
from specproof.properties.engine.registry import resolve_engine, with_options
from specproof.properties.engine.report import report_blocks, write_report
from specproof.properties.verdicts import Verdict
from specproof.reference.decode import decode
from specproof.reference.errors import BadParameterError
from specproof.reference.models import ToyLM
from specproof.reference.processes import PROCESSES
from specproof.reference.proposers.draft_model import draft_model
from specproof.reference.rules import RULES

ALPHA = 1e-3
E.ensure_registered()  # the registry, for the parametrized sweeps below


def _audit(name: str, prompts, samplings, samples: int, seed: int = 0, looks: int = 4):
    spec = with_options(resolve_engine(name), prompts=prompts, samplings=samplings)
    return audit_engine(spec, EngineAuditConfig(alpha=ALPHA, samples=samples, seed=seed, looks=looks))


# --------------------------------------------------------------------------- sampling laws


def test_sampling_law_follows_temperature_top_k_and_top_p():
    logits = [2.0, 1.0, 1.0, 0.0, -1.0]
    p = np.exp(logits) / np.exp(logits).sum()
    assert np.allclose(Sampling(1.0).law(logits), p)
    q = np.exp(np.array(logits) / 0.5)
    assert np.allclose(Sampling(0.5).law(logits), q / q.sum())
    # top-k keeps the k largest; a tie at the k-th value keeps both tied tokens
    k2 = Sampling(1.0, top_k=2).law(logits)
    assert k2[3] == k2[4] == 0 and k2[1] == k2[2] > 0
    # top-p: a token is kept while the mass ranked above it is below p
    above = np.concatenate([[0], np.cumsum(np.sort(p)[::-1])[:-1]])
    want = (above < 0.7).sum()
    assert np.count_nonzero(Sampling(1.0, top_p=0.7).law(logits)) == want
    assert Sampling(0.0).law(logits) == [1.0, 0.0, 0.0, 0.0, 0.0]
    assert GREEDY.label == "greedy" and Sampling(0.7, top_k=3).label == "T=0.7,top_k=3"


def test_sampling_rejects_bad_settings_and_ambiguous_top_p():
    with pytest.raises(BadParameterError, match="temperature"):
        Sampling(-1.0)
    with pytest.raises(BadParameterError, match="top_k"):
        Sampling(1.0, top_k=0)
    with pytest.raises(BadParameterError, match="top_p"):
        Sampling(1.0, top_p=1.5)
    # p = (0.5, 0.25, 0.25): a top-p of 0.75 falls exactly on a cumulative mass
    with pytest.raises(BadParameterError, match="ambiguous"):
        Sampling(1.0, top_p=0.75).law([math.log(2), 0.0, 0.0])


# --------------------------------------------------------------------------- the loops


def test_the_hand_written_loop_with_rollback_is_the_reference_loop_token_for_token():
    """mutant.no_kv_rollback differs from reference/decode.py by the rollback alone."""
    target = engine_target()
    draft = draft_model(target)
    for seed in range(4):
        ref = decode(
            target,
            draft,
            "iid_chain",
            "token",
            (-1, 0, 1, 2),
            (0, 6),
            6,
            np.random.default_rng(seed),
            temperature=0.7,
            until=6,
        )
        mine = decode_without_rollback(
            target,
            draft,
            PROCESSES["iid_chain"],
            "token",
            (-1, 0, 1, 2),
            (0, 6),
            6,
            np.random.default_rng(seed),
            0.7,
            rollback=True,
        )
        assert mine == ref.tokens[2:][:6]


def test_registry_lists_every_proposer_and_exact_rule_and_the_mutants():
    rows = {r["name"]: r for r in E.list_engines()}
    from specproof.reference.proposers import PROPOSERS

    for p in PROPOSERS.values():
        for rule in p.exact_rules():
            assert rows[f"reference.{p.name}.{rule}"]["expect"] == "pass"
    for name, m in L.MUTANT_DOCS.items():
        assert rows[name]["expect"] == m.expect
    assert rows["reference.direct"]["available"]


EXACT_RULE_ENGINES = [
    ("reference.draft.token", T1),
    ("reference.draft.block", T07),
    ("reference.ngram.strict", T1),
    ("reference.draft.greedy", GREEDY),
    ("reference.eagle1.rrs", T1),
    ("reference.medusa.mss", T07),
    ("reference.eagle2.target_only", T1),
    ("reference.mtp.traversal", T07),
]


def test_every_exact_rule_is_covered_by_the_smoke_runs():
    covered = {name.rsplit(".", 1)[1] for name, _ in EXACT_RULE_ENGINES}
    exact = {r.name for r in RULES.values() if r.exact_for}
    assert exact <= covered, exact - covered


@pytest.mark.parametrize(("name", "sampling"), EXACT_RULE_ENGINES, ids=[n for n, _ in EXACT_RULE_ENGINES])
def test_the_reference_loop_passes_for_every_exact_rule(name, sampling):
    res = _audit(name, [(5, 2, 5, 2)], [sampling], samples=150)
    assert res.verdict == Verdict.PASS, res.summary()
    assert res.samples == 150 and res.cases[0].n == 150


@pytest.mark.parametrize(
    ("name", "prompt", "sampling", "samples"),
    [
        ("mutant.greedy_draft_soft_law", (0, 6), T1, 300),
        ("mutant.no_kv_rollback", (5, 2, 5, 2), T07, 700),
        ("mutant.temperature_target_only", (0, 6), T07, 700),
        ("mutant.late_features", (5, 2, 5, 2), T07, 700),
    ],
)
def test_the_mutant_loops_are_flagged_lossy_with_a_witness(name, prompt, sampling, samples):
    res = _audit(name, [prompt], [sampling], samples=samples)
    assert res.verdict == Verdict.LOSSY, res.summary()
    w = res.witness
    assert w is not None and w.pvalue <= ALPHA
    assert "deviat" in res.witness_text() or "probability 0" in res.witness_text()
    assert w.test is not None and w.test.conditional is not None and w.test.conditional.witness() is not None
    # the verdict states the size of what it saw, beside the noise an exact engine shows
    assert w.test.seen is not None and w.test.floor is not None
    assert w.test.seen.estimate > w.test.floor and "plug-in TV" in res.witness_text()
    assert "plug-in TV" in res.short_witness()


def test_temperature_on_the_target_only_is_harmless_at_temperature_one():
    """The one-sided temperature mutant is exact at T = 1: why the audit samples two settings."""
    res = _audit("mutant.temperature_target_only", [(0, 6)], [T1], samples=150)
    assert res.verdict == Verdict.PASS, res.summary()


@pytest.mark.parametrize(
    "name",
    ["alternative.late_features_consistent", "alternative.kv_rollback", "alternative.consistent_temperature"],
)
def test_loops_that_look_wrong_but_are_lossless_pass(name):
    res = _audit(name, [(5, 2, 5, 2)], [T07], samples=150)
    assert res.verdict == Verdict.PASS, res.summary()


@pytest.mark.parametrize(
    ("name", "kind"),
    [
        ("mutant.short_output", "length"),
        ("mutant.out_of_range", "out_of_range"),
        ("mutant.global_state", "nondeterministic"),
        ("mutant.fixed_seed", "ignores_seed"),
    ],
)
def test_contract_faults_are_violations_named_by_kind(name, kind):
    res = _audit(name, None, None, samples=50)
    assert res.verdict == Verdict.CONTRACT_VIOLATION and res.exit_code == 2
    assert res.violation is not None and res.violation["kind"] == kind, res.summary()


def test_sampling_replaced_by_greedy_decoding_is_named():
    """An engine that decodes greedily whatever the setting says ignores its seeds, and the
    violation says why: every sample is the law's argmax path (mistral.rs 0.6.0 with a draft
    model on a CPU). An engine that ignores its seed another way is not called greedy."""

    class Greedy(DirectEngine):
        def generate(self, prompt_ids, max_new_tokens, seed):
            out: list[int] = []
            for _ in range(max_new_tokens):
                law = self.target_law(tuple(prompt_ids) + tuple(out))
                out.append(max(range(self.vocab), key=lambda x: (law[x], -x)))
            return out

    class FixedSeed(DirectEngine):
        def generate(self, prompt_ids, max_new_tokens, seed):
            return super().generate(prompt_ids, max_new_tokens, 12345)

    lm = ToyLM(6, 3, styles=("random",), exact=False)
    texts = {}
    for cls in (Greedy, FixedSeed):
        spec = EngineSpec("x", "user", "", lambda s, c=cls: c(lm), 6, ((0,),), (T1,), tokens=3)
        res = audit_engine(spec, EngineAuditConfig(samples=20))
        assert res.verdict == Verdict.CONTRACT_VIOLATION and res.violation["kind"] == "ignores_seed"
        texts[cls] = res.violation["detail"]
    assert texts[Greedy].startswith("sampling replaced by greedy decoding")
    assert not texts[FixedSeed].startswith("sampling replaced")


def test_an_engine_that_raises_or_returns_a_bad_law_is_a_violation():
    class Raises(DirectEngine):
        def generate(self, prompt_ids, max_new_tokens, seed):
            raise RuntimeError("boom")

    class BadLaw(DirectEngine):
        def target_law(self, context):
            return [0.5] * self.vocab

    lm = ToyLM(4, 1, exact=False)
    for cls, kind in ((Raises, "exception"), (BadLaw, "target_law")):
        spec = EngineSpec("x", "user", "", lambda s, c=cls: c(lm), 4, ((0,),), (T1,), tokens=2)
        res = audit_engine(spec, EngineAuditConfig(samples=20))
        assert res.verdict == Verdict.CONTRACT_VIOLATION and res.violation["kind"] == kind


# --------------------------------------------------------------------------- statistics


def test_false_alarms_of_exact_engines_are_at_most_alpha():
    """100 seeded audits (2 looks, Holm over 2 cases, 120 samples each) of a direct sampler at
    alpha 0.01: at most 5 false alarms; Bin(100, 0.01) exceeds 5 with probability below 6e-4.
    (The 300-run measurements, on the reference loop too: docs/measurements/engine-audit-calibration.md.)"""
    lm = ToyLM(6, 3, styles=("random", "peaked", "sparse"), exact=False)
    spec = EngineSpec(
        "toy.direct", "user", "", lambda s: DirectEngine(lm), 6, ((0,), (1, 2)), (T1,), tokens=3
    )
    alarms = sum(
        audit_engine(spec, EngineAuditConfig(alpha=0.01, samples=120, seed=s, looks=2, threads=None)).verdict
        == Verdict.LOSSY
        for s in range(100)
    )
    assert alarms <= 5, alarms


def test_the_plan_comes_from_alpha_tv_power_and_cells_and_greedy_needs_few_samples():
    spec = with_options(resolve_engine("reference.draft.greedy"), prompts=[(0, 6)])
    res = audit_engine(spec, EngineAuditConfig(tv=0.2, power=0.99))
    # a point mass: any deviation of per-token TV 0.2 at any of its M = 4 tokens is a hard failure
    assert res.cases[0].point_mass and res.cases[0].planned == math.ceil(math.log(0.01) / (4 * math.log(0.8)))
    assert res.verdict == Verdict.PASS and "point mass" in res.plan_text
    from specproof.properties.audit.stats import plan_samples
    from specproof.properties.tokens.power import plan_tokens

    spec = with_options(resolve_engine("mutant.greedy_draft_soft_law"), prompts=[(0, 6)], samplings=[T1])
    res = audit_engine(spec, EngineAuditConfig(alpha=1e-4, tv=0.3, looks=4, max_cells=16, test="cells"))
    assert res.cases[0].planned == plan_samples(0.3, 1e-4 / 4 / 2, 0.99, 15)  # the cells test alone
    assert res.verdict == Verdict.LOSSY and res.cases[0].n < res.cases[0].planned  # stopped at an early look
    res = audit_engine(spec, EngineAuditConfig(alpha=1e-4, tv=0.05))  # both tests: the token plan, in samples
    assert res.cases[0].planned == math.ceil(
        plan_tokens(0.05, 1e-4 / 2, 0.99, 1, draft=True, blocks=True) / 4
    )


def test_a_budget_too_small_for_the_plan_ends_underpowered_never_pass():
    spec = with_options(resolve_engine("reference.direct"), prompts=[(0, 6)], samplings=[T1])
    # a plan of about 590,000 samples at a per-token TV of 0.003: far past 1 s on any machine
    res = audit_engine(spec, EngineAuditConfig(tv=0.003, budget_seconds=1.0))
    assert res.verdict == Verdict.UNDERPOWERED and res.exit_code == 3
    assert res.cases[0].budget_limited and "budget" in res.plan_text
    assert "ran short" in res.summary()


# --------------------------------------------------------------------------- output and hooks


def test_json_report_and_cli(tmp_path, capsys):
    from specproof.properties.cli import build_parser, main
    from specproof.properties.cli.audit import engine_config

    out_json, out_md = tmp_path / "e.json", tmp_path / "e.md"
    argv = ["audit", "engine", "mutant.greedy_draft_soft_law", "--prompt", "0 6", "--temperature", "1"]
    argv += ["--samples", "200", "--json", str(out_json), "--report", str(out_md), "--progress", "off"]
    argv += ["--test", "cells"]  # the joint law's witness: the next token at a position
    config = engine_config(build_parser().parse_args(argv))
    assert (config.alpha, config.tv, config.max_cells) == (1e-4, 0.01, 64)  # the engine defaults
    assert main(argv) == 1
    printed = capsys.readouterr().out
    assert "cells test of the joint law" in printed and "LOSSY" in printed
    doc = json.loads(out_json.read_text())
    assert doc["verdict"] == "lossy" and doc["witness"]["case"]["prompt"] == [0, 6]
    assert "Next token at position" in out_md.read_text()
    write_report(str(tmp_path / "e.html"), [])  # an empty report is still a page
    assert (tmp_path / "e.html").read_text().startswith("<!doctype html>")
    assert main(["audit", "engine", "no.such.engine"]) == 4
    assert main(["audit", "engine", "reference.direct", "--prompt", "a b"]) == 4
    explicit = build_parser().parse_args(["audit", "engine", "reference.direct", "--alpha", "1e-6"])
    assert engine_config(explicit).alpha == 1e-6
    assert report_blocks([])[0] == ("h1", "specproof engine audit")


def test_the_report_states_each_test_in_its_own_unit(tmp_path):
    """A token-test audit's report gives the token test's e-value, tokens and per-token TVs (as
    the JSON has them) and no joint-TV column; a cells-test audit's gives the joint TV and
    explains unresolved and uncovered, and no token column; the sign-off names the unit too."""
    from specproof.properties.engine.signoff import signoff

    def tables(r):
        return [b[1] for b in report_blocks([r]) if b[0] == "table"]

    spec = E.resolve_engine("reference.direct")
    tok = audit_engine(spec, EngineAuditConfig(samples=40, report_samples=0, test="tokens"))
    doc = tok.to_json()
    power = next(t for t in tables(tok) if "token test e-value (1/alpha)" in t[0])
    head, row = power[0], power[1][0]
    assert not any("joint" in h for h in head)
    e, alpha = math.exp(doc["token_test"]["log_wealth"]), doc["token_test"]["alpha"]
    assert row[head.index("token test e-value (1/alpha)")] == f"{e:.3g} ({1 / alpha:.3g})"
    assert row[head.index("tokens scored")] == f"{sum(c.observed_tokens for c in tok.cases):,}"
    pooled = doc["token_test"]["pooled"]["detects_per_token_tv"]
    assert row[head.index("per-token TV detected: sharpening / argmax")].startswith(
        f"{pooled['mean']:.3g} / {pooled['greedy']:.3g} every case pooled"
    )
    cases = next(t for t in tables(tok) if t[0][0] == "case")
    assert "per-token TV detected: sharpening / argmax / any" in cases[0] and "unresolved" not in cases[0]
    assert "per-token TV" in next(i.detail for i in signoff(tok) if i.question.startswith("the law holds"))

    cells = audit_engine(spec, EngineAuditConfig(samples=200, report_samples=0, test="cells"))
    power = next(t for t in tables(cells) if "samples" in t[0] and "engine" in t[0] and "s" in t[0])
    assert "joint TV detected, cells test (worst case)" in power[0]
    assert not any("token" in h for h in power[0])
    assert any(b[0] == "p" and b[1].startswith("unresolved:") for b in report_blocks([cells]))
    assert "joint TV" in next(i.detail for i in signoff(cells) if i.question.startswith("the law holds"))
    write_report(str(tmp_path / "r.html"), [tok, cells])
    assert "per-token TV detected" in (tmp_path / "r.html").read_text()


def test_the_tv_flags_name_their_unit(tmp_path, capsys):
    """--token-tv and --joint-tv are --tv in the unit the plan reads (per token for the token test,
    joint for --test cells), the JSON says which; given in the other unit, or to an audit that
    has no such unit, they are refused naming the spelling to use (exit 4)."""
    from specproof.properties.cli import build_parser, main
    from specproof.properties.cli.audit import engine_config

    base = [
        "audit",
        "engine",
        "reference.direct",
        "--samples",
        "40",
        "--report-samples",
        "0",
        "--progress",
        "off",
    ]
    out = tmp_path / "a.json"
    assert engine_config(build_parser().parse_args([*base, "--token-tv", "0.3"])).tv == 0.3
    assert main([*base, "--token-tv", "0.3", "--test", "tokens", "--json", str(out)]) == 0
    assert json.loads(out.read_text())["tv_unit"] == "per token"
    assert main([*base, "--joint-tv", "0.3", "--test", "cells", "--json", str(out)]) in (0, 3)  # 40 samples
    doc = json.loads(out.read_text())
    assert (doc["tv"], doc["tv_unit"]) == (0.3, "joint")
    capsys.readouterr()
    refused = [
        ([*base, "--joint-tv", "0.3"], "give --token-tv"),
        ([*base, "--token-tv", "0.3", "--test", "cells"], "give --joint-tv"),
        (["audit", "chain", "torch.token", "--token-tv", "0.3"], "the verifier audit takes --tv"),
        (["llamacpp", "tokens", "--joint-tv", "0.1"], "give --token-tv"),
        (["llamacpp", "table", "--token-tv", "0.01"], "give --joint-tv"),
    ]
    for argv, why in refused:
        assert main(argv) == 4, argv
        assert why in capsys.readouterr().err, argv
    assert build_parser().parse_args(["calibrate", "--tokens", "--token-tv", "0.02"]).tv == 0.02


def test_user_engines_resolve_from_a_file(tmp_path):
    path = tmp_path / "my_engine.py"
    path.write_text(
        "from specproof.properties.engine.loops import DirectEngine\n"
        "from specproof.reference.models import ToyLM\n"
        "def make(temperature=1.0, top_k=None, top_p=None):\n"
        "    return DirectEngine(ToyLM(5, 2, exact=False))\n"
        "INSTANCE = make()\n"
    )
    spec = resolve_engine(f"{path}:make")
    assert spec.vocab == 5 and spec.group == "user" and len(spec.samplings) == 2
    spec = resolve_engine(f"{path}:INSTANCE")
    assert len(spec.samplings) == 1
    with pytest.raises(E.EngineTargetError, match="no attribute"):
        resolve_engine(f"{path}:missing")


def test_pytest_plugin_adds_one_item_per_case_and_fails_a_mutant(pytester):
    pytester.makepyfile("def test_nothing():\n    pass\n")
    ok = pytester.runpytest(
        "--specproof-engine",
        "reference.draft.greedy",
        "--specproof-engine-samples",
        "5",
        "-q",
    )
    ok.assert_outcomes(passed=3)  # two greedy cases and the file's test
    bad = pytester.runpytest(
        "--specproof-engine",
        "mutant.short_output",
        "--specproof-engine-prompt",
        "0 6",
        "--specproof-engine-temperature",
        "1",
        "-q",
    )
    bad.assert_outcomes(passed=1, failed=1)
    assert "length" in bad.stdout.str()


def test_pytest_fixture_audits_an_engine(pytester):
    pytester.makepyfile(
        "def test_direct(specproof_engine_audit):\n"
        "    r = specproof_engine_audit(\n"
        "        'reference.direct', prompts=[(0, 6)], temperatures=[1.0], samples=60\n"
        "    )\n"
        "    assert r.verdict == 'pass', r.summary()\n"
    )
    pytester.runpytest("-q").assert_outcomes(passed=1)


def test_engine_findings_reproduce_in_the_reference():
    """The HF findings' mechanisms as one-line changes of exact reference processes
    (properties/oracle/findings.py), checked by the exact oracle (proofs_notes/thirdparty.md)."""
    from fractions import Fraction

    from specproof.properties.oracle.exact import check
    from specproof.properties.oracle.findings import (
        ARGMAX_WITNESS,
        PERMUTED_WITNESS,
        argmax_told_q_witness,
        permuted_draft_law,
        permuted_draft_law_witness,
    )

    assert argmax_told_q_witness().tv == Fraction(1, 2)
    assert check("token", "onehot_chain", ARGMAX_WITNESS).tv == 0  # the same drafts told one-hot: exact
    assert permuted_draft_law_witness((1, 2, 0)).tv == Fraction(3, 26)
    assert check("token", permuted_draft_law((0, 1, 2)), PERMUTED_WITNESS).tv == 0


SLOW = pytest.mark.skipif(os.environ.get("SPECPROOF_SLOW") != "1", reason="slow sweep: SPECPROOF_SLOW=1")


def _registered(group: str) -> list[str]:
    E.ensure_registered()
    return [n for n, s in E.ENGINES.items() if s.group == group and s.available()[0]]


def test_the_optimized_loop_is_registered_for_every_proposer_and_rule_with_a_kernel():
    from specproof.reference.proposers import PROPOSERS

    names = set(_registered("optimized"))
    if not names:
        pytest.skip("specproof.optimized.decode has no OptimizedEngine")
    from specproof.optimized.decode import KERNEL_RULES

    for p in PROPOSERS.values():
        for rule in p.exact_rules():
            assert (f"optimized.{p.name}.{rule}" in names) == (rule in KERNEL_RULES)


@SLOW
@pytest.mark.slow
@pytest.mark.parametrize(
    "name",
    [n for n in E.ENGINES if n.startswith("reference.")]
    if os.environ.get("SPECPROOF_SLOW") == "1"
    else ["*"],
)
def test_every_reference_engine_passes(name):
    """Every proposer x exact rule (and the direct sampler): 2 prompts x its settings, 300
    samples per case, alpha 1e-3 (about 1 hour in all on 2 cores)."""
    res = audit_engine(resolve_engine(name), EngineAuditConfig(alpha=ALPHA, samples=300))
    assert res.verdict == Verdict.PASS, res.summary()


@SLOW
@pytest.mark.slow
@pytest.mark.parametrize("name", ["optimized.draft.token", "optimized.eagle1.rrs", "optimized.ngram.greedy"])
def test_optimized_engines_pass(name):
    """The optimized loop under Triton's interpreter (about 1 s per sample on a CPU): one case,
    100 samples (a contract check and a coarse law check; its coupling with the reference loop,
    sample for sample, is tested in tests/test_optimized_decode.py)."""
    if name not in _registered("optimized"):
        pytest.skip("specproof.optimized.decode has no OptimizedEngine")
    spec = resolve_engine(name)
    res = _audit(name, [(0, 6)], spec.samplings[:1], samples=100)
    assert res.verdict == Verdict.PASS, res.summary()


def test_horizons_from_3_to_6_and_vocabularies_from_4_to_16():
    """The reference loop on the 4-token target of ``specproof e2e`` at M = 6 (4,096 sequences)
    and on its 16-token target at M = 3 (4,096 sequences) passes; the greedy-drafts mutant on the
    16-token target is flagged (alpha 1e-3, fixed seeds and sizes)."""
    from specproof.reference.decode import e2e_models
    from specproof.reference.processes import PROCESSES as P

    small, big = e2e_models()

    def spec(target, process, tokens, prompt):
        def build(s):
            return L.ReferenceEngine(target, draft_model(target), process, "token", (-1, 0, 1, 2), s)

        return EngineSpec("x", "user", "", build, target.vocab, (prompt,), (T1,), tokens=tokens)

    ok = audit_engine(spec(small, "iid_chain", 6, (2, 0, 3)), EngineAuditConfig(alpha=ALPHA, samples=200))
    assert ok.verdict == Verdict.PASS and ok.tokens == 6 and ok.vocab == 4, ok.summary()
    ok = audit_engine(spec(big, "iid_chain", 3, (3, 4)), EngineAuditConfig(alpha=ALPHA, samples=200))
    assert ok.verdict == Verdict.PASS and ok.vocab == 16, ok.summary()
    soft = L.ReportedBy("argmax, q", P["onehot_chain"].choose, True, True, "", report_as=P["iid_chain"])
    bad = audit_engine(spec(big, soft, 3, (3, 4)), EngineAuditConfig(alpha=ALPHA, samples=200))
    assert bad.verdict == Verdict.LOSSY, bad.summary()


def test_a_joint_test_collapsed_to_one_cell_is_not_a_pass():
    """Two samples leave one cell of the joint law: it tested nothing, and says so."""
    cells = EngineAuditConfig(samples=2, report_samples=0, test="cells")
    r = audit_engine(E.resolve_engine("reference.direct"), cells)
    assert all(c.test is not None and c.test.cells == 1 for c in r.cases)
    assert r.verdict == Verdict.UNDERPOWERED and all(c.collapsed for c in r.cases)
    assert "collapsed to one cell" in r.summary() and r.to_json()["cases"][0]["collapsed"] is True
    enough = audit_engine(
        E.resolve_engine("reference.direct"), EngineAuditConfig(samples=200, report_samples=0)
    )
    assert enough.verdict == Verdict.PASS and not any(c.collapsed for c in enough.cases)
    # beside the token test a collapsed joint test is said, and the token test's plan decides
    both = audit_engine(E.resolve_engine("reference.direct"), EngineAuditConfig(samples=2, report_samples=0))
    assert both.verdict == Verdict.PASS and "collapsed to one cell" in both.summary()


def test_counters_that_contradict_or_never_accept_are_named():
    """Drafts made but none accepted is said as such (not "nothing drafted"), with its likely
    causes; counters reporting more accepted than drafted are flagged."""

    def counting(drafted: int, accepted: int) -> type[DirectEngine]:
        class Counting(DirectEngine):
            last_counters: dict[str, int] = {}

            def generate(self, prompt_ids, max_new_tokens, seed):
                self.last_counters = {"drafted": drafted, "accepted": accepted}
                return super().generate(prompt_ids, max_new_tokens, seed)

        return Counting

    lm = ToyLM(4, 1, exact=False)
    results = {}
    for counts in ((3, 0), (1, 2)):
        cls = counting(*counts)
        spec = EngineSpec("x", "user", "", lambda s, c=cls: c(lm), 4, ((0,),), (T1,), tokens=2)
        results[counts] = audit_engine(spec, EngineAuditConfig(samples=30))
    never = results[(3, 0)]
    assert never.verdict == Verdict.NO_SPECULATION
    assert never.speculation.idle == "drafts never accepted"
    assert "none was accepted" in never.summary() and "(drafts never accepted)" in never.summary()
    odd = results[(1, 2)]
    assert odd.speculation.contradictory == odd.samples > 0
    assert odd.speculation.first_contradiction == {"sample": 0, "drafted": 1, "accepted": 2}
    assert "COUNTERS CONTRADICT THEMSELVES" in odd.summary()
    assert odd.to_json()["speculation"]["contradictory"] == odd.samples


def test_a_greedy_path_whose_drafts_are_never_accepted_is_not_speculation_off():
    """The reference EAGLE-1 loop under greedy decoding: after [0 6] its one path is drawn again
    and again and the drafter never agrees with the target along it (no draft accepted there),
    while after [5 2 5 2] drafts are accepted. One path repeated is not speculation switched off:
    the verdict is pass, and the summary says speculation was not tested in that case. A
    sampled case whose drafts are never accepted still makes the verdict no_speculation (above)."""
    res = audit_engine(resolve_engine("reference.eagle1.greedy"), EngineAuditConfig(samples=20, seed=0))
    assert res.verdict == Verdict.PASS, res.summary()
    assert all(r.point_mass for r in res.cases) and res.speculation.status == "ran"
    idle = [r for r in res.cases if r.speculation.idle == "drafts never accepted"]
    assert idle, res.summary()  # the premise: one greedy path accepts nothing
    assert "speculation not tested in: greedy after [0 6] (drafts never accepted)" in res.summary()


def test_the_time_probe_times_a_chunk_drawn_as_sampling_draws_it():
    """An engine that serves 8 samples in the time of one call: the plan's estimate is read from
    a chunk drawn many at once (1/8 of a call per sample), not from single calls. The clock is
    the engine's own (1 s per call, whatever its size), so nothing here is timed."""
    now = [0.0]

    class Batched(DirectEngine):
        batch = 8

        def generate(self, prompt_ids, max_new_tokens, seed):
            now[0] += 1.0
            return super().generate(prompt_ids, max_new_tokens, seed)

        def generate_many(self, prompt_ids, max_new_tokens, seeds, report=False):
            from specproof.properties.engine.contract import Generation

            now[0] += 1.0
            return [
                Generation(tuple(DirectEngine.generate(self, prompt_ids, max_new_tokens, s))) for s in seeds
            ]

    lm = ToyLM(4, 1, exact=False)
    spec = EngineSpec("x", "user", "", lambda s: Batched(lm), 4, ((0,),), (T1,), tokens=2)
    res = audit_engine(spec, EngineAuditConfig(samples=64, looks=1), clock=lambda: now[0])
    assert res.verdict == Verdict.PASS, res.summary()
    assert "125.0 ms per sample (8 drawn, their laws read and scored as sampling does it)" in res.plan_text
    assert "about 8 s" in res.plan_text  # 64 samples at 1/8 s, where single calls said 64 s
    assert res.per_sample_seconds == pytest.approx(1 / 8)


def test_a_horizon_with_no_room_for_a_whole_step_is_said():
    """An engine that drafts 3 tokens per step, audited at M = 2, is told that no whole step
    fits in its samples (the verdict stands; the note says what it did not test); at M = 5
    nothing is said."""

    class Drafts3(DirectEngine):
        draft_tokens = 3

    lm = ToyLM(4, 1, exact=False)
    notes = {}
    for m in (2, 5):
        spec = EngineSpec("x", "user", "", lambda s: Drafts3(lm), 4, ((0,),), (T1,), tokens=m)
        notes[m] = audit_engine(spec, EngineAuditConfig(samples=20)).notes
    assert any("no whole speculative step fits" in n and "M >= 5" in n for n in notes[2]), notes[2]
    assert not any("speculative step" in n for n in notes[5])


@pytest.mark.parametrize(
    "name, verdict",
    [("mutant.draft_reports", Verdict.MISREPORTED), ("alternative.target_reports", Verdict.PASS)],
)
def test_an_engine_that_reports_the_draft_s_probability_is_misreported(name, verdict):
    """The reference loop reporting each token's probability (engine/report_mutants.py): the law
    holds either way (the token test at per-token TV 0.2 passes both); the one that reports the
    draft model's probability for its accepted drafts is misreported, naming a token whose reported
    probability is not the law's, and the one that reports the target's agrees to rounding."""
    spec = with_options(resolve_engine(name), prompts=[(0, 6)], samplings=[T1])
    r = audit_engine(spec, EngineAuditConfig(alpha=1e-3, tv=0.2, test="tokens", seed=3))
    assert r.verdict == verdict, r.summary()
    rep = r.to_json()["reports"]
    assert rep["checked"] == len(rep["pairs"]) > 0 and rep["missing"] == 0
    if verdict == Verdict.MISREPORTED:
        assert "reported probabilities: WRONG" in r.summary() and rep["max_error"] > 0.05
        assert rep["worst"]["reported"] != rep["worst"]["law"]
    else:
        assert rep["max_error"] < 1e-12


def test_a_top_p_cut_float32_cannot_pin_is_a_usage_error_not_the_engines_fault():
    """Where a top-p falls within 1e-5 of a cumulative mass of some law of the setting, an engine
    computing in float32 may keep one token more or fewer there: the law it must be held to is not
    pinned down. That is the setting's, not the engine's: the audit stops with a usage error naming
    the case and what to do, never a contract violation of an engine that did nothing wrong."""
    from specproof.properties.servers import gguf_models as gm
    from specproof.reference.errors import UsageError

    class TopP:  # exact: draws from the setting's law, reads its laws by the same recipe
        def __init__(self, s):
            self.sampling = s

        def target_law(self, context):
            return list(self.sampling.law(list(gm.last_logits(list(context)))))

        def generate(self, prompt_ids, n, seed):
            rng, out = np.random.default_rng(seed), list(prompt_ids)
            for _ in range(n):
                p = np.asarray(self.sampling.law(list(gm.last_logits(out)), margin=None))
                out.append(int(rng.choice(len(p), p=p / p.sum())))
            return out[len(prompt_ids) :]

    prompt = (1, 2, 3, 4)
    first = np.sort(np.asarray(Sampling(1.0).law(list(gm.last_logits(list(prompt))))))[::-1]
    cut = float(np.cumsum(first)[2])  # exactly a cumulative mass of the first law
    spec = EngineSpec(
        "top_p.ambiguous", "user", "", TopP, len(gm.VOCAB), (prompt,), (Sampling(1.0, top_p=cut),), tokens=4
    )
    with pytest.raises(UsageError, match=r"top_p: T=1,top_p=.* not pinned down in float32.*--samples"):
        audit_engine(spec, EngineAuditConfig(samples=50, seed=0))
    clear = dataclasses.replace(spec, samplings=(Sampling(1.0, top_p=cut + 0.01),))
    assert audit_engine(clear, EngineAuditConfig(samples=50, seed=0)).verdict == Verdict.PASS
