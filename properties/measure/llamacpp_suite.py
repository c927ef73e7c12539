"""The served llama.cpp configurations the project audits, and the table of their verdicts.

Each :class:`ServerConfig` is one way to run ``llama-server`` on the project's tiny models
(:mod:`.gguf_models`): with the draft model (``draft-simple``, the server's draft-model
speculation) or with one of its n-gram speculation types, under several sampling settings; or
llama-cpp-python's server on the same library with its prompt-lookup draft model (profile
``llamacpp-python``: its API answers in text, through the tiny vocabulary's token map, and says
nothing of what it drafted, so speculation is not observable there).
:func:`audit_config` starts it and a twin with speculation off on loopback, and audits it through
HTTP (:mod:`.engine`); :func:`table` runs every configuration and :func:`markdown` writes the
dated table ``specproof llamacpp table`` prints (docs/endpoint-audit.md quotes it). A
llama-cpp-python configuration on a machine without it installed is listed in the table as
skipped, with the reason and the command that installs it.

The n-gram types draft from the tokens seen so far, so their cases use a prompt that repeats a
pattern of the target's own greedy continuation, the longest horizon (M = 12) and predictable
settings (T = 0.3, greedy), where lookups find matches and some drafts are accepted; at T = 1 on
the untrained tiny model they draft little and accept almost nothing, which the audit would
rightly call ``no_speculation``. Prompt lookup (llama-cpp-python) likewise drafts from the
context (the tokens that followed an earlier occurrence of its last one or two), so its cases use
the repeating prompt too: a sample that follows the prompt's cycle, or repeats any of its tokens,
has drafts to verify (tests/test_endpoint_llamacpp.py shows from the server's perf counters that
it drafts there).
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import functools
import json
import math
import tempfile
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from specproof.properties.endpoint.engine import Endpoint, endpoint_spec
from specproof.properties.endpoint.options import EndpointOptions
from specproof.properties.engine.audit import EngineAuditConfig, audit_engine
from specproof.properties.engine.contract import GREEDY, T07, T1, EngineSpec, Sampling, Seq
from specproof.properties.engine.results import EngineAuditResult
from specproof.properties.servers import gguf_models, llamacpp, llamacpp_python
from specproof.properties.verdicts import CheckStatus
from specproof.reference.errors import UsageError
from specproof.reference.sampling import Grammar

PLAIN: tuple[Seq, ...] = ((1, 2),)
#: prompts that repeat a pattern of the target's own greedy continuation, so that n-gram lookups
#: find matches within the horizon: a cycle of three tokens, and the run of 11s the target falls
#: into (the map- and cache-based types need the run; ngram-simple drafts on the cycle)
REPEATING: tuple[Seq, ...] = ((5, 1, 9, 8, 7, 10, 8, 7, 10, 8),)
ELEVENS: tuple[Seq, ...] = ((3, 2, 12, 8, 7, 10, 10, 10, 10, 11, 11, 11),)
#: a prompt of 40 tokens, five chunks of the chunked configuration's batch of 8
LONG_PROMPT: Seq = tuple((i * 7) % 15 + 1 for i in range(40))
NGRAM_SETTINGS = (Sampling(0.3), GREEDY)
DRAFT_SETTINGS = (T1, T07, Sampling(0.7, top_k=5), Sampling(1.0, top_p=0.8), Sampling(1.0, min_p=0.1), GREEDY)
#: stop strings over the tiny vocabulary's texts: one letter, and a pair the target often emits
#: after the samplers' prompt (one token each: the stop spans two tokens)
STOPS = Sampling(1.0, stop=("c", "hg"), texts=gguf_models.VOCAB)
#: llama-server's other samplers: penalties, logit bias, end of sequence, a GBNF grammar, stop strings
SAMPLER_SETTINGS = (
    Sampling(1.0, repetition_penalty=1.5),
    Sampling(1.0, presence_penalty=0.7, frequency_penalty=0.4),
    Sampling(1.0, logit_bias=((3, 2.0), (5, -math.inf))),
    Sampling(1.0, eos=gguf_models.EOS_ID),
    Sampling(
        1.0, eos=gguf_models.EOS_ID, grammar=Grammar.from_regex("[a-c]([d-f][a-c])*", gguf_models.VOCAB)
    ),
    STOPS,
)
#: what profile llamacpp-python offers (and the law recipe was checked on, on a server without a
#: draft model): temperature, the cut-offs (at T = 0.7, where their order against the temperature
#: matters: llama.cpp cuts the temperature-1 law), greedy, the end of sequence allowed (T = 1 with it
#: is where its reported probabilities, the raw law, are the law sampled), presence and frequency
#: penalties, logit bias, min_new_tokens
LCP_SETTINGS = (
    T1,
    T07,
    Sampling(0.7, top_k=5),
    Sampling(0.7, top_p=0.8),
    Sampling(0.7, min_p=0.1),
    GREEDY,
    Sampling(1.0, eos=gguf_models.EOS_ID),
    Sampling(1.0, presence_penalty=0.7, frequency_penalty=0.4),
    Sampling(1.0, logit_bias=((3, 2.0), (5, -math.inf))),
    Sampling(1.0, eos=gguf_models.EOS_ID, min_new_tokens=3),
)
LLAMA_SERVER, LLAMA_CPP_PYTHON = "llama-server", "llama-cpp-python"


@dataclass(frozen=True)
class ServerConfig:
    name: str
    doc: str
    args: tuple[str, ...]
    draft: bool = False  # serve the draft model beside the target (llama-cpp-python: prompt lookup)
    prompts: tuple[Seq, ...] = PLAIN
    samplings: tuple[Sampling, ...] = (T1, T07)
    tokens: int = 4
    server: str = LLAMA_SERVER  # or LLAMA_CPP_PYTHON
    num_pred_tokens: int = 10  # llama-cpp-python's prompt lookup: tokens drafted per lookup
    loads: tuple[int, ...] = ()  # the load axis's levels (requests in flight)
    prefix_cache: bool = False  # the prefix-cache axis: every case cold and with cache_prompt
    completions: int = 1  # the completions axis: every case with one and with this many (n_cmpl)
    #: the acceptance oracle (greedy_chain): the drafts per step of the server's greedy draft
    #: chain, whose law the project knows (0: not declared)
    greedy_drafts: int = 0
    #: serve the tiny LoRA adapter of the target (``--lora``) on the server and its twin: the load
    #: axis's background requests then ask it at another scale (batches mixing adapters)
    lora: bool = False
    #: the LoRA adapter scales every audited request asks for (``--adapter``; needs ``lora``)
    adapter: tuple[tuple[int, float], ...] = ()

    @property
    def profile(self) -> str:
        return "llamacpp-python" if self.server == LLAMA_CPP_PYTHON else "llamacpp"

    def unavailable(self) -> str | None:
        """Why this configuration cannot run here (None: it can)."""
        if self.server == LLAMA_CPP_PYTHON and not llamacpp_python.is_installed():
            return (
                f"llama-cpp-python {llamacpp_python.VERSION} is not installed with its library "
                "(specproof llamacpp install-python)"
            )
        return None


CONFIGS: tuple[ServerConfig, ...] = (
    ServerConfig(
        "llama-server.draft",
        "draft model, --spec-type draft-simple, 4 drafts per step (greedy drafts, sample-and-compare)",
        ("--spec-draft-n-max", "4"),
        draft=True,
        samplings=DRAFT_SETTINGS,
        greedy_drafts=4,
    ),
    ServerConfig(
        "llama-server.draft.samplers",
        "draft model as above, with llama-server's other samplers: penalties, logit bias, end of sequence, "
        "a GBNF grammar, stop strings",
        ("--spec-draft-n-max", "4"),
        draft=True,
        prompts=((1, 2, 1),),
        samplings=SAMPLER_SETTINGS,
    ),
    ServerConfig(
        "llama-server.draft.parallel",
        "draft model as above, 8 slots (-np 8, 256 context tokens each): the load axis's server, "
        "audited alone and with 8 requests in flight (--load 1 --load 8)",
        ("--spec-draft-n-max", "4", "-np", "8", "-c", "2048"),
        draft=True,
        loads=(1, 8),
        greedy_drafts=4,
    ),
    ServerConfig(
        "llama-server.draft.lora",
        "draft model as above, 8 slots, a LoRA adapter of the target (--lora, applied at scale 1 to "
        "every request that names none): alone and with 8 in flight beside background requests that "
        "ask the adapter at scale 0, so batches mix adapters (--load 1 --load 8)",
        ("--spec-draft-n-max", "4", "-np", "8", "-c", "2048"),
        draft=True,
        loads=(1, 8),
        greedy_drafts=4,
        lora=True,
    ),
    ServerConfig(
        "llama-server.draft.lora.scaled",
        "draft model as above, the LoRA adapter held and every audited request asking it at scale 0.5 "
        "(--adapter 0=0.5: the request's lora field; the law read from the twin with the same request)",
        ("--spec-draft-n-max", "4"),
        draft=True,
        greedy_drafts=4,
        lora=True,
        adapter=((0, 0.5),),
    ),
    ServerConfig(
        "llama-server.draft.cache",
        "draft model as above, every case cold and after a prefix-cache hit (cache_prompt: the slot "
        "reuses the prompt's KV, its own and the draft model's; --prefix-cache)",
        ("--spec-draft-n-max", "4"),
        draft=True,
        prefix_cache=True,
        greedy_drafts=4,
    ),
    ServerConfig(
        "llama-server.draft.completions",
        "draft model as above, 4 slots (-np 4): every case with one completion a request and with 4 "
        "(n_cmpl 4, completion j seeded by seed + j; --completions 4)",
        ("--spec-draft-n-max", "4", "-np", "4", "-c", "1024"),
        draft=True,
        completions=4,
    ),
    ServerConfig(
        "llama-server.draft.chunked",
        "draft model as above, a 40-token prompt read in chunks of 8 (-b 8 -ub 8: the target's and the "
        "draft model's prompt KV written chunk by chunk)",
        ("--spec-draft-n-max", "4", "-b", "8", "-ub", "8"),
        draft=True,
        prompts=(LONG_PROMPT,),
        greedy_drafts=4,
    ),
    ServerConfig(
        "llama-server.ngram-simple",
        "--spec-type ngram-simple, lookup 2, draft 4",
        ("--spec-type", "ngram-simple", "--spec-ngram-simple-size-n", "2", "--spec-ngram-simple-size-m", "4"),
        prompts=REPEATING,
        samplings=NGRAM_SETTINGS,
        tokens=12,
    ),
    ServerConfig(
        "llama-server.ngram-map-k",
        "--spec-type ngram-map-k, lookup 2, draft 4",
        ("--spec-type", "ngram-map-k", "--spec-ngram-map-k-size-n", "2", "--spec-ngram-map-k-size-m", "4"),
        prompts=ELEVENS,
        samplings=NGRAM_SETTINGS,
        tokens=12,
    ),
    ServerConfig(
        "llama-server.ngram-map-k4v",
        "--spec-type ngram-map-k4v, lookup 2, draft 4",
        ("--spec-type", "ngram-map-k4v", "--spec-ngram-map-k4v-size-n", "2",
         "--spec-ngram-map-k4v-size-m", "4"),
        prompts=ELEVENS,
        samplings=NGRAM_SETTINGS,
        tokens=12,
    ),
    ServerConfig(
        "llama-server.ngram-mod",
        "--spec-type ngram-mod, match 2, drafts of 1 to 4",
        ("--spec-type", "ngram-mod", "--spec-ngram-mod-n-match", "2", "--spec-ngram-mod-n-min", "1",
         "--spec-ngram-mod-n-max", "4"),
        prompts=ELEVENS,
        samplings=NGRAM_SETTINGS,
        tokens=12,
    ),
    ServerConfig(
        "llama-server.ngram-cache",
        "--spec-type ngram-cache (its defaults)",
        ("--spec-type", "ngram-cache"),
        prompts=ELEVENS,
        samplings=NGRAM_SETTINGS,
        tokens=12,
    ),
    ServerConfig(
        "llama-cpp-python.lookup-4",
        "llama-cpp-python's server, --draft_model prompt-lookup-decoding (2-gram lookup), 4 tokens drafted",
        (),
        draft=True,
        prompts=REPEATING,
        samplings=LCP_SETTINGS,
        server=LLAMA_CPP_PYTHON,
        num_pred_tokens=4,
    ),
    ServerConfig(
        "llama-cpp-python.lookup-10",
        "llama-cpp-python's server, --draft_model prompt-lookup-decoding (2-gram lookup), 10 tokens drafted",
        (),
        draft=True,
        prompts=REPEATING,
        samplings=LCP_SETTINGS,
        server=LLAMA_CPP_PYTHON,
        num_pred_tokens=10,
    ),
    ServerConfig(
        "llama-cpp-python.plain",
        "llama-cpp-python's server without a draft model: the law recipe checked against a twin",
        (),
        prompts=REPEATING,
        samplings=LCP_SETTINGS,
        server=LLAMA_CPP_PYTHON,
    ),
)  # fmt: skip
BY_NAME = {c.name: c for c in CONFIGS}


class Table(list[EngineAuditResult]):
    """The audits :func:`table` ran, and the configurations it skipped (name, reason)."""

    def __init__(self, results: Sequence[EngineAuditResult] = (), skipped: Sequence[tuple[str, str]] = ()):
        super().__init__(results)
        self.skipped = list(skipped)


def models(folder: Path | str) -> dict[str, Any]:
    """The tiny target and draft GGUF files (seed 0) in ``folder``, and the target's LoRA adapter
    (``lora``: :func:`.gguf_models.lora_weights`)."""
    files = gguf_models.write_models(folder, seed=0)
    lora = gguf_models.write_lora(
        Path(folder) / "lora.gguf", gguf_models.lora_weights(0), "specproof-tiny-lora-0"
    )
    return {**files, "lora": lora}


def audit_config(
    config: ServerConfig,
    audit: EngineAuditConfig,
    files: dict[str, Any] | None = None,
    samplings: Sequence[Sampling] | None = None,
    progress: Callable[[str, float], None] | None = None,
    announce: Callable[[str], None] | None = None,
    each: bool = False,
) -> list[EngineAuditResult]:
    """Start the configuration's server and a speculation-off twin of the same target on
    loopback, audit the server through HTTP (all its settings in one audit, or with ``each``
    one audit per setting, named ``server [setting]``), stop both."""
    settings = list(samplings or config.samplings)
    groups = [[s] for s in settings] if each else [settings]
    out = []
    with tempfile.TemporaryDirectory(prefix="specproof-gguf-") as tmp:
        files = files or models(tmp)
        with _servers(config, files) as (url, twin):
            for group in groups:
                name = f"{config.name} [{group[0].label}]" if each else config.name
                endpoint = Endpoint(
                    EndpointOptions(
                        (url,),
                        config.profile,
                        twin=twin,
                        concurrency=4,
                        loads=config.loads,
                        prefix_cache=config.prefix_cache,
                        completions=config.completions,
                        adapter=config.adapter,
                    ),
                    token_map=gguf_models.VOCAB,
                )
                try:
                    spec = endpoint_spec(endpoint, config.prompts, group, config.tokens, name)
                    if config.greedy_drafts:
                        spec = with_acceptance_oracle(spec, config.greedy_drafts, files)
                    out.append(audit_engine(spec, audit, progress=progress, announce=announce))
                finally:
                    endpoint.close()
    return out


def with_acceptance_oracle(spec: EngineSpec, drafts: int, files: dict[str, Any]) -> EngineSpec:
    """The served engine declaring llama-server's draft-simple rule for the acceptance oracle
    (properties/engine/acceptance.py, ``greedy_chain``): each step drafts the draft model's argmax
    chain, at most ``drafts`` tokens and one fewer than the tokens left, after a first token
    sampled alone, and keeps each draft the target's own sample equals. The draft law is the
    draft GGUF's exact law, computed here (the server does not give it)."""
    weights = gguf_models.read_weights(files["draft"])

    @functools.cache
    def law(context: tuple[int, ...]) -> list[float]:
        return [float(v) for v in gguf_models.next_token_law(weights, list(context))]

    def build(s: Sampling) -> Any:
        engine: Any = spec.build(s)
        engine.draft_law = lambda context: law(tuple(int(x) for x in context))
        engine.acceptance_rule = {"rule": "greedy_chain", "drafts": drafts, "first": 1, "leave": 1}
        return engine

    return dataclasses.replace(spec, build=build)


