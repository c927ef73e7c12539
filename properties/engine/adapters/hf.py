"""HF transformers' ``generate`` as engines: every candidate generator that runs on tiny models.

Each engine is the user's call, ``target.generate(prompt, do_sample=True, temperature=T,
top_k=K, top_p=P, max_new_tokens=M, <the path's options>)`` with torch's global RNG seeded
(inside ``torch.random.fork_rng``, so the caller's RNG state is untouched): nothing of the
decoding is drawn by the adapter. Models are built from configs with fixed seeds (no download):
an 8-token Llama target (2 layers, width 32, ``initializer_range`` 0.3, so its next-token laws are
spread and a 1-layer assistant of its own seed agrees with it on 30 to 45% of the mass: drafts
are accepted and rejected). Options that transformers reads from the *assistant's*
``generation_config`` (``num_assistant_tokens``, its schedule, ``assistant_confidence_threshold``)
are set there, as a user does.

``target_law(context, prompt_len)`` is transformers' own law without speculation: the target's
logits at the context processed by the ``LogitsProcessorList`` that plain ``generate`` (no
assistant, no lookup) builds for the same prompt and options, called once per position from the
end of the prompt on, as its sampling loop calls it (so processors whose state depends on where
the prompt ends or on earlier calls, such as ``min_new_tokens`` or the watermarks, get what plain
``generate`` gives them); then softmax (one-hot at the argmax when greedy). The request's
parameters become ``generate``'s (:func:`hf_kwargs`); other generation options (penalties,
n-gram bans, sequence bias, the cut-offs, watermarking, ...) are passed as ``law_options``
(:mod:`.hf_options` audits each of them on every path). With an end-of-sequence id (``eos``),
a sample may end early on it (``eos_id``).

The candidate generators of ``transformers/generation/candidate_generator.py`` (5.24) and where
they are audited (docs/engine-audit.md, "HF transformers"; proofs_notes/engine_audit.md):

=========================================  =================================================
AssistedCandidateGenerator                 ``hf.assisted*`` (an assistant model)
AssistedCandidateGeneratorDifferentTok.    ``hf.universal.greedy`` (do_sample=False only)
UniversalSpeculativeDecodingGenerator      ``hf.universal*`` (different tokenizers, sampling)
PromptLookupCandidateGenerator             ``hf.prompt_lookup*``
EarlyExitCandidateGenerator                ``hf.early_exit``
SinglePositionMultiTokenCandidateGenerator ``hf.gemma4_assistant*``, ``hf.gemma4_unified_assistant``
DFlashTokenCandidateGenerator              ``hf.dflash`` (MuseGlimmer assistant, any target)
MTPCandidateGenerator                      not run: ``MtpModel.from_pretrained`` reads the MTP
                                           weights from a checkpoint whose layer names are
                                           fixed per model family (e.g. ``model.layers.61``)
=========================================  =================================================
"""

from __future__ import annotations

import importlib.metadata
from collections.abc import Callable, Sequence
from typing import Any

import torch

from specproof.properties.engine.contract import EngineSpec, Sampling
from specproof.reference.errors import UsageError

VOCAB = 8
PROMPTS: tuple[tuple[int, ...], ...] = ((0, 6), (5, 2, 5, 2))
TOP_K, TOP_P = Sampling(1.0, top_k=3), Sampling(0.7, top_p=0.8)


def available() -> tuple[bool, str]:
    try:
        version = importlib.metadata.version("transformers")
    except importlib.metadata.PackageNotFoundError:
        return False, "transformers is not installed (pip install specproof[hf])"
    import specproof.optimized  # noqa: F401  (Triton's mode is decided before transformers imports it)

    try:
        import transformers.generation.candidate_generator  # noqa: F401
    except Exception as e:
        return False, f"transformers {version} is installed but does not import: {e}"
    return True, version


def _quiet() -> None:
    import transformers

    transformers.logging.set_verbosity_error()


def _seeded(seed: int, make: Callable[[], Any]) -> Any:
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return make()


