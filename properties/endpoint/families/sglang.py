"""SGLang's server: its profile and the stand-in's answer in its shape.

Law recipe: ``POST /generate`` with ``top_logprobs_num`` = V: the law after temperature, before
SGLang's cut-offs, which the profile applies in SGLang's own order
(:data:`specproof.reference.sampling.WARP_ORDERS` ``["sglang"]``: top-k and top-p decided jointly
on the tempered law, then min-p). Counters: ``meta_info.spec_num_proposed_drafts``,
``spec_num_correct_drafts`` (left out when nothing was verified: that is 0, not unknown).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import numpy as np

from specproof.properties.endpoint.families import wire
from specproof.properties.endpoint.families.base import AnswerError, Profile, knobs, law_from_pairs, prob
from specproof.reference.sampling import Sampling, warp

if TYPE_CHECKING:
    from specproof.properties.endpoint.client import Client
    from specproof.properties.endpoint.standin import StandIn
    from specproof.properties.engine.contract import Generation


def cut(tempered: np.ndarray, s: Sampling) -> list[float]:
    """SGLang's cut-offs on a law already at the setting's temperature (greedy: its argmax)."""
    p = np.asarray(tempered, dtype=np.float64)
    if s.greedy:
        out = np.zeros_like(p)
        out[int(np.argmax(p))] = 1.0
        return [float(v) for v in out]
    with np.errstate(divide="ignore"):
        z = np.log(p / p.sum())
    return [float(v) for v in warp(z, replace(s, temperature=1.0), order="sglang")]


#: what the report quotes of this family's law recipe
RECIPE = (
    "POST /generate, one new token, top_logprobs_num = V: the law after temperature (SGLang returns "
    "log-probabilities before its cut-offs), then top-k and top-p applied jointly to it and min-p "
    "after, as SGLang's non-speculative sampler does"
)
#: the request parameters beyond the cut-offs it takes
OFFERS: tuple[str, ...] = (
    "repetition_penalty", "presence_penalty", "frequency_penalty", "min_new_tokens", "eos",
    "repetition_scope", "presence_scope",
)  # fmt: skip


class SGLang(Profile, family="sglang", recipe=RECIPE, counters=True, offers=OFFERS):
    def _sampling(self, s: Sampling, tokens: int, seed: int) -> dict[str, Any]:
        self.check_offered(s)
        return {
            "max_new_tokens": tokens,
            **knobs(s, top_k_off=-1),
            "min_new_tokens": s.min_new_tokens,
            "ignore_eos": s.eos is None,
            "sampling_seed": self.seed(seed),
        }

    def generation(
        self, prompt: Sequence[int], tokens: int, seed: int, s: Sampling, report: bool
    ) -> tuple[str, dict[str, Any]]:
        body: dict[str, Any] = {"input_ids": list(prompt), "sampling_params": self._sampling(s, tokens, seed)}
        if report:
            body.update(return_logprob=True, logprob_start_len=-1)
        return "/generate", {**body, **self.extra}

    def law_request(
        self, context: Sequence[int], s: Sampling, vocab: int, prompt_len: int | None = None
    ) -> tuple[str, dict[str, Any]]:
        neutral = replace(s, temperature=s.temperature or 1.0, top_k=None, top_p=None, min_p=None)
        body = {
            "input_ids": list(context),
            "sampling_params": self._sampling(neutral, 1, 0),
            "return_logprob": True,
            "top_logprobs_num": vocab,
            "logprob_start_len": -1,
        }
        return "/generate", {**body, **self.extra}

    def read_generation(self, answer: Any, report: bool) -> Generation:
        from specproof.properties.engine.contract import Generation

        try:
            ids = tuple(int(x) for x in answer["output_ids"])
            meta = answer.get("meta_info") or {}
        except (KeyError, TypeError, ValueError) as e:
            raise AnswerError(f"SGLang answer without output_ids: {str(answer)[:200]}") from e
        # SGLang leaves the counters out when nothing was verified: that is 0 drafted, not unknown
        drafted = int(meta.get("spec_num_proposed_drafts", 0))
        accepted = int(meta.get("spec_num_correct_drafts", 0))
        reported = None
        if report:
            reported = tuple(prob(e[0]) for e in meta.get("output_token_logprobs") or [])
        return Generation(ids, drafted, accepted, None, reported)

    def read_law(self, answer: Any, s: Sampling, vocab: int) -> list[float]:
        try:
            top = answer["meta_info"]["output_top_logprobs"][0]
            pairs = [(int(e[1]), prob(e[0])) for e in top]
        except (KeyError, IndexError, TypeError, ValueError) as e:
            raise AnswerError(f"SGLang answer without output_top_logprobs: {str(answer)[:200]}") from e
        tempered = np.asarray(law_from_pairs(pairs, vocab, "SGLang's logprobs"))
        return cut(tempered / tempered.sum(), s)

    def reports_checkable(self, s: Sampling) -> bool:
        return not s.truncated  # its reports are the law before the cut-offs

    def identity(self, client: Client) -> dict[str, Any]:
        info = client.get("/get_model_info")
        return {"vocab": None, "model": {"path": info.get("model_path")}}


# --------------------------------------------------------------------------- the stand-in's answer


def generate(si: StandIn, body: dict[str, Any]) -> dict[str, Any]:
    """``POST /generate``: SGLang's answer."""
    sp = body.get("sampling_params") or {}
    if not isinstance(sp, dict):
        raise wire.RequestError("sampling_params: expected an object")
    report = bool(body.get("return_logprob", False))
    n_top = body.get("top_logprobs_num") or 0
    ask = wire.Ask(
        wire.ids(body.get("input_ids"), "input_ids"),
        wire.count(sp.get("max_new_tokens"), "max_new_tokens", 128),
        si.seed(sp.get("sampling_seed")),
        si.sampling(sp.get("temperature"), sp.get("top_k"), sp.get("top_p"), sp.get("min_p")),
        report,
        joint=True,
        tempered_reports=True,
    )
    d = si.run(ask)
    si.record("/generate", ask)
    meta: dict[str, Any] = {
        "id": f"{ask.seed:x}",
        "finish_reason": {"type": "length", "length": len(d.tokens)},
        "prompt_tokens": len(ask.prompt),
        "completion_tokens": len(d.tokens),
        "cached_tokens": 0,
    }
    if si.speculative:
        meta.update(spec_num_proposed_drafts=d.drafted, spec_num_correct_drafts=d.accepted)
    if report:
        meta["input_token_logprobs"] = []
        meta["output_token_logprobs"] = [[wire.logprob(p), x, None] for x, p in zip(d.tokens, d.reported)]
        meta["output_top_logprobs"] = [
            [[wire.logprob(q), i, None] for i, q in wire.top(shown, n_top)] if n_top else None
            for shown in d.shown
        ]
    return {"text": "".join(si.texts[x] for x in d.tokens), "output_ids": d.tokens, "meta_info": meta}


#: the paths the stand-in answers in this family's shape
ROUTES: dict[str, wire.Answer] = {"/generate": generate}