@contextlib.contextmanager
def _servers(config: ServerConfig, files: dict[str, Any]) -> Iterator[tuple[str, str]]:
    """The configuration's server and its twin (the same target, no speculation), on loopback."""
    if config.server == LLAMA_CPP_PYTHON:
        draft = llamacpp_python.DRAFT if config.draft else None
        with (
            llamacpp_python.start_server(files["target"], draft, config.num_pred_tokens) as url,
            llamacpp_python.start_server(files["target"], None) as twin,
        ):
            yield url, twin
        return
    binary = llamacpp.ensure_built(progress=lambda m: None)
    draft_file = files["draft"] if config.draft else None
    lora = ("--lora", str(files["lora"])) if config.lora else ()
    args = (*config.args, *lora)
    with (
        llamacpp.start_server(binary, files["target"], draft=draft_file, extra_args=args) as url,
        llamacpp.start_server(binary, files["target"], extra_args=lora) as twin,
    ):
        yield url, twin


#: the long-horizon audit (``specproof llamacpp tokens``): the draft-model server generating 128
#: tokens a request, through the token test (the cells test stops at M = 12)
LONG = ServerConfig(
    "llama-server.draft@128",
    "draft model, --spec-type draft-simple, 4 drafts per step, 128 tokens a request",
    ("--spec-draft-n-max", "4"),
    draft=True,
    prompts=((1, 2),),
    samplings=(T1, T07),
    tokens=128,
)