def llama(seed: int, vocab: int = VOCAB, layers: int = 2, init: float = 0.3) -> Any:
    """A tiny Llama from a config: no BOS/EOS (every sample is exactly M tokens long)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(
        vocab_size=vocab,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=layers,
        num_attention_heads=2,
        num_key_value_heads=2,
        max_position_embeddings=64,
        bos_token_id=None,
        eos_token_id=None,
        pad_token_id=None,
        initializer_range=init,
        tie_word_embeddings=False,
    )
    return _seeded(seed, lambda: LlamaForCausalLM(cfg).eval())


def word_tokenizer(words: Sequence[str], order: str = "alphabetical") -> Any:
    """A word-level fast tokenizer over ``words`` (id = position; ``words`` must hold
    ``<unk>``), built locally. ``get_vocab()`` of a fast tokenizer comes in the order of a hash
    map, which changes from process to process; here it is fixed: ``"alphabetical"`` (by word,
    not by id, as arbitrary as a hash order but reproducible) or ``"ids"`` (ascending ids)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    if order not in ("alphabetical", "ids"):
        raise UsageError(f"order: 'alphabetical' or 'ids', got {order!r}")

    class WordTokenizer(PreTrainedTokenizerFast):
        def get_vocab(self) -> dict[str, int]:
            vocab = super().get_vocab()
            key = (lambda kv: kv[0]) if order == "alphabetical" else (lambda kv: kv[1])
            return dict(sorted(vocab.items(), key=key))

    tk = Tokenizer(models.WordLevel(vocab={w: i for i, w in enumerate(words)}, unk_token="<unk>"))
    tk.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tk.decoder = decoders.WordPiece(prefix="##", cleanup=False)
    return WordTokenizer(tokenizer_object=tk)


#: The target's words, and the assistant's: the same 8 in another order plus two it alone has.
#: A word neither knows encodes as ``<unk>``, a word like the others (not a special token).
TARGET_WORDS = ("a", "b", "c", "d", "e", "f", "g", "<unk>")
ASSISTANT_WORDS = ("<unk>", "g", "f", "e", "x", "d", "c", "b", "a", "y")


def hf_kwargs(s: Sampling) -> dict[str, Any]:
    """The request as ``generate``'s keyword arguments: the parameters transformers has under the
    same semantics (its repetition penalty counts prompt and output; logit bias is a one-token
    ``sequence_bias``). A parameter it has no counterpart for is a :class:`UsageError`."""
    if s.presence_penalty or s.frequency_penalty:
        raise UsageError("HF transformers' generate has no presence or frequency penalty")
    if s.grammar is not None:
        raise UsageError("HF transformers' generate has no grammar (prefix_allowed_tokens_fn is an option)")
    if s.repetition_penalty not in (None, 1.0) and s.repetition_scope != "all":
        raise UsageError(
            "HF transformers' repetition penalty counts prompt and output (repetition_scope 'all')"
        )
    kw: dict[str, Any]
    if s.greedy:
        kw = {"do_sample": False}
    else:
        kw = {
            "do_sample": True,
            "temperature": s.temperature,
            "top_k": s.top_k or 0,
            "top_p": 1.0 if s.top_p is None else s.top_p,
        }
        if s.min_p:
            kw["min_p"] = float(s.min_p)
    if s.repetition_penalty not in (None, 1.0):
        kw["repetition_penalty"] = float(s.repetition_penalty)
    if s.no_repeat_ngram_size:
        kw["no_repeat_ngram_size"] = s.no_repeat_ngram_size
    if s.bad_words:
        kw["bad_words_ids"] = [list(w) for w in s.bad_words]
    if s.logit_bias:
        kw["sequence_bias"] = [[[x], float(b)] for x, b in s.logit_bias]
    if s.min_new_tokens:
        kw["min_new_tokens"] = s.min_new_tokens
    if s.eos is not None:
        kw["eos_token_id"] = s.eos
    return kw


def hf_law(
    model: Any, context: Sequence[int], prompt_len: int, kwargs: dict[str, Any], lag: int = 0
) -> list[float]:
    """Transformers' own next-token law after ``context`` (its first ``prompt_len`` tokens the
    prompt) without speculation: the last of :func:`hf_laws_along`."""
    return hf_laws_along(model, context, prompt_len, kwargs, lag)[-1]


