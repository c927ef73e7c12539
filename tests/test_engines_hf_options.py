"""HF transformers' generation options under speculation (the ``hf-options`` group of
properties/engine/adapters/hf_options.py; skipped without transformers; the full table is
docs/measurements/engine-audit-hf-options.md).

Fixed seeds and sample sizes, alpha 1e-3, so verdicts cannot flake:

* the engines' law is transformers' own: ``hf_law`` gives, at every step of a plain ``generate``
  call, the law of the scores that call sampled from (watermarks and guidance included), and the
  control (no speculation) passes under the stateful options;
* options whose processors read only the context they are called with pass on the assisted paths;
  an option a path ignored would be lossy (an engine that drops one is caught);
* the findings: SynthID's watermark and classifier-free guidance are lossy on the assisted path,
  with their causes pinned in transformers' code (the target's processor objects called by the
  assistant before the target verifies: contexts already in SynthID's history, drafts already in
  guidance's unconditional cache) and reproduced in the reference (properties/oracle/findings.py);
* the option and path pairs where transformers raises instead;
* every engine of the group declares the verdict the kept run found (this one runs without
  transformers).

The reference loop with a processor state that is never rolled back: tests/test_findings.py.
"""

from __future__ import annotations

import pytest
import tier_helpers
import torch

from specproof.properties.conformance.backends.thirdparty import ADAPTERS, availability
from specproof.properties.engine.audit import EngineAuditConfig, audit_engine
from specproof.properties.engine.contract import EngineSpec
from specproof.properties.engine.registry import T1, Sampling, resolve_engine, with_options
from specproof.properties.verdicts import Verdict
from specproof.reference.errors import UsageError

#: the tests that need no transformers (they read the group's declarations and the kept run)
WITHOUT_HF = {"test_every_engine_of_the_group_declares_the_verdict_the_kept_run_found"}


@pytest.fixture(autouse=True)
def _hf(request: pytest.FixtureRequest) -> None:
    if request.function.__name__ in WITHOUT_HF:
        return
    ok, why = availability(next(a for a in ADAPTERS if a.module == "hf"))
    if not ok:
        if tier_helpers.required():  # .ci/run's HF tier: transformers was just installed
            pytest.fail(f"the HF tier is required here (SPECPROOF_TIER_REQUIRED=1): {why}", pytrace=False)
        pytest.skip(why)


ALPHA = 1e-3


def _audit(spec, samples: int):
    if isinstance(spec, str):
        spec = resolve_engine(spec)
    return audit_engine(spec, EngineAuditConfig(alpha=ALPHA, samples=samples, seed=0))


def _pair(generator: str, option: str):
    from specproof.properties.engine.adapters import hf_options as H

    gen = next(g for g in H.GENERATORS if g.name == generator)
    opt = next(o for o in H.OPTIONS if o.name == option)
    return H, gen, opt


# --------------------------------------------------------------------------- the declarations


def test_every_engine_of_the_group_declares_the_verdict_the_kept_run_found():
    """Each engine of ``hf-options`` declares a verdict (``pass`` unless :data:`EXPECTED` says
    otherwise, with its reason in the notes); no declaration names an engine the group lacks;
    only the stateful options are lossy, the control passes under every option; and the run kept
    in docs/measurements/engine-audit-hf-options.json found each declared verdict."""
    import json
    from pathlib import Path

    from specproof.properties.engine.adapters import hf_options as H

    specs = {e.name: e for e in H.engines()}
    assert len(specs) == len(H.GENERATORS) * len(H.OPTIONS) - sum(
        1 for g in H.GENERATORS for o in H.OPTIONS if o.warper and g.sampling.greedy
    )
    assert set(H.EXPECTED) <= set(specs), set(H.EXPECTED) - set(specs)
    stateful = {o.name for o in H.OPTIONS if o.stateful}
    for name, spec in specs.items():
        assert spec.expect in ("pass", "lossy", "contract_violation"), name
        assert spec.group == "hf-options"
        if spec.expect != "pass":
            gen = next(g for g in H.GENERATORS if name.startswith(f"hf.{g.name}+"))
            opt = next(o for o in H.OPTIONS if name.endswith(f"+{o.name}"))
            why = H.expectation(gen, opt)[1]
            assert why and why in spec.notes, name
        if spec.expect == "lossy":
            assert name.rpartition("+")[2] in stateful or name.startswith("hf.assisted[stale]+"), name
        if name.startswith("hf.plain+"):
            assert spec.expect == "pass", name
    # the planted stale-context mutant is required lossy exactly under the options that read the context
    for opt in H.OPTIONS:
        spec = specs.get(f"hf.assisted[stale]+{opt.name}")
        assert spec is not None and (spec.expect == "lossy") == opt.context, opt.name
    kept = Path(__file__).resolve().parent.parent / "docs" / "measurements" / "engine-audit-hf-options.json"
    results = {r["engine"]: r["verdict"] for r in json.loads(kept.read_text())["results"]}
    assert set(results) == set(specs)
    disagree = {n: (v, specs[n].expect) for n, v in results.items() if v != specs[n].expect}
    assert not disagree, disagree