def served(engine: Any, prompt: Seq, tokens: int, seeds: Sequence[int]) -> list[dict[str, Any]]:
    """Requests served by ``engine`` (one setting of a served engine), as a deployer logs them: the
    prompt, the tokens served and the setting, one traffic record each (no seed recorded)."""
    s = engine.sampling
    setting = {"temperature": s.temperature}
    setting.update({k: v for k, v in (("top_k", s.top_k), ("top_p", s.top_p), ("min_p", s.min_p)) if v})
    return [
        {"prompt": list(prompt), "tokens": list(g.tokens), "sampling": setting}
        for g in engine.generate_many(list(prompt), tokens, seeds)
    ]


@dataclass
class LongAudit:
    """What :func:`long_audit` found: the endpoint audit at M = 128 and the traffic audit."""

    endpoint: EngineAuditResult
    traffic: Any  # TrafficResult
    traffic_file: str

    def to_json(self) -> dict[str, Any]:
        return {
            "configuration": LONG.name,
            "doc": LONG.doc,
            "endpoint": self.endpoint.to_json(),
            "traffic": self.traffic.to_json(),
        }

    def summary(self) -> str:
        return self.endpoint.summary() + "\n" + self.traffic.summary()


def _traffic_requests(audit: EngineAuditConfig, result: Any) -> int:
    """Requests per setting for the traffic audit of :func:`long_audit`: its plan's tokens per
    setting (one case per setting, not pooled: :func:`.traffic.audit_traffic`) in requests of
    M tokens on each prompt, and no fewer than the endpoint audit planned per case (which pools
    its cases, so plans fewer). A fixed sample size (``audit.samples``) is taken as it is."""
    from specproof.properties.tokens import power

    planned = max(c.planned for c in result.cases)
    if audit.samples:
        return planned
    tokens = power.plan_tokens(audit.tv, audit.alpha, audit.power, len(LONG.samplings))
    return max(planned, math.ceil(tokens / (LONG.tokens * len(LONG.prompts))))