def hf_laws_along(
    model: Any, context: Sequence[int], prompt_len: int, kwargs: dict[str, Any], lag: int = 0
) -> list[list[float]]:
    """Transformers' own next-token laws without speculation after ``context[:j]`` for every j
    from ``prompt_len`` to ``len(context)``: ``model.generate(prompt, **kwargs)`` builds its
    processors (a ``custom_generate`` hands them over and stops there); they are called on
    ``input_ids = context[:j]`` for each j in turn, as the sampling loop calls them one position
    at a time, on the logits of one forward over the whole context (causal: the logits at j - 1
    are those of a forward over ``context[:j]``).

    ``lag`` > 0 plants a stale context: past the first new token the processors are given
    ``context[:j - lag]`` (the context a draft position sees when verification hands the
    processors the context from before the drafts: ``lag`` 1 is the least stale such a bug can
    be); 0 is transformers' law."""
    captured: dict[str, Any] = {}

    def capture(model: Any, input_ids: Any, logits_processor: Any, **_: Any) -> Any:
        captured["processors"] = logits_processor
        return input_ids

    ids = torch.tensor([list(context)], dtype=torch.long)
    prompt = ids[:, :prompt_len]
    laws = []
    with torch.no_grad():
        model.generate(prompt, attention_mask=torch.ones_like(prompt), custom_generate=capture, **kwargs)
        logits = model(ids).logits[0].to(torch.float32)
        processors = captured["processors"]
        for j in range(prompt_len, len(context) + 1):
            seen = max(prompt_len, j - lag)
            scores = processors(ids[:, :seen], logits[None, j - 1].clone())
            laws.append(_law_of(scores[0], kwargs.get("do_sample", False)))
    return laws


def _law_of(scores: Any, sampled: bool) -> list[float]:
    """The law a sampling step draws from its processed scores: softmax, or one-hot at the argmax
    when greedy."""
    if not sampled:
        p = torch.zeros(scores.shape, dtype=torch.float64)
        p[int(torch.argmax(scores))] = 1.0
        return p.tolist()
    return torch.softmax(scores.double(), -1).tolist()


