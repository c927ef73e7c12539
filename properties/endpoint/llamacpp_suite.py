"""The served llama.cpp configurations the project audits, and the table of their verdicts.

Each :class:`ServerConfig` is one way to run ``llama-server`` on the project's tiny models
(:mod:`.gguf_models`): with the draft model (``draft-simple``, the server's draft-model
speculation) or with one of its n-gram speculation types, under several sampling settings.
:func:`audit_config` starts it and a twin with speculation off on loopback, and audits it through
HTTP (:mod:`.engine`); :func:`table` runs every configuration and :func:`markdown` writes the
dated table ``specproof llamacpp table`` prints (docs/endpoint-audit.md quotes it).

The n-gram types draft from the tokens seen so far, so their cases use a prompt that repeats a
pattern of the target's own greedy continuation, the longest horizon (M = 12) and predictable
settings (T = 0.3, greedy), where lookups find matches and some drafts are accepted; at T = 1 on
the untrained tiny model they draft little and accept almost nothing, which the audit would
rightly call ``no_speculation``.
"""

from __future__ import annotations

import datetime
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from specproof.properties.endpoint import gguf_models, llamacpp
from specproof.properties.endpoint.engine import Endpoint, endpoint_spec
from specproof.properties.engine.audit import EngineAuditConfig, audit_engine
from specproof.properties.engine.contract import GREEDY, T07, T1, Sampling, Seq
from specproof.properties.engine.results import EngineAuditResult

PLAIN: tuple[Seq, ...] = ((1, 2),)
#: prompts that repeat a pattern of the target's own greedy continuation, so that n-gram lookups
#: find matches within the horizon: a cycle of three tokens, and the run of 11s the target falls
#: into (the map- and cache-based types need the run; ngram-simple drafts on the cycle)
REPEATING: tuple[Seq, ...] = ((5, 1, 9, 8, 7, 10, 8, 7, 10, 8),)
ELEVENS: tuple[Seq, ...] = ((3, 2, 12, 8, 7, 10, 10, 10, 10, 11, 11, 11),)
NGRAM_SETTINGS = (Sampling(0.3), GREEDY)
DRAFT_SETTINGS = (T1, T07, Sampling(0.7, top_k=5), Sampling(1.0, top_p=0.8), Sampling(1.0, min_p=0.1), GREEDY)


@dataclass(frozen=True)
class ServerConfig:
    name: str
    doc: str
    args: tuple[str, ...]
    draft: bool = False  # serve the draft model beside the target
    prompts: tuple[Seq, ...] = PLAIN
    samplings: tuple[Sampling, ...] = (T1, T07)
    tokens: int = 4


CONFIGS: tuple[ServerConfig, ...] = (
    ServerConfig(
        "llama-server.draft",
        "draft model, --spec-type draft-simple, 4 drafts per step (greedy drafts, sample-and-compare)",
        ("--spec-draft-n-max", "4"),
        draft=True,
        samplings=DRAFT_SETTINGS,
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
)  # fmt: skip
BY_NAME = {c.name: c for c in CONFIGS}


def models(folder: Path | str) -> dict[str, Any]:
    """The tiny target and draft GGUF files (seed 0) in ``folder``."""
    return gguf_models.write_models(folder, seed=0)


def audit_config(
    config: ServerConfig,
    audit: EngineAuditConfig,
    files: dict[str, Any] | None = None,
    samplings: Sequence[Sampling] | None = None,
    progress: Callable[[str, float], None] | None = None,
    announce: Callable[[str], None] | None = None,
) -> EngineAuditResult:
    """Start the configuration's server and a speculation-off twin of the same target on
    loopback, audit the server through HTTP, stop both."""
    binary = llamacpp.ensure_built(progress=lambda m: None)
    with tempfile.TemporaryDirectory(prefix="specproof-gguf-") as tmp:
        files = files or models(tmp)
        draft = files["draft"] if config.draft else None
        with (
            llamacpp.start_server(binary, files["target"], draft=draft, extra_args=config.args) as url,
            llamacpp.start_server(binary, files["target"]) as twin,
        ):
            endpoint = Endpoint([url], "llamacpp", target=twin, concurrency=4)
            try:
                spec = endpoint_spec(
                    endpoint, config.prompts, samplings or config.samplings, config.tokens, config.name
                )
                return audit_engine(spec, audit, progress=progress, announce=announce)
            finally:
                endpoint.close()


def table(
    audit: EngineAuditConfig,
    names: Sequence[str] | None = None,
    progress: Callable[[str], None] | None = None,
) -> list[EngineAuditResult]:
    """Every configuration (or those named), audited under ``audit``."""
    chosen = [BY_NAME[n] for n in names] if names else list(CONFIGS)
    out = []
    with tempfile.TemporaryDirectory(prefix="specproof-gguf-") as tmp:
        files = models(tmp)
        for config in chosen:
            if progress:
                progress(f"{config.name}: {config.doc}")
            out.append(audit_config(config, audit, files))
    return out


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
        "| server | settings | verdict | samples | drafted / accepted | reported probabilities | "
        "tolerance (control) | same seed, spec on vs off | witness |",
        "|---|---|---|---:|---|---|---|---|---|",
    ]
    for r in results:
        sp, rep, ctl = r.speculation, r.reports, r.control
        settings = ", ".join(sorted({c.case.sampling.label for c in r.cases}))
        tol = "" if ctl is None or ctl.tolerance is None else f"{ctl.tolerance:.2g}"
        same = "" if ctl is None or not ctl.coupled else f"{ctl.identical}/{ctl.coupled}"
        report = rep.status if rep.status != "wrong" else f"wrong (up to {rep.max_error:.2g})"
        lines.append(
            f"| {r.engine} | {settings} | **{r.verdict.value}** | {r.samples:,} | "
            f"{sp.drafted:,} / {sp.accepted:,} | {report} | {tol} | {same} | {r.short_witness()} |"
        )
    return "\n".join(lines) + "\n"