def long_audit(
    audit: EngineAuditConfig,
    records: int | None,
    traffic_file: Path | str,
    progress: Callable[[str, float], None] | None = None,
) -> LongAudit:
    """:data:`LONG` and its twin on loopback: the endpoint audit at M = 128 under ``audit``; then
    ``records`` requests per setting (None: what the traffic audit's plan asks of each setting,
    and no fewer than the endpoint audit planned per case: :func:`_traffic_requests`) served by the
    speculative server (seeds 1,000,000 on, none of
    the audit's), written to ``traffic_file`` (JSON lines) and audited as recorded traffic against
    the twin, with the same plan."""
    from specproof.properties.endpoint.traffic import audit_traffic, read_traffic, twin_laws

    if records is not None and records < 1:
        raise UsageError(f"records: at least 1 request per setting, got {records}")
    path = Path(traffic_file)
    with tempfile.TemporaryDirectory(prefix="specproof-gguf-") as tmp:
        files = models(tmp)
        with _servers(LONG, files) as (url, twin):
            endpoint = Endpoint(
                EndpointOptions((url,), LONG.profile, twin=twin, concurrency=4), token_map=gguf_models.VOCAB
            )
            try:
                spec = endpoint_spec(endpoint, LONG.prompts, LONG.samplings, LONG.tokens, LONG.name)
                result = audit_engine(spec, audit, progress=progress)
                rows: list[dict[str, Any]] = []
                n = records if records is not None else _traffic_requests(audit, result)
                seeds = range(1_000_000, 1_000_000 + n)
                for s in LONG.samplings:
                    engine = spec.build(s)
                    rows += [r for p in LONG.prompts for r in served(engine, p, LONG.tokens, seeds)]
            finally:
                endpoint.close()
            path.write_text("".join(json.dumps(r) + "\n" for r in rows))
            options = EndpointOptions((twin,), LONG.profile, concurrency=4)
            with Endpoint(options, token_map=gguf_models.VOCAB) as laws:
                laws.speculation_off = True  # the twin: its laws may be read along a path it generates
                logged = read_traffic(str(path), laws.vocab)
                traffic = audit_traffic(logged, twin_laws(laws), laws.vocab, audit, source=str(path))
    return LongAudit(result, traffic, str(path))