class HFEngine:
    """``target.generate(...)`` under the engine contract (module docstring). ``last_forwards``
    counts the target's full forwards in the last call (its verification steps); ``generator``
    is the candidate generator class the last call used."""

    def __init__(
        self,
        target: Any,
        sampling: Sampling,
        options: dict[str, Any],
        warmup: bool = False,
        full_layers: int | None = None,
        law_options: dict[str, Any] | None = None,
        horizon: int = 4,
    ) -> None:
        _quiet()
        self.target, self.sampling, self.options = target, sampling, options
        #: the options that shape the law, passed to every call and to the law alike
        self.law_options: dict[str, Any] = hf_kwargs(sampling)
        self._memo: dict[tuple[tuple[int, ...], int], list[float]] = {}
        self.set_law_options(law_options or {})
        self.horizon = horizon  # max_new_tokens of the law (forced_eos_token_id reads max_length)
        #: law options to measure the engine's own options against (``describe``: their effect)
        self.baseline: dict[str, Any] | None = None
        #: whether ``describe`` also measures :meth:`stale_context_effect` (set for options whose
        #: processors read the context and keep no state)
        self.probe_stale = False
        self.last_prompt: tuple[int, ...] | None = None
        self.vocab = int(target.config.get_text_config().vocab_size)
        self.last_forwards = 0
        self.generator: str | None = None
        base = getattr(target, target.base_model_prefix)
        full = full_layers or base.config.num_hidden_layers

        def count(module: Any, args: Any, kwargs: Any) -> None:
            if base.config.num_hidden_layers == full:
                self.last_forwards += 1

        target.register_forward_pre_hook(count, with_kwargs=True)
        real = target._get_candidate_generator

        def spy(*args: Any, **kwargs: Any) -> Any:
            cg = real(*args, **kwargs)
            self.generator = type(cg).__name__
            return cg

        target._get_candidate_generator = spy
        if warmup:
            self.generate([0, 1], 2, 0)

    def set_law_options(self, options: dict[str, Any]) -> None:
        """Add generation options that shape the law (to every call and to the law alike); an
        ``eos_token_id`` among them makes it the engine's end of sequence (``eos_id``: a sample
        may end early on it, the audit pads it) and its pad token."""
        self.law_options.update(options)
        eos = self.law_options.get("eos_token_id")
        if eos is not None:
            self.eos_id = int(eos)
            self.law_options.setdefault("pad_token_id", int(eos))
        self._memo.clear()

    def generate(self, prompt_ids: list[int], max_new_tokens: int, seed: int) -> list[int]:
        ids = torch.tensor([list(prompt_ids)], dtype=torch.long)
        self.last_forwards = 0
        self.last_prompt = tuple(prompt_ids)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            out = self.target.generate(
                ids,
                attention_mask=torch.ones_like(ids),
                max_new_tokens=max_new_tokens,
                **self.law_options,
                **self.options,
            )
        return [int(x) for x in out[0, len(prompt_ids) :]]

    def target_law(self, context: Sequence[int], prompt_len: int | None = None) -> list[float]:
        """Transformers' own law without speculation (:func:`hf_law`) with this engine's options."""
        return self._law(tuple(context), len(context) if prompt_len is None else prompt_len, self.law_options)

    def target_laws_along(
        self, prompt_ids: Sequence[int], tokens: Sequence[int], prompt_len: int | None = None
    ) -> list[list[float]]:
        """Teacher forcing: :meth:`target_law` after ``prompt_ids + tokens[:d]`` for every
        ``d < len(tokens)``, from one forward over the path (:func:`hf_laws_along`)."""
        context = tuple(prompt_ids) + tuple(tokens[:-1])
        n = len(prompt_ids) if prompt_len is None else prompt_len
        if not 0 < n <= len(prompt_ids):
            raise UsageError(
                f"prompt_len: must be between 1 and len(prompt_ids) = {len(prompt_ids)}, got {n}"
            )
        if not tokens:
            return []
        laws = hf_laws_along(self.target, context, n, {**self.law_options, "max_new_tokens": self.horizon})[
            len(prompt_ids) - n :
        ]
        for d, law in enumerate(laws):
            self._memo.setdefault((context[: len(prompt_ids) + d], n), law)
        return laws

    def _law(
        self, context: tuple[int, ...], prompt_len: int, options: dict[str, Any], lag: int = 0
    ) -> list[float]:
        key = (context, prompt_len)
        if options is not self.law_options or lag:
            return hf_law(self.target, context, prompt_len, {**options, "max_new_tokens": self.horizon}, lag)
        if key not in self._memo:
            self._memo[key] = hf_law(
                self.target, context, prompt_len, {**options, "max_new_tokens": self.horizon}
            )
        return self._memo[key]

    def describe(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "candidate_generator": self.generator,
            "law_options": {k: _shown(v) for k, v in self.law_options.items()},
        }
        if self.baseline is not None and self.last_prompt is not None:
            threads = torch.get_num_threads()  # describe() runs after the audit restored them
            torch.set_num_threads(1)
            try:
                out["option_effect_tv"] = self.option_effect(self.last_prompt, self.horizon, self.baseline)
                if self.probe_stale:
                    out["stale_context_tv"] = self.stale_context_effect(self.last_prompt, self.horizon)
            finally:
                torch.set_num_threads(threads)
        return out

    def option_effect(
        self, prompt: tuple[int, ...], tokens: int, base: dict[str, Any], floor: float = 1e-2
    ) -> float:
        """A lower bound on the TV distance between the engine's M-token law after ``prompt`` and
        the same law under the law options ``base`` (:attr:`baseline`: without the one audited): an option
        that changes nothing there cannot be caught ignored (:meth:`law_distance`)."""
        return self.law_distance(prompt, tokens, lambda c: self._law(c, len(prompt), base), floor)

    def stale_context_effect(self, prompt: tuple[int, ...], tokens: int, floor: float = 1e-2) -> float:
        """A lower bound on the TV distance between the engine's M-token law after ``prompt`` and
        the law whose processors, past the first new token, see the context one token short
        (``hf_law``'s ``lag`` 1): the least a verification handing its processors the context from
        before the drafts can move the law in this configuration; 0 means a case in which that
        bug cannot show (:meth:`law_distance`)."""
        return self.law_distance(
            prompt, tokens, lambda c: self._law(c, len(prompt), self.law_options, 1), floor
        )

    def law_distance(
        self,
        prompt: tuple[int, ...],
        tokens: int,
        other: Callable[[tuple[int, ...]], list[float]],
        floor: float = 1e-2,
    ) -> float:
        """A lower bound on the TV distance between the engine's M-token law after ``prompt`` and
        the law whose next-token laws are ``other(context)``. Branches whose probability is below
        ``floor`` under both laws are not expanded (they count with what they differ by)."""
        n, eos = len(prompt), getattr(self, "eos_id", None)
        total = 0.0
        stack: list[tuple[tuple[int, ...], float, float]] = [((), 1.0, 1.0)]
        while stack:
            prefix, pa, pb = stack.pop()
            if len(prefix) == tokens or (eos is not None and eos in prefix) or max(pa, pb) < floor:
                total += abs(pa - pb)
                continue
            la = self._law(prompt + prefix, n, self.law_options)
            lb = other(prompt + prefix)
            stack.extend(
                (prefix + (x,), pa * la[x], pb * lb[x]) for x in range(self.vocab) if la[x] + lb[x] > 0
            )
        return round(total / 2, 4)