# --------------------------------------------------------------------------- the law is HF's own


@pytest.mark.parametrize("option", ["synthid", "guidance_scale", "min_new_tokens", "sequence_bias[n]"])
def test_hf_law_is_the_law_plain_generate_samples_from(option):
    H, gen, opt = _pair("plain", option)
    engine = H.build(gen, opt, T1)
    for seed in range(3):
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            out = engine.target.generate(
                torch.tensor([H.PROMPT]),
                max_new_tokens=4,
                return_dict_in_generate=True,
                output_scores=True,
                **engine.law_options,
            )
        seq = out.sequences[0].tolist()
        for j, scores in enumerate(out.scores):
            law = engine.target_law(seq[: H.P + j], prompt_len=H.P)
            assert torch.allclose(
                torch.tensor(law, dtype=torch.float64), torch.softmax(scores[0].double(), -1), atol=1e-5
            )


@pytest.mark.parametrize("name", ["hf.plain+synthid", "hf.plain+guidance_scale"])
def test_the_control_without_speculation_passes_under_stateful_options(name):
    res = _audit(name, samples=300)
    assert res.verdict == Verdict.PASS, res.summary()


# --------------------------------------------------------------------------- options that pass


@pytest.mark.parametrize(
    ("name", "samples"),
    [
        ("hf.assisted+sequence_bias[n]", 300),
        ("hf.prompt_lookup+min_new_tokens", 300),
        ("hf.dflash+bad_words_ids[n]", 300),
        ("hf.universal.greedy+min_new_tokens", 10),
    ],
)
def test_stateless_options_pass_on_the_assisted_paths(name, samples):
    res = _audit(name, samples)
    assert res.verdict == Verdict.PASS, res.summary()
    assert res.description["option_effect_tv"] > 0.2  # moves the law past the kept plan's TV


def test_an_option_the_path_ignored_would_be_lossy():
    H, gen, opt = _pair("assisted", "bad_words_ids[n]")

    def build(sampling):
        engine = H.build(gen, opt, sampling)
        engine.law_options.pop("bad_words_ids")  # generate no longer gets it; the law keeps it
        law = H.build(gen, opt, sampling)
        engine.target_law = law.target_law
        return engine

    spec = EngineSpec("ignores", "user", "bad_words_ids dropped", build, 8, (H.PROMPT,), (T1,))
    res = _audit(spec, samples=200)
    assert res.verdict == Verdict.LOSSY, res.summary()


def test_request_parameters_map_to_generate_options():
    s = Sampling(1.0, repetition_penalty=2.0, bad_words=((2, 6),), eos=6, min_new_tokens=2)
    spec = with_options(resolve_engine("hf.assisted[k=3]"), prompts=[(5, 2, 5, 2)], samplings=[s])
    res = _audit(spec, samples=200)
    assert res.verdict == Verdict.PASS, res.summary()
    with pytest.raises(UsageError, match="presence"):
        resolve_engine("hf.assisted[k=3]").build(Sampling(1.0, presence_penalty=0.5))


# --------------------------------------------------------------------------- the findings


@pytest.mark.parametrize(
    ("name", "samples"),
    [("hf.assisted+synthid", 200), ("hf.prompt_lookup+synthid", 200), ("hf.assisted+guidance_scale", 300)],
)
def test_stateful_processors_are_lossy_on_the_assisted_path(name, samples):
    res = _audit(name, samples)
    assert res.verdict == Verdict.LOSSY, res.summary()


def _spy(cls, monkeypatch):
    """Record every call of ``cls.__call__``: who called (the candidate generator or the
    verification loop), the context, and whether the scores came back unchanged."""
    import traceback

    calls = []
    real = cls.__call__

    def spy(self, input_ids, scores):
        stack = traceback.extract_stack()
        who = "draft" if any(f.filename.endswith("candidate_generator.py") for f in stack) else "verify"
        out = real(self, input_ids, scores)
        calls.append((id(self), who, tuple(input_ids[0].tolist()), bool(torch.equal(out, scores))))
        return out

    monkeypatch.setattr(cls, "__call__", spy)
    return calls