def table(
    audit: EngineAuditConfig,
    names: Sequence[str] | None = None,
    progress: Callable[[str], None] | None = None,
) -> list[EngineAuditResult]:
    """Every configuration (or those named), one audit per setting, under ``audit``; one that
    cannot run here (:meth:`ServerConfig.unavailable`) is listed in ``skipped`` with the reason."""
    chosen = [BY_NAME[n] for n in names] if names else list(CONFIGS)
    out = Table()
    with tempfile.TemporaryDirectory(prefix="specproof-gguf-") as tmp:
        files = models(tmp)
        for config in chosen:
            why = config.unavailable()
            if why is not None:
                out.skipped.append((config.name, why))
                if progress:
                    progress(f"{config.name}: skipped: {why}")
                continue
            if progress:
                progress(f"{config.name}: {config.doc}")
            out += audit_config(config, audit, files, each=True)
    return out


def long_markdown(found: LongAudit, audit: EngineAuditConfig) -> str:
    """The long-horizon audit as a dated paragraph and table (``specproof llamacpp tokens``)."""
    info = llamacpp.info()
    r, t = found.endpoint, found.traffic
    lines = [
        f"llama.cpp commit {info['llama_cpp_commit']}, audited {datetime.date.today().isoformat()} through "
        f"HTTP on loopback, tiny target and draft models (V = 16, seed 0): `{LONG.name}` ({LONG.doc}); "
        f"the token test, alpha {audit.alpha:g}, planned for a per-token TV of {audit.tv:g} at power "
        f"{audit.power:g}, seed {audit.seed}.",
        "",
        "| audit | verdict | samples / records | tokens | detects a per-token TV of | witness |",
        "|---|---|---:|---:|---|---|",
    ]
    for c in r.cases:
        det = c.token_detects or {}
        lines.append(
            f"| endpoint `{c.case.name}` | **{r.verdict.value}** | {c.n:,} | {c.observed_tokens:,} | "
            f"{det.get('mean', 1):.3g} (sharpening), {det.get('greedy', 1):.3g} (to the argmax) | "
            f"{r.short_witness()} |"
        )
    for s in t.settings:
        lines.append(
            f"| traffic `{s['setting']}` | **{t.verdict.value}** | {s['records']:,} | {s['tokens']:,} | "
            f"{s['detects']['mean']:.3g} (sharpening), {s['detects']['greedy']:.3g} (to the argmax) | "
            f"{(t.finding or {}).get('text', '')} |"
        )
    sp = r.speculation
    lines += [
        "",
        f"Speculation: {sp.drafted:,} tokens drafted, {sp.accepted:,} accepted. Reported probabilities: "
        f"{r.reports.status}. Traffic: {t.records:,} requests served by the speculative server, "
        f"scored against the twin's laws in {t.seconds:.0f} s.",
    ]
    return "\n".join(lines)


