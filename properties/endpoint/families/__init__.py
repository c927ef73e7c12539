"""The server families the endpoint audit speaks, one module each.

A family's module holds its whole wire format in one place: its :class:`~.base.Profile` (how
requests are made and answers read, and its law recipe) and, where the project serves that API
itself, the stand-in's answer in the same shape (``ROUTES``: path -> answer), so that a change to
the format is made once and the round-trip test (tests/test_families.py) sees both sides.
docs/adding-a-server-family.md says how to add one.

=================  =================  ====================================================
profile            module             stand-in answers
=================  =================  ====================================================
llamacpp           :mod:`.llamacpp`   ``POST /completion``
vllm               :mod:`.vllm`       ``POST /v1/completions`` asking for token ids
sglang             :mod:`.sglang`     ``POST /generate``
openai             :mod:`.openai`     ``POST /v1/completions`` (token texts)
llamacpp-python    :mod:`.llamacpp_python`  none (audited against the real server)
=================  =================  ====================================================

Importing this package imports none of the modules (the command line lists the names without
loading them).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from specproof.reference.errors import UsageError

if TYPE_CHECKING:
    from specproof.properties.endpoint.families.base import Profile

#: profile name -> (module, profile class)
FAMILIES: dict[str, tuple[str, str]] = {
    "llamacpp": ("llamacpp", "LlamaCpp"),
    "vllm": ("vllm", "VLLM"),
    "sglang": ("sglang", "SGLang"),
    "openai": ("openai", "OpenAI"),
    "llamacpp-python": ("llamacpp_python", "LlamaCppPython"),
}
PROFILES = tuple(FAMILIES)


def module(name: str) -> Any:
    """The module of the family called ``name``."""
    if name not in FAMILIES:
        raise UsageError(f"profile: {name!r} is unknown; profiles: {', '.join(FAMILIES)}")
    return importlib.import_module(f"{__name__}.{FAMILIES[name][0]}")


def profile_class(name: str) -> type[Profile]:
    cls: type[Profile] = getattr(module(name), FAMILIES[name][1])
    return cls


def make_profile(name: str, token_map: Any = None, extra: dict[str, Any] | None = None) -> Profile:
    """The profile called ``name``, or a :class:`UsageError` listing them."""
    return profile_class(name)(
        token_map=None if token_map is None else tuple(token_map), extra=dict(extra or {})
    )
