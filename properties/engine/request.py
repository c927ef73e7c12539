"""What an engine audit is asked to audit, whatever the door: :class:`EngineRequest`.

Its fields' defaults are written once here and their command-line and pytest spellings in its
``FLAGS`` (:mod:`specproof.properties.options`); ``specproof.audit_engine``, ``specproof audit
engine`` and ``--specproof-engine`` only translate what they were given into one
(:mod:`specproof.properties.run`). The plan (alpha, tv, power, seed, the budget, looks) is
:class:`~specproof.properties.engine.config.EngineAuditConfig`.

The settings audited (:meth:`EngineRequest.settings`): the request's ``samplings``, else the
engine's own; each given temperature replaces the temperature of each of them; the cut-offs and
``params`` are then *added* to every setting (a spec's own penalties stay).
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from specproof.properties.options import Flag
from specproof.reference.errors import UsageError
from specproof.reference.sampling import Grammar, Sampling

Seq = tuple[int, ...]
#: the verdicts an engine's authors may claim
CLAIMS = (
    "pass", "lossy", "contract_violation", "underpowered", "no_speculation", "misreported", "acceptance_low",
)  # fmt: skip


# --------------------------------------------------------------------------- reading text


def parse_ids(text: str, option: str = "--prompt") -> Seq:
    """Token ids written ``'0 6'`` or ``0,6``: at least one, none negative."""
    try:
        ids = tuple(int(x) for x in str(text).replace(",", " ").split())
    except ValueError as e:
        raise UsageError(f"{option}: {text!r} is not a list of token ids") from e
    if not ids or any(x < 0 for x in ids):
        raise UsageError(f"{option}: {text!r} must hold at least one non-negative id")
    return ids


#: request parameters read from ``NAME=VALUE`` as integers (the others are numbers or special)
INTEGER_PARAMS = ("top_k", "no_repeat_ngram_size", "min_new_tokens", "eos")


def parse_param(text: str) -> tuple[str, Any]:
    """One ``NAME=VALUE`` request parameter (reference/sampling.py): a number, a ``logit_bias`` as
    ``ID:BIAS,ID:BIAS`` (``-inf`` bans), ``bad_words`` as ``IDS;IDS``, a ``regex`` (kept as
    text: it becomes a grammar over the tokens' texts when the settings are made), ``stop``
    strings as ``TEXT;TEXT`` (read over the tokens' texts), or a scope name. An unknown NAME is a
    usage error naming it."""
    name, sep, value = str(text).partition("=")
    name = name.strip().replace("-", "_")
    if not sep:
        raise UsageError(f"--param: {text!r} is not NAME=VALUE")
    known = {
        f for f in Sampling.__dataclass_fields__ if f not in ("extra", "grammar", "temperature", "texts")
    }
    try:
        if name == "regex":
            return name, value
        if name == "stop":
            stops = tuple(t for t in value.split(";") if t)
            if not stops:
                raise UsageError(f"--param stop: {value!r} holds no stop string (write TEXT;TEXT)")
            return name, stops
        if name == "logit_bias":
            pairs = [p.split(":") for p in value.split(",") if p.strip()]
            return name, tuple((int(i), -math.inf if b.strip() == "-inf" else float(b)) for i, b in pairs)
        if name == "bad_words":
            return name, tuple(parse_ids(w, "--param bad_words") for w in value.split(";") if w.strip())
        if name in ("repetition_scope", "presence_scope"):
            return name, value
        if name in INTEGER_PARAMS:
            return name, int(value)
        if name in known:
            return name, float(value)
    except ValueError as e:
        raise UsageError(f"--param {name}: cannot read {value!r} ({e})") from e
    raise UsageError(
        f"--param {name}: not a sampling parameter (known: {', '.join(sorted(known | {'regex'}))})"
    )


def read_token_map(path: str) -> tuple[str, ...]:
    """A JSON list of token texts by id, read from ``path``."""
    try:
        with open(path) as f:
            data = json.load(f)
    except (OSError, json.JSONDecodeError) as e:
        raise UsageError(f"--token-map: cannot read {path!r}: {e}") from e
    if not isinstance(data, list) or not all(isinstance(t, str) for t in data):
        raise UsageError("--token-map: expected a JSON list of token texts, indexed by id")
    return tuple(data)


@dataclass(frozen=True)
class EngineRequest:
    """Which engine to audit and under which cases (module docstring)."""

    #: a registered name, ``module:attr`` or ``path.py:attr``; from Python also an engine, a
    #: factory or an EngineSpec
    target: Any = None
    prompts: tuple[Seq, ...] | None = None  # None: the engine's own, else (0, 1)
    tokens: int | None = None  # the horizon M; None: the engine's own, else 4
    temperatures: tuple[float, ...] | None = None
    top_k: int | None = None
    top_p: float | None = None
    min_p: float | None = None
    params: tuple[tuple[str, Any], ...] = ()  # other request parameters, added to every setting
    samplings: tuple[Sampling, ...] | None = None  # the settings themselves (Python)
    #: the tokens' texts by id: a grammar's regex is read over them; a served engine whose answers
    #: are text (profiles openai, llamacpp-python) is read through them
    token_map: tuple[str, ...] | None = None
    name: str | None = None  # the name the audit reports
    expect: str | None = None  # the verdict the engine's authors claim

    FLAGS: ClassVar[dict[str, Flag]] = {
        "target": Flag(
            "TARGET",
            "registered name (specproof backends), module:attr or path/to/file.py:attr giving an engine, "
            "a factory factory(temperature=, top_k=, top_p=) -> engine, or an EngineSpec",
            pytest="--specproof-engine",
            example="reference.direct",
        ),
        "prompts": Flag(
            "--prompt",
            "prompt token ids, e.g. '0 6' or 0,6 (repeatable; default: the engine's own, else '0 1')",
            metavar="IDS",
            parse=parse_ids,
            repeat=True,
            example=((3, 1),),
            example_text=["3 1"],
        ),
        "tokens": Flag(
            "--tokens",
            "new tokens per sample, the law's horizon (default: the engine's own, else 4; an endpoint's 64)",
            metavar="M",
            parse=int,
            example=3,
        ),
        "temperatures": Flag(
            "--temperature",
            "sampling temperature (repeatable): replaces each setting's temperature",
            metavar="T",
            parse=float,
            repeat=True,
            example=(0.5,),
        ),
        "top_k": Flag("--top-k", "top-k for every setting", metavar="K", parse=int, example=3),
        "top_p": Flag("--top-p", "top-p for every setting", metavar="P", parse=float, example=0.9),
        "min_p": Flag("--min-p", "min-p for every setting", metavar="P", parse=float, example=0.05),
        "params": Flag(
            "--param",
            "another request parameter, added to every setting (repeatable): repetition_penalty, "
            "presence_penalty, frequency_penalty, logit_bias=ID:BIAS,..., bad_words=IDS;IDS, "
            "no_repeat_ngram_size, min_new_tokens, eos, regex (over the tokens' texts), "
            "stop=TEXT;TEXT (stop strings over the tokens' texts), repetition_scope, presence_scope "
            "(docs/sampling-params.md)",
            metavar="NAME=VALUE",
            parse=parse_param,
            repeat=True,
            example=(("presence_penalty", 0.5),),
            example_text=["presence_penalty=0.5"],
        ),
        "samplings": Flag(
            None,
            "the settings themselves (Sampling objects)",
            absent={
                "cli": "Sampling objects; a setting is written with --temperature, the cut-offs and --param",
                "pytest": "Sampling objects; a setting is written with the temperature, cut-off and "
                "param options",
            },
            example=(Sampling(0.5),),
        ),
        "token_map": Flag(
            "--token-map",
            "JSON file: a list of token texts by id (profiles openai and llamacpp-python, whose prompts "
            "and answers are text; a grammar's regex: its tokens' texts)",
            metavar="FILE",
            parse=read_token_map,
            example=("a", "b"),
            example_text="TOKEN_MAP_FILE",
        ),
        "name": Flag("--name", "the name the audit reports (default: the engine's)", example="mine"),
        "expect": Flag(
            "--expect",
            "the verdict the engine's authors claim (a group's table compares it)",
            choices=CLAIMS,
            example="lossy",
        ),
    }

    def __post_init__(self) -> None:
        if self.tokens is not None and (not isinstance(self.tokens, int) or self.tokens < 1):
            raise UsageError(f"tokens: must be an integer >= 1, got {self.tokens!r}")
        if self.expect is not None and self.expect not in CLAIMS:
            raise UsageError(f"expect: {self.expect!r} is not a verdict ({', '.join(CLAIMS)})")
        if self.prompts is not None:
            if not self.prompts or not all(self.prompts):
                raise UsageError("prompts: an engine audit needs at least one non-empty prompt")
            object.__setattr__(self, "prompts", tuple(tuple(int(x) for x in p) for p in self.prompts))
        for name in ("temperatures", "samplings"):
            value = getattr(self, name)
            if value is not None:
                if not value:
                    raise UsageError(f"{name}: give at least one, or leave it out")
                object.__setattr__(self, name, tuple(value))
        object.__setattr__(self, "params", tuple((str(k), v) for k, v in self.params))
        if self.token_map is not None:
            object.__setattr__(self, "token_map", tuple(self.token_map))

    @property
    def asks_settings(self) -> bool:
        """Whether anything of the settings is asked (else the engine's own stand)."""
        return bool(
            self.samplings
            or self.temperatures
            or self.params
            or self.top_k is not None
            or self.top_p is not None
            or self.min_p is not None
        )

    def settings(
        self, own: Sequence[Sampling], token_text: Sequence[str] | None = None
    ) -> tuple[Sampling, ...]:
        """The settings audited (module docstring): ``samplings`` or ``own``, each temperature
        asked in place of theirs, then the cut-offs and parameters added to every one. A
        ``regex`` parameter becomes a grammar over ``token_text`` (default: the token map)."""
        token_text = token_text if token_text is not None else self.token_map
        base = list(self.samplings or own)
        if self.temperatures:
            base = [dataclasses.replace(s, temperature=float(t)) for t in self.temperatures for s in base]
        added = dict(self.params)
        if "regex" in added:
            if token_text is None:
                raise UsageError("--param regex: needs the tokens' texts (--token-map FILE)")
            added["grammar"] = Grammar.from_regex(str(added.pop("regex")), list(token_text))
        if "stop" in added and not any(s.texts for s in base):
            if token_text is None:
                raise UsageError("--param stop: needs the tokens' texts (--token-map FILE)")
            added["texts"] = tuple(token_text)
        for name in ("top_k", "top_p", "min_p"):
            if getattr(self, name) is not None:
                added[name] = getattr(self, name)
        out: list[Sampling] = []
        for s in base:
            try:
                made = dataclasses.replace(s, **added)
            except (TypeError, ValueError) as e:
                raise UsageError(f"--param: {e}") from e
            if made not in out:
                out.append(made)
        return tuple(out)