def _shown(value: Any) -> Any:
    if callable(value):
        return getattr(value, "__name__", repr(value))
    if isinstance(value, (int, float, str, bool, type(None), list, dict)):
        return value
    return repr(value)


# --------------------------------------------------------------------------- the paths


def assisted(
    sampling: Sampling,
    *,
    schedule: str = "constant",
    tokens: int = 3,
    threshold: float = 0.0,
    ensemble: float | None = None,
    defaults: bool = False,
    law_options: dict[str, Any] | None = None,
) -> HFEngine:
    """An assistant model (``AssistedCandidateGenerator``); ``defaults``: the assistant's
    generation config as transformers fills it (up to 20 drafts, confidence threshold 0.4)."""
    target, assistant = llama(0), llama(1, layers=1)
    if not defaults:
        gc = assistant.generation_config
        gc.num_assistant_tokens = tokens
        gc.num_assistant_tokens_schedule = schedule
        gc.assistant_confidence_threshold = threshold
    options: dict[str, Any] = {"assistant_model": assistant}
    if ensemble is not None:
        options["assistant_ensemble_weight"] = ensemble
    return HFEngine(target, sampling, options, law_options=law_options)


def prompt_lookup(
    sampling: Sampling, *, tokens: int = 3, ngram: int = 2, law_options: dict[str, Any] | None = None
) -> HFEngine:
    """``prompt_lookup_num_tokens`` (``PromptLookupCandidateGenerator``): n-gram lookup drafts."""
    options = {"prompt_lookup_num_tokens": tokens, "max_matching_ngram_size": ngram}
    return HFEngine(llama(0), sampling, options, law_options=law_options)


def early_exit(
    sampling: Sampling, *, layers: int = 3, exit_at: int = 1, law_options: dict[str, Any] | None = None
) -> HFEngine:
    """``assistant_early_exit`` (``EarlyExitCandidateGenerator``): the target's first layers draft."""
    target = llama(0, layers=layers)
    target.generation_config.num_assistant_tokens = 3
    target.generation_config.assistant_confidence_threshold = 0.0
    return HFEngine(
        target, sampling, {"assistant_early_exit": exit_at}, full_layers=layers, law_options=law_options
    )


def universal(
    sampling: Sampling,
    *,
    warmup: bool = False,
    order: str = "alphabetical",
    law_options: dict[str, Any] | None = None,
) -> HFEngine:
    """An assistant with its own tokenizer (a different vocabulary of 10 words, 8 shared):
    ``UniversalSpeculativeDecodingGenerator`` when sampling, ``AssistedCandidateGeneratorDifferent
    Tokenizers`` when greedy. ``warmup``: one call at build time (the first call differs, see
    proofs_notes/thirdparty.md)."""
    target, assistant = llama(0), llama(2, vocab=len(ASSISTANT_WORDS), layers=1)
    gc = assistant.generation_config
    gc.num_assistant_tokens, gc.assistant_confidence_threshold = 3, 0.0
    options = {
        "assistant_model": assistant,
        "tokenizer": word_tokenizer(TARGET_WORDS),
        "assistant_tokenizer": word_tokenizer(ASSISTANT_WORDS, order),
    }
    return HFEngine(target, sampling, options, warmup=warmup, law_options=law_options)


def gemma4_target(seed: int = 0) -> Any:
    from transformers import Gemma4ForCausalLM, Gemma4TextConfig

    return _seeded(seed, lambda: Gemma4ForCausalLM(Gemma4TextConfig(**_gemma4_text(2))).eval())


def _gemma4_text(layers: int) -> dict[str, Any]:
    return dict(
        vocab_size=VOCAB,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=layers,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=16,
        max_position_embeddings=64,
        sliding_window=16,
        bos_token_id=None,
        eos_token_id=None,
        pad_token_id=None,
        initializer_range=0.1,
        hidden_size_per_layer_input=0,
        vocab_size_per_layer_input=0,
    )