def markdown(results: Sequence[EngineAuditResult], audit: EngineAuditConfig) -> str:
    """The dated table of verdicts, with what each configuration is and the plan it ran."""
    info = llamacpp.info()
    day = datetime.date.today().isoformat()
    lines = [
        f"llama.cpp commit {info['llama_cpp_commit']} (llama-cpp-python {info['llama_cpp_python']} sdist), "
        f"audited {day} through HTTP on loopback, tiny target and draft models (V = 16, seed 0); "
        f"plan: alpha {audit.alpha:g} per server, TV {audit.tv:g} at power {audit.power:g}, "
        f"{audit.report_samples} report and control samples per case.",
        "",
    ]
    lcp = [c.name for c in CONFIGS if c.server == LLAMA_CPP_PYTHON]
    if any(r.engine.split(" [")[0] in lcp for r in results) or getattr(results, "skipped", None):
        lines += [
            f"`{LLAMA_CPP_PYTHON}.*`: llama-cpp-python {llamacpp_python.VERSION}'s server on a libllama "
            "built from the same sdist (profile `llamacpp-python`): its answers carry no draft or acceptance "
            "counters (speculation not observable), and the probabilities it reports are the raw law, "
            "checked only at T = 1 with end of sequence allowed (`not_offered` elsewhere).",
            "",
        ]
    lines += [
        "| server [setting] | prompt | verdict | samples | drafted / accepted | reported probabilities | "
        "tolerance (control) | same seed, spec on vs off | witness |",
        "|---|---|---|---:|---|---|---|---|---|",
    ]
    for r in results:
        sp, rep, ctl = r.speculation, r.reports, r.control
        settings = ", ".join(sorted({" ".join(map(str, c.case.prompt)) for c in r.cases}))
        tol = "" if ctl is None or ctl.tolerance is None else f"{ctl.tolerance:.2g}"
        tol += (
            ""
            if ctl is None or ctl.tolerance is None or ctl.numeric
            else " (not rounding: the twin misreports)"
        )
        same = "" if ctl is None or not ctl.coupled else f"{ctl.identical}/{ctl.coupled}"
        report = rep.status if rep.status != CheckStatus.WRONG else f"wrong (up to {rep.max_error:.2g})"
        counted = (
            "not observable" if sp.status == CheckStatus.UNOBSERVABLE else f"{sp.drafted:,} / {sp.accepted:,}"
        )
        lines.append(
            f"| `{r.engine}` | {settings} | **{r.verdict.value}** | {r.samples:,} | "
            f"{counted} | {report} | {tol} | {same} | {r.short_witness()} |"
        )
    for name, why in getattr(results, "skipped", ()):
        lines.append(f"| `{name}` | | skipped: {why} | | | | | | |")
    return "\n".join(lines) + "\n"
