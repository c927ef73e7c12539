"""How a served engine is reached, whatever the door: :class:`EndpointOptions` (its URLs, the
server family, the speculation-off ``twin``, the vocabulary, concurrency, timeout, retries; the
token texts are the request's, :class:`~specproof.properties.engine.request.EngineRequest`).
Defaults written once here; the command-line and pytest spellings in ``FLAGS``
(:mod:`specproof.properties.options`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from specproof.properties.endpoint.families import PROFILES
from specproof.properties.engine.completions import check_completions
from specproof.properties.engine.config import check_adapter, check_loads
from specproof.properties.options import Flag
from specproof.reference.errors import UsageError


def parse_adapter(text: str) -> tuple[int, float]:
    """``ID=SCALE`` (``--adapter 0=0.5``) as an (id, scale) pair."""
    name, sep, scale = text.partition("=")
    try:
        if not sep:
            raise ValueError
        return int(name), float(scale)
    except ValueError:
        raise UsageError(f"--adapter: expected ID=SCALE (e.g. 0=0.5), got {text!r}") from None


@dataclass(frozen=True)
class EndpointOptions:
    """How a served engine is reached (module docstring)."""

    urls: tuple[str, ...] = ()  # the endpoint and its replicas (one deployment)
    profile: str = "llamacpp"  # the server family
    twin: str | None = None  # the same model served with speculation off
    vocab: int | None = None  # where the server does not say it
    concurrency: int = 8
    timeout: float = 60.0  # seconds per request
    retries: int = 3  # retries of a request that failed in transit
    #: requests in flight to audit every case at (the load axis: specproof.properties.engine.load)
    loads: tuple[int, ...] = ()
    #: audit every case cold and after a prefix-cache hit (the prefix-cache axis)
    prefix_cache: bool = False
    #: audit every case with one completion a request and with this many (the completions axis)
    completions: int = 1
    #: LoRA adapter scales every audited request asks for ((id, scale) pairs; empty: the server's own)
    adapter: tuple[tuple[int, float], ...] = ()

    FLAGS: ClassVar[dict[str, Flag]] = {
        "urls": Flag(
            "URL",
            "the server's URL (the command line's TARGET); more replicas with --replica",
            pytest="--specproof-endpoint",
            repeat=True,
            example=("http://127.0.0.1:1",),
        ),
        "profile": Flag(
            "--profile",
            "the server family",
            choices=PROFILES,
            example="vllm",
        ),
        "twin": Flag(
            "--twin",
            "the same model served with speculation off: the law is read there, and the control "
            "(numerical tolerance, same-seed comparison) runs against it",
            metavar="URL",
            aliases=("--target-endpoint",),
            pytest_aliases=("--specproof-endpoint-target",),
            example="http://127.0.0.1:2",
        ),
        "vocab": Flag(
            "--vocab", "vocabulary size, where the server does not say it", metavar="V", parse=int, example=8
        ),
        "concurrency": Flag("--concurrency", "requests in flight at once", parse=int, example=2),
        "timeout": Flag("--timeout", "seconds per request", parse=float, example=5.0),
        "retries": Flag("--retries", "retries of a request that failed in transit", parse=int, example=1),
        "loads": Flag(
            "--load",
            "audit every case with N requests in flight (repeatable, e.g. --load 1 --load 8): at 1 each "
            "request alone, above beside background requests of other prompts, lengths and settings, "
            "seeded and unseeded, whose tokens are tested too; seed use is checked at each level",
            metavar="N",
            parse=int,
            repeat=True,
            example=(1, 4),
            example_text=["1", "4"],
        ),
        "prefix_cache": Flag(
            "--prefix-cache",
            "audit every case cold and after a prefix-cache hit: the same requests asking the server to "
            "reuse its cached prompt (profile llamacpp: cache_prompt; vllm: no cache_salt, where cold "
            "requests each carry their own); the law must be the same",
            switch=True,
            example=True,
        ),
        "completions": Flag(
            "--completions",
            "audit every case with one completion a request and with N (n > 1; profile llamacpp: "
            "n_cmpl, the server needs N slots): each completion a sample of the law, and a request's "
            "completions tested for independence",
            metavar="N",
            parse=int,
            example=4,
        ),
        "adapter": Flag(
            "--adapter",
            "every audited request asks for LoRA adapter ID at SCALE (repeatable; profile llamacpp: the "
            "request's lora field, the server started with the adapter, its twin too): the law is the "
            "adapted model's, read with the same request",
            metavar="ID=SCALE",
            parse=parse_adapter,
            repeat=True,
            example=((0, 0.5),),
            example_text=["0=0.5"],
        ),
    }

    def __post_init__(self) -> None:
        urls = (self.urls,) if isinstance(self.urls, str) else tuple(self.urls)
        object.__setattr__(self, "urls", urls)
        if self.profile not in PROFILES:
            raise UsageError(f"profile: {self.profile!r} is unknown; profiles: {', '.join(PROFILES)}")
        if not isinstance(self.concurrency, int) or self.concurrency < 1:
            raise UsageError(f"concurrency: must be an integer >= 1, got {self.concurrency!r}")
        if not (isinstance(self.timeout, (int, float)) and self.timeout > 0):
            raise UsageError(f"timeout: must be positive, got {self.timeout!r}")
        if not isinstance(self.retries, int) or self.retries < 0:
            raise UsageError(f"retries: must be an integer >= 0, got {self.retries!r}")
        object.__setattr__(self, "loads", check_loads(tuple(self.loads)))
        if self.prefix_cache and self.loads:
            raise UsageError("prefix_cache: audit the prefix-cache axis and the load axis in two audits")
        check_completions(self.completions, bool(self.loads or self.prefix_cache))
        object.__setattr__(self, "adapter", check_adapter(self.adapter))
        if self.vocab is not None and (not isinstance(self.vocab, int) or self.vocab < 1):
            raise UsageError(f"vocab: must be an integer >= 1, got {self.vocab!r}")