def gemma4_assistant(
    sampling: Sampling,
    *,
    tokens: int = 3,
    unified: bool = False,
    ordered_embeddings: bool = False,
    law_options: dict[str, Any] | None = None,
) -> HFEngine:
    """Gemma 4 with a Gemma 4 assistant (``SinglePositionMultiTokenCandidateGenerator``): the
    assistant reads the target's last hidden state and shared KV, one position, several drafts.
    ``unified``: ``Gemma4UnifiedAssistantForCausalLM``; ``ordered_embeddings``: the assistant's
    centroid-masked head (2 centroids, the top 1 kept; token ordering the identity)."""
    from transformers import (
        Gemma4AssistantConfig,
        Gemma4AssistantForCausalLM,
        Gemma4TextConfig,
        Gemma4UnifiedAssistantConfig,
        Gemma4UnifiedAssistantForCausalLM,
    )

    target = gemma4_target()
    config_cls: Any = Gemma4UnifiedAssistantConfig if unified else Gemma4AssistantConfig
    model_cls: Any = Gemma4UnifiedAssistantForCausalLM if unified else Gemma4AssistantForCausalLM
    config = config_cls(
        text_config=Gemma4TextConfig(**_gemma4_text(1)),
        backbone_hidden_size=32,
        num_centroids=2,
        centroid_intermediate_top_k=1,
        use_ordered_embeddings=ordered_embeddings,
    )
    assistant = _seeded(1, lambda: model_cls(config).eval())
    if ordered_embeddings:  # a checkpoint stores the ordering; a fresh model holds uninitialized memory
        assistant.masked_embedding.token_ordering.copy_(torch.arange(VOCAB))
    assistant.generation_config.num_assistant_tokens = tokens
    return HFEngine(target, sampling, {"assistant_model": assistant}, law_options=law_options)


def dflash(sampling: Sampling, *, block: int = 3, law_options: dict[str, Any] | None = None) -> HFEngine:
    """A DFlash drafter (``MuseGlimmerAssistantModel``, ``speculation_type="dflash"``) on a Llama
    target of 9 tokens (id 8 is the drafter's mask token, a target token like the others)."""
    from transformers import MuseGlimmerAssistantConfig, MuseGlimmerAssistantModel

    target = llama(0, vocab=VOCAB + 1)
    config = MuseGlimmerAssistantConfig(  # type: ignore[call-arg, unused-ignore]
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=2,
        head_dim=16,
        block_size=block,
        mask_token_id=VOCAB,
        target_layer_ids=[0, 1],
        bos_token_id=None,
        eos_token_id=None,
        pad_token_id=None,
        max_position_embeddings=64,
        sliding_window=64,
        initializer_range=0.3,
    )
    assistant = _seeded(5, lambda: MuseGlimmerAssistantModel(config).eval())
    options = {"assistant_model": assistant, "speculation_type": "dflash"}
    return HFEngine(target, sampling, options, law_options=law_options)


def shared_uniform(sampling: Sampling) -> HFEngine:
    """The assistant path (3 drafts a step) with one acceptance uniform shared by a step's drafts
    planted in ``_speculative_sampling`` (:func:`.hf_mutants.shared_uniform`)."""
    from specproof.properties.engine.adapters import hf_mutants

    return hf_mutants.shared_uniform(assisted(sampling))


def engines() -> list[EngineSpec]:
    """The ``hf`` group (each path with its own options, :mod:`.hf_paths`) and the ``hf-options``
    group (every candidate generator x every law-shaping generation option, :mod:`.hf_options`)."""
    from specproof.properties.engine.adapters import hf_options, hf_paths

    return hf_paths.paths() + hf_options.engines()


# --------------------------------------------------------------------------- checkpoints on disk

_CHECKPOINTS: dict[str, str] = {}


def checkpoints() -> dict[str, str]:
    """The target and a 1-layer draft (:func:`llama` seeds 0 and 1) saved with ``save_pretrained``
    in a temporary folder (once per process), for engines that load models from disk (vLLM,
    SGLang). Returns ``{"target": path, "draft": path}``."""
    if not _CHECKPOINTS:
        import tempfile

        root = tempfile.mkdtemp(prefix="specproof-engine-")
        for name, model in (("target", llama(0)), ("draft", llama(1, layers=1))):
            path = f"{root}/{name}"
            model.save_pretrained(path)
            _CHECKPOINTS[name] = path
    return dict(_CHECKPOINTS)


def checkpoint_law(sampling: Sampling) -> Callable[[Sequence[int]], list[float]]:
    """``target_law`` of the saved target: the same weights, run by transformers, no speculation."""
    model = llama(0)

    @torch.no_grad()
    def law(context: Sequence[int]) -> list[float]:
        logits = model(torch.tensor([list(context)], dtype=torch.long)).logits[0, -1]
        return sampling.law(logits.double().tolist())

    return law