def test_synthid_finds_every_drafted_from_context_already_watermarked(monkeypatch):
    from transformers.generation.logits_process import SynthIDTextWatermarkLogitsProcessor

    H, gen, opt = _pair("assisted", "synthid")
    engine = H.build(gen, opt, T1)
    calls = _spy(SynthIDTextWatermarkLogitsProcessor, monkeypatch)
    for seed in range(5):
        calls.clear()
        engine.generate(list(H.PROMPT), 4, seed)
        verify = [c for c in calls if c[1] == "verify"]
        target = verify[0][0]
        # the target's processor object is called by the assistant first, at the contexts it drafts from
        drafted_from = {c[2] for c in calls if c[1] == "draft" and c[0] == target}
        assert calls[0][0] == target and calls[0][1] == "draft" and drafted_from
        # at verification, each of those contexts is in SynthID's history: the watermark is skipped
        repeated = [c for c in verify if c[2] in drafted_from and len(c[2]) > H.P]
        assert repeated and all(unchanged for *_, unchanged in repeated)
    # the same mechanism, one line from the reference's node law: the parameter dropped at the
    # drafted positions and kept at the bonus token (exact, one step)
    from specproof.properties.oracle.findings import node_law_tv

    assert node_law_tv("none") < 1e-12
    assert node_law_tv("dropped_at_drafted_positions") > 0.3


def test_guidance_unconditional_branch_holds_the_drafts_before_they_are_verified(monkeypatch):
    from transformers.generation.logits_process import UnbatchedClassifierFreeGuidanceLogitsProcessor as CFG

    H, gen, opt = _pair("assisted", "guidance_scale")
    engine = H.build(gen, opt, T1)
    seen = []
    real = CFG.get_unconditional_logits

    def spy(self, input_ids):
        out = real(self, input_ids)
        seen.append((len(input_ids[0]), self.unconditional_context["cache"].get_seq_length()))
        return out

    monkeypatch.setattr(CFG, "get_unconditional_logits", spy)
    engine.generate(list(H.PROMPT), 4, 0)
    # plain generate: one call per position, the branch holds (last prompt token) + generated tokens,
    # i.e. len(context) - P + 1; on the assisted path it holds more (the assistant's drafts, then
    # every verified position, rejected ones included: it is never cropped)
    assert any(cached > n - H.P + 1 for n, cached in seen), seen
    from specproof.properties.oracle.findings import node_law_tv

    assert node_law_tv("drafts_counted_ahead") > 0.05


@pytest.mark.parametrize(
    ("name", "error"),
    [
        ("hf.early_exit+guidance_scale", IndexError),  # the guidance cache built by the 1-layer exit
        ("hf.universal[warm,ids]+watermark", IndexError),  # the assistant's watermark over its own vocabulary
        (
            "hf.universal.greedy+bad_words_ids[1]",
            RuntimeError,
        ),  # target's processor first sized by the assistant
    ],
)
def test_where_transformers_raises_instead(name, error):
    engine = resolve_engine(name).build(resolve_engine(name).samplings[0])
    with pytest.raises(error):
        engine.generate([5, 2, 5, 2], 4, 0)
    assert abs(sum(engine.target_law([5, 2, 5, 2], prompt_len=4)) - 1) < 1e-9  # plain generate works


# --------------------------------------------------------------------------- the stale-context mutant


def _context_options() -> list[str]:
    from specproof.properties.engine.adapters import hf_options as H

    return [o.name for o in H.OPTIONS if o.context and not o.stateful]


@pytest.mark.parametrize("option", _context_options())
def test_each_context_option_is_configured_so_a_stale_context_would_show(option):
    """Every option that reads the context is audited in a case where a verification handing it
    a stale context (one token short past the first new token, the least such a bug can be)
    moves the M-token law: ``stale_context_tv``, a lower bound by exact expansion, is stated in
    ``describe()`` and is not 0 (a case with 0 could not catch the bug)."""
    H, gen, opt = _pair("assisted", option)
    engine = H.build(gen, opt, T1)
    engine.generate(list(opt.prompt), 4, 0)
    d = engine.describe()
    assert d["stale_context_tv"] >= 0.1, d
    assert d["option_effect_tv"] > 0.05, d


def test_a_context_free_option_is_not_moved_by_a_stale_context():
    """The control of the measure above: options whose processors ignore the context show 0."""
    H, gen, opt = _pair("assisted", "suppress_tokens")
    engine = H.build(gen, opt, T1)
    assert engine.stale_context_effect(opt.prompt, 4) == 0.0


@pytest.mark.slow
@pytest.mark.parametrize(
    "option", ["min_new_tokens", "sequence_bias[n]", "bad_words_ids[n]", "repetition_penalty"]
)
def test_the_planted_stale_context_is_lossy_where_the_option_reads_the_context(option):
    """The real-code mutant (hf_mutants.stale_context) under the kept plan's test (cells, plan
    for TV 0.2, alpha 1e-4, seed 0): lossy; the unmutated path under the same option passes
    (test_stateless_options_pass_on_the_assisted_paths and the kept run)."""
    spec = resolve_engine(f"hf.assisted[stale]+{option}")
    res = audit_engine(spec, EngineAuditConfig(test="cells", tv=0.2, seed=0, budget_seconds=1800))
    assert res.verdict == Verdict.LOSSY, res.summary()


def test_the_planted_stale_context_changes_nothing_under_a_context_free_option():
    res = _audit("hf.assisted[stale]+suppress_tokens", samples=300)
    assert res.verdict == Verdict.PASS, res.summary()
