"""HF transformers' generation options under speculation: every option of ``GenerationConfig``
that shapes the sampled law, on every candidate generator (engine group ``hf-options``).

Each engine is one candidate generator of :mod:`.hf` with one option passed to ``generate`` as a
user passes it; its ``target_law`` is transformers' own law without speculation under the same
option (:func:`.hf.hf_law`: the processors plain ``generate`` builds, called once per position),
so the audit holds the assisted path to what plain ``generate`` samples, never to this project's
semantics. ``describe()`` adds ``option_effect_tv``: a lower bound on the TV distance the option
makes to the M-token law after the audited prompt (0 would make the row vacuous: an option the
path ignores could not be caught there).

How transformers 5.24 applies the options on the assisted path (file:line of the installed
``transformers/generation/``; docs/engine-audit.md, "Generation options under speculation"):

* the target's verification calls the whole ``LogitsProcessorList`` once per candidate position
  ``i`` on ``input_ids = candidate_input_ids[:, :cur_len + i]`` (``utils.py`` 4110-4111): the
  right context at every draft position and at the bonus token, for every option;
* ``AssistedCandidateGenerator`` (and ``EarlyExitCandidateGenerator``,
  ``AssistedCandidateGeneratorDifferentTokenizers``) hand the assistant's ``generate`` the
  target's own processor objects (``candidate_generator.py`` 186-188, 320), minus
  ``MinLengthLogitsProcessor``; the assistant also builds its own from a copy of the target's
  config (``utils.py`` 1600-1658): a custom processor replaces a default of its type, the
  warpers and the watermark are appended twice. The draft law q is the assistant's processed
  scores, the law its drafts were drawn from, so q stays consistent whatever it is;
* ``PromptLookupCandidateGenerator`` calls the processors on uniform fake logits to crop
  candidates they would ban (``candidate_generator.py`` 1111-1126); ``DFlashTokenCandidateGenerator``
  processes its drafts with the target's processors (1652-1666); ``UniversalSpeculativeDecoding
  Generator`` replaces the assistant's list by one ``SuppressTokensLogitsProcessor`` (951-952);
  ``SinglePositionMultiTokenCandidateGenerator`` drafts the argmax of the assistant's raw logits
  (1340-1345; its sampling path is lossy without any option, proofs_notes/thirdparty.md);
* processors that keep state across calls see every call as one more position of the sequence:
  ``SynthIDTextWatermarkLogitsProcessor`` (``logits_process.py`` 2763-2806: its n-gram context
  and its history of used contexts advance once per call) and
  ``UnbatchedClassifierFreeGuidanceLogitsProcessor`` (``guidance_scale``, 2346-2393: its
  unconditional branch appends ``input_ids[:, -1:]`` to its own cache once per call). On the
  assisted path they are called at positions that are not the sequence's next one (after
  rejected drafts, by the assistant, by the lookup's probing).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from specproof.properties.engine.adapters import hf, hf_mutants
from specproof.properties.engine.contract import GREEDY, T1, EngineSpec, Sampling

#: the one prompt of these audits: repeated bigrams, so that prompt lookup drafts and the n-gram
#: and repetition options bite from the first new token on
PROMPT = (5, 2, 5, 2)
P = len(PROMPT)


def alternate_parity(batch_id: int, input_ids: Any) -> list[int]:
    """A ``prefix_allowed_tokens_fn``: after an even token only odd ones, after an odd one only
    even ones (a constraint on the context's last token, the same at every position)."""
    last = int(input_ids[-1])
    return [x for x in range(hf.VOCAB) if x % 2 != last % 2]


#: an option's keyword arguments from ``a``, the target's most likely token after PROMPT, and
#: ``b = (a + 5) % 8``: the ids an option names are chosen from them so that it moves the law,
#: greedy decoding's included (``a`` is also the end-of-sequence id where one is needed)
Kwargs = Callable[[int, int], dict[str, Any]]


@dataclass(frozen=True)
class Option:
    """One law-shaping option of ``generate`` as audited: its keyword arguments, whether it is a
    warper (applied only when sampling), whether its processor keeps state across calls, and
    whether it reads the context past the prompt (its tokens or its length: a verification that
    hands it a stale context changes its law; its case is chosen so that it does inside drafts,
    ``stale_context_tv`` in ``describe()``)."""

    name: str
    doc: str
    kwargs: Kwargs
    warper: bool = False
    stateful: bool = False
    context: bool = False
    #: the audited prompt (:data:`PROMPT` unless the option needs another to take effect in drafts)
    prompt: tuple[int, ...] = PROMPT


def _kw(**kw: Any) -> Kwargs:
    return lambda a, b: dict(kw)


def _watermark(a: int, b: int) -> dict[str, Any]:
    from transformers import WatermarkingConfig

    return {
        "watermarking_config": WatermarkingConfig(greenlist_ratio=0.25, bias=2.5, seeding_scheme="lefthash")
    }


def _synthid(a: int, b: int) -> dict[str, Any]:
    from transformers import SynthIDTextWatermarkingConfig

    keys = [654, 400, 836, 123, 340, 443]
    return {"watermarking_config": SynthIDTextWatermarkingConfig(keys=keys, ngram_len=2)}


OPTIONS: tuple[Option, ...] = (
    Option(
        "repetition_penalty",
        "repetition_penalty=8.0, prompt (7, 7) "
        "(tokens the models rarely draft: each draft is new to the context)",
        _kw(repetition_penalty=8.0),
        context=True,
        prompt=(7, 7),
    ),
    Option(
        "encoder_repetition_penalty",
        "encoder_repetition_penalty=0.5 (the prompt's tokens penalized)",
        _kw(encoder_repetition_penalty=0.5),
    ),
    Option("no_repeat_ngram_size", "no_repeat_ngram_size=2", _kw(no_repeat_ngram_size=2), context=True),
    Option(
        "encoder_no_repeat_ngram_size",
        "encoder_no_repeat_ngram_size=2 (no bigram of the prompt)",
        _kw(encoder_no_repeat_ngram_size=2),
        context=True,
    ),
    Option(
        "sequence_bias[1]",
        "sequence_bias [[[b], 2.0], [[a], -2.0]] (one-token sequences)",
        lambda a, b: {"sequence_bias": [[[b], 2.0], [[a], -2.0]]},
    ),
    Option(
        "sequence_bias[n]",
        "sequence_bias [[[a, a], -3.0], [[a, b], 2.5], [[2, a, a], 2.0]] (two and three tokens, "
        "after the likeliest token)",
        lambda a, b: {"sequence_bias": [[[a, a], -3.0], [[a, b], 2.5], [[2, a, a], 2.0]]},
        context=True,
    ),
    Option("bad_words_ids[1]", "bad_words_ids [[a]]", lambda a, b: {"bad_words_ids": [[a]]}),
    Option(
        "bad_words_ids[n]",
        "bad_words_ids [[a, a], [a, 2]] (after the likeliest token)",
        lambda a, b: {"bad_words_ids": [[a, a], [a, 2]]},
        context=True,
    ),
    Option("suppress_tokens", "suppress_tokens [a, 1]", lambda a, b: {"suppress_tokens": [a, 1]}),
    Option(
        "begin_suppress_tokens",
        "begin_suppress_tokens [a, b] (the first new token only)",
        lambda a, b: {"begin_suppress_tokens": [a, b]},
        context=True,
    ),
    Option(
        "prefix_allowed_tokens_fn",
        "prefix_allowed_tokens_fn: odd after even, even after odd",
        _kw(prefix_allowed_tokens_fn=alternate_parity),
        context=True,
    ),
    Option(
        "min_new_tokens",
        "min_new_tokens=1, eos_token_id=a",
        lambda a, b: {"min_new_tokens": 1, "eos_token_id": a},
        context=True,
    ),
    Option(
        "min_length",
        f"min_length={P + 1} (the prompt + 1), eos_token_id=a",
        lambda a, b: {"min_length": P + 1, "eos_token_id": a},
        context=True,
    ),
    Option(
        "exponential_decay_length_penalty",
        "exponential_decay_length_penalty=(0, 5.0), eos_token_id=2 (a token of the prompt's bigrams)",
        lambda a, b: {"exponential_decay_length_penalty": (0, 5.0), "eos_token_id": 2},
        context=True,
    ),
    Option(
        "forced_eos_token_id",
        "forced_eos_token_id=b (at max_length: the 4th new token), eos_token_id=b",
        lambda a, b: {"forced_eos_token_id": b, "eos_token_id": b},
        context=True,
    ),
    Option("min_p", "min_p=0.12", _kw(min_p=0.12), warper=True),
    Option("top_h", "top_h=0.7", _kw(top_h=0.7), warper=True),
    Option("typical_p", "typical_p=0.9", _kw(typical_p=0.9), warper=True),
    Option("epsilon_cutoff", "epsilon_cutoff=0.045", _kw(epsilon_cutoff=0.045), warper=True),
    Option("eta_cutoff", "eta_cutoff=0.03", _kw(eta_cutoff=0.03), warper=True),
    Option(
        "guidance_scale",
        "guidance_scale=3.0 (classifier-free guidance; unconditional branch: the prompt's last token)",
        _kw(guidance_scale=3.0),
        stateful=True,
        context=True,
    ),
    Option(
        "watermark", "WatermarkingConfig (lefthash, greenlist_ratio 0.25, bias 2.5)", _watermark, context=True
    ),
    Option(
        "synthid",
        "SynthIDTextWatermarkingConfig (6 keys, ngram_len 2)",
        _synthid,
        stateful=True,
        context=True,
    ),
)

#: the options listed but not audited, and why
NOT_RUN: dict[str, str] = {
    "forced_bos_token_id": "forces its token only at sequence length 1: never after a prompt (decoder-only)",
    "renormalize_logits": "a log-softmax: the same law",
    "remove_invalid_values": "changes only NaN and infinite logits: the same law for finite ones",
    "watermarking_config (selfhash)": "WatermarkLogitsProcessor's selfhash ranks 40 candidates "
    "(logits_process.py 2557-2558): IndexError on a vocabulary under 40, in plain generate too",
    "num_beams, length_penalty, diversity_penalty": "beam search: not a sampled law, and not assisted",
    "token_healing": "rewrites the prompt's tail, not the law (needs a real tokenizer)",
    "logits_processor (a custom list)": "the user's own processors: a stateless one is applied as "
    "prefix_allowed_tokens_fn is",
}


@dataclass(frozen=True)
class Generator:
    """A candidate generator of :mod:`.hf` as built for these audits."""

    name: str
    cls: str  # transformers' candidate generator class it reaches
    build: Callable[..., hf.HFEngine]
    sampling: Sampling = T1
    vocab: int = hf.VOCAB
    notes: str = ""
    kwargs: dict[str, Any] = field(default_factory=dict)


def plain(sampling: Sampling) -> hf.HFEngine:
    """``generate`` without speculation: the control, which must pass under every option (it
    checks :func:`.hf.hf_law` against transformers' own sampling loop)."""
    return hf.HFEngine(hf.llama(0), sampling, {})


def stale_assisted(sampling: Sampling, **kwargs: Any) -> hf.HFEngine:
    """The assistant path with the stale-context bug planted (:func:`.hf_mutants.stale_context`)."""
    return hf_mutants.stale_context(hf.assisted(sampling, **kwargs))


GENERATORS: tuple[Generator, ...] = (
    Generator("plain", "no candidate generator (the control)", plain),
    Generator("assisted", "AssistedCandidateGenerator", hf.assisted),
    Generator(
        "assisted[stale]",
        "AssistedCandidateGenerator, stale context planted in the verification (hf_mutants)",
        stale_assisted,
        notes="a planted bug: the verification's processors get the context from before the drafts",
    ),
    Generator("prompt_lookup", "PromptLookupCandidateGenerator", hf.prompt_lookup),
    Generator("early_exit", "EarlyExitCandidateGenerator", hf.early_exit),
    Generator(
        "universal[warm,ids]",
        "UniversalSpeculativeDecodingGenerator",
        hf.universal,
        kwargs={"warmup": True, "order": "ids"},
    ),
    Generator("universal.greedy", "AssistedCandidateGeneratorDifferentTokenizers", hf.universal, GREEDY),
    Generator(
        "gemma4_assistant.greedy",
        "SinglePositionMultiTokenCandidateGenerator",
        hf.gemma4_assistant,
        GREEDY,
        notes="its sampling path drafts the argmax but verifies the drafts as sampled: lossy with any option",
    ),
    Generator("dflash", "DFlashTokenCandidateGenerator", hf.dflash, vocab=hf.VOCAB + 1),
)


def build(gen: Generator, opt: Option, sampling: Sampling) -> hf.HFEngine:
    """``gen``'s engine with ``opt`` passed to every call and to its law, its token ids chosen
    from the target's most likely token after PROMPT; ``baseline`` is the same without the
    option (its end-of-sequence id kept), for ``option_effect_tv``."""
    engine = gen.build(sampling, **gen.kwargs)
    first = hf.hf_law(engine.target, opt.prompt, len(opt.prompt), {"do_sample": False, "max_new_tokens": 1})
    a = max(range(len(first)), key=first.__getitem__)
    options = opt.kwargs(a, (a + 5) % hf.VOCAB)
    engine.set_law_options({k: v for k, v in options.items() if k == "eos_token_id"})
    engine.baseline = dict(engine.law_options)
    engine.set_law_options(options)
    engine.probe_stale = opt.context and not opt.stateful
    return engine


def engine_name(gen: Generator, opt: Option) -> str:
    return f"hf.{gen.name}+{opt.name}"


_SHARED = (
    "the candidate generator calls the target's own {what} object at the contexts it drafts from, "
    "before the target verifies them (proofs_notes/thirdparty.md)"
)
_NOT_ROLLED_BACK = (
    "the verification calls the {what} processor at every candidate position, rejected ones "
    "included, and its state is never rolled back (proofs_notes/thirdparty.md)"
)
_SYNTHID, _CFG = "SynthID watermark", "classifier-free guidance"
_SIZED_BY_ASSISTANT = (
    "RuntimeError: the target's {what} processor, handed to the assistant, sizes its bias to the "
    "assistant's 10-token vocabulary on its first call; the target's verification then adds it to "
    "8 scores (logits_process.py 1329)"
)

#: the verdicts that differ from ``pass``, each with its reason (measured by the full run,
#: docs/measurements/engine-audit-hf-options.md; every other engine of the group is declared
#: ``pass``: transformers presents assisted generation as lossless under any option)
EXPECTED: dict[str, tuple[str, str]] = {
    # stateful processors: lossy on the assisted paths
    "hf.assisted+synthid": ("lossy", _SHARED.format(what=_SYNTHID)),
    "hf.assisted+guidance_scale": ("lossy", _SHARED.format(what=_CFG)),
    "hf.prompt_lookup+synthid": ("lossy", _SHARED.format(what=_SYNTHID) + " (the lookup's probe)"),
    "hf.prompt_lookup+guidance_scale": ("lossy", _SHARED.format(what=_CFG) + " (the lookup's probe)"),
    "hf.early_exit+synthid": ("lossy", _SHARED.format(what=_SYNTHID)),
    "hf.universal[warm,ids]+synthid": ("lossy", _NOT_ROLLED_BACK.format(what=_SYNTHID)),
    "hf.universal.greedy+synthid": ("lossy", _SHARED.format(what=_SYNTHID)),
    "hf.gemma4_assistant.greedy+guidance_scale": ("lossy", _NOT_ROLLED_BACK.format(what=_CFG)),
    "hf.dflash+synthid": ("lossy", _SHARED.format(what=_SYNTHID) + " (DFlash processes its drafts with it)"),
    "hf.dflash+guidance_scale": (
        "lossy",
        _SHARED.format(what=_CFG) + " (DFlash processes its drafts with it)",
    ),
    # transformers raises where plain generate works
    "hf.early_exit+guidance_scale": (
        "contract_violation",
        "IndexError in the KV cache's update: the guidance branch's cache is created while the early "
        "exit has set the model's num_hidden_layers to 1 (candidate_generator.py 1206-1209); the "
        "full model then writes its second layer into it",
    ),
    "hf.universal[warm,ids]+guidance_scale": (
        "contract_violation",
        "IndexError (an embedding index out of range) in the assistant's own guidance branch "
        "(built from its copy of the config, utils.py 1439-1445), on one call in a few hundred: "
        "after 51 samples of the plan",
    ),
    "hf.universal[warm,ids]+watermark": (
        "contract_violation",
        "IndexError: the assistant's own watermark draws its greenlist over the assistant config's "
        "10 tokens (utils.py 1655-1657) while its pruned head gives 8 scores",
    ),
    "hf.universal.greedy+sequence_bias[1]": (
        "contract_violation",
        _SIZED_BY_ASSISTANT.format(what="sequence bias"),
    ),
    "hf.universal.greedy+sequence_bias[n]": (
        "contract_violation",
        _SIZED_BY_ASSISTANT.format(what="sequence bias"),
    ),
    "hf.universal.greedy+bad_words_ids[1]": (
        "contract_violation",
        _SIZED_BY_ASSISTANT.format(what="bad words"),
    ),
    "hf.universal.greedy+bad_words_ids[n]": (
        "contract_violation",
        _SIZED_BY_ASSISTANT.format(what="bad words"),
    ),
    "hf.universal.greedy+guidance_scale": (
        "contract_violation",
        "RuntimeError: the target's guidance processor, handed to the assistant, subtracts the "
        "target's 8 unconditional logits from the assistant's 10 scores (logits_process.py 2390)",
    ),
}


#: why the planted stale-context mutant is lossy under an option that reads the context
STALE = (
    "planted: the verification gives {what}'s processor the context from before the drafts, so at "
    "a draft position it acts as if the drafts before it were not there"
)


def expectation(gen: Generator, opt: Option) -> tuple[str, str]:
    """The declared verdict of ``gen`` under ``opt`` and why (``""`` for ``pass``): the planted
    stale-context mutant is required lossy under every option that reads the context."""
    if gen.name == "assisted[stale]" and opt.context:
        return "lossy", STALE.format(what=opt.name)
    return EXPECTED.get(engine_name(gen, opt), ("pass", ""))


def engines() -> list[EngineSpec]:
    """Every candidate generator x every option (warpers only where the path samples), each
    declared as :data:`EXPECTED` says (``pass`` where it says nothing), the reason in its notes."""
    out = []
    for gen in GENERATORS:
        for opt in OPTIONS:
            if opt.warper and gen.sampling.greedy:
                continue
            expect, why = expectation(gen, opt)
            out.append(
                EngineSpec(
                    engine_name(gen, opt),
                    "hf-options",
                    f"{gen.cls}: {opt.doc}",
                    functools.partial(build, gen, opt),
                    gen.vocab,
                    (opt.prompt,),
                    (gen.sampling,),
                    expect=expect,
                    available=hf.available,
                    notes="; ".join(x for x in (gen.notes, why) if x),
                )
            )
    return out


def verdict_cell(result: dict[str, Any]) -> str:
    """One cell of :func:`markdown_grid`: the verdict, ``raises`` with the exception for an engine
    transformers fails on, ``vacuous`` for a pass where the option does not move the law."""
    v, effect = result["verdict"], (result.get("description") or {}).get("option_effect_tv")
    violation = result.get("violation") or {}
    if v == "contract_violation" and violation.get("kind") == "exception":
        detail = violation.get("detail", "").removeprefix("generate raised ")
        return f"raises: {detail.split(':')[0]}"
    if v == "pass" and effect is not None and effect < 0.02:
        return f"vacuous (effect {effect:g})"
    samples = result.get("samples")
    return f"**{v}** ({samples})" if v != "pass" else f"pass ({samples})"


def markdown_grid(doc: dict[str, Any]) -> str:
    """The option x candidate generator table of an ``--engine-group hf-options --json`` output:
    each cell the verdict and the samples it took (a lossy verdict stops at the first look that
    rejects); beside each option its effect (``option_effect_tv`` on the control) and, for the
    options that read the context, ``stale_context_tv`` on the assisted path: the least a stale
    context moves the law in the option's case (``scripts/hf_options_grid.py`` prints it)."""
    by_name = {r["engine"]: r for r in doc["results"]}
    head = ["option", "effect (TV)", "stale context (TV)"] + [g.name for g in GENERATORS]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for opt in OPTIONS:
        control = by_name.get(engine_name(GENERATORS[0], opt), {})
        effect = (control.get("description") or {}).get("option_effect_tv")
        assisted = by_name.get(engine_name(GENERATORS[1], opt), {})
        stale = (assisted.get("description") or {}).get("stale_context_tv")
        cells = [
            opt.name,
            "" if effect is None else f"{effect:.2f}",
            "stateful" if opt.stateful else "" if stale is None else f"{stale:.2f}",
        ]
        for gen in GENERATORS:
            r = by_name.get(engine_name(gen, opt))
            cells.append(
                "n/a (warper)" if opt.warper and gen.sampling.greedy else verdict_cell(r) if r else ""
            )
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)
