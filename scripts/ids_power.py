"""The ``ids`` statistic's power, measured: how many tokens its bettor needs to cross its threshold
against a tilt toward the same ids at every position.

The deviation: at each position a fresh law ``p_t`` over ``V`` ids (the softmax of independent
normal logits of scale ``--scale``), and the engine's law ``q_t(x) = p_t(x) e^(b d(x)) / Z_t``, the
same at every position (a logit bias, a key masked by its id), ``b`` set so that the mean per-token
TV between ``q_t`` and ``p_t`` is the row's TV, and ``d`` drawn once: a sign per id ("half": half
the ids gain, half lose, the hardest case for a learner, which must learn every id's weight) or 1
on a few ids and 0 elsewhere ("8": eight ids gain, as a bias toward a few tokens).

The ``ids`` bettor runs as the audit runs it (:class:`.tilt.TiltLearner`, its weights moving
after each sample of ``M`` = 64 tokens; :class:`.eprocess.FactorBettor`), at the threshold of one
case's family at alpha 1e-4 (its share of a family without draft, steps or an end of sequence:
``power.log_threshold``). Each run draws tokens until the bettor crosses or ``--cap``
tokens; the row gives the median and the 0.9 quantile of the tokens to cross over its runs
(seeded: ``--seed``, each row's runs from it), and how many crossed within the cap.

    python scripts/ids_power.py --json docs/measurements/ids-power.json \\
        --markdown docs/measurements/ids-power.md

``--only V:TV:GAIN --update`` reruns those rows and keeps the others of the JSON.

Its power depends on the laws (how much mass each id carries, how often it is drawn) and on ``V``
(the learner must see each id often enough to learn its weight), so the rows name both; the other
statistics' power is a formula (``power.tokens_needed``), this one is measured.
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import platform
import sys
import time
from typing import Any

import numpy as np

from specproof.properties.tokens import power
from specproof.properties.tokens.tilt import TiltLearner

#: (V, per-token TV, ids that gain: "half" or a number) of the rows
ROWS = (
    (512, 0.01, "half"),
    (512, 0.02, "half"),
    (512, 0.05, "half"),
    (4096, 0.05, "half"),
    (512, 0.01, "8"),
    (4096, 0.01, "8"),
    (4096, 0.005, "8"),
)
#: the tokens of one sample: the learner's weights move after each
M = 64


def laws(rng: np.random.Generator, n: int, vocab: int, scale: float) -> np.ndarray:
    """``n`` fresh laws over ``vocab`` ids (softmax of normal logits of scale ``scale``)."""
    z = rng.standard_normal((n, vocab)) * scale
    z -= z.max(axis=1, keepdims=True)
    p = np.exp(z)
    return p / p.sum(axis=1, keepdims=True)


def tilted(p: np.ndarray, bias: np.ndarray) -> np.ndarray:
    q = p * bias
    return q / q.sum(axis=1, keepdims=True)


def direction(rng: np.random.Generator, vocab: int, gain: str) -> np.ndarray:
    """``d`` of the module docstring: a sign per id ("half"), or 1 on ``gain`` ids drawn at random."""
    if gain == "half":
        return np.where(rng.random(vocab) < 0.5, -1.0, 1.0)
    d = np.zeros(vocab)
    d[rng.choice(vocab, int(gain), replace=False)] = 1.0
    return d


def strength(rng: np.random.Generator, vocab: int, tv: float, scale: float, signs: np.ndarray) -> float:
    """The tilt ``b`` whose mean per-token TV is ``tv`` (bisection over 512 laws)."""
    p = laws(rng, 512, vocab, scale)
    lo, hi = 0.0, 20.0
    for _ in range(60):
        b = 0.5 * (lo + hi)
        d = 0.5 * np.abs(tilted(p, np.exp(b * signs)) - p).sum(axis=1).mean()
        lo, hi = (b, hi) if d < tv else (lo, b)
    return 0.5 * (lo + hi)


def run_once(
    rng: np.random.Generator, vocab: int, b: float, signs: np.ndarray, scale: float, lt: float, cap: int
) -> int | None:
    """Tokens until the ids bettor's log-wealth reaches ``lt`` (None: not within ``cap``)."""
    learner = TiltLearner()
    w = learner.sized(vocab)
    bias = np.exp(b * signs)
    log_wealth, seen = 0.0, 0
    while seen < cap:
        p = laws(rng, M, vocab, scale)
        q = tilted(p, bias)
        c = np.cumsum(q, axis=1)
        x = np.minimum((c < rng.random(M)[:, None] * c[:, -1:]).sum(axis=1), vocab - 1)
        steps = np.log(w[x]) - np.log(p @ w)
        path = log_wealth + np.cumsum(steps)
        hit = np.flatnonzero(path >= lt)
        if len(hit):
            return seen + int(hit[0]) + 1
        log_wealth = float(path[-1])
        seen += M
        learner.learn(x, p.sum(axis=0))
        w = learner.weights
    return None


def quantile(crossed: list[int], runs: int, q: float) -> int | None:
    """The tokens by which a share ``q`` of the ``runs`` had crossed (None: fewer crossed)."""
    k = math.ceil(q * runs)
    return crossed[k - 1] if len(crossed) >= k else None


def row(vocab: int, tv: float, gain: str, runs: int, cap: int, scale: float, seed: int) -> dict[str, Any]:
    rng = np.random.default_rng([seed, vocab, int(round(tv * 1e6)), 0 if gain == "half" else int(gain)])
    signs = direction(rng, vocab, gain)
    b = strength(rng, vocab, tv, scale, signs)
    lt = power.log_threshold(1e-4, 1, "ids", power.shares(False, False))
    t0 = time.perf_counter()
    times = [run_once(rng, vocab, b, signs, scale, lt, cap) for _ in range(runs)]
    crossed = sorted(t for t in times if t is not None)
    return {
        "vocab": vocab,
        "tv": tv,
        "gain": gain,
        "tilt": b,
        "scale": scale,
        "runs": runs,
        "cap": cap,
        "crossed": len(crossed),
        "median_tokens": quantile(crossed, runs, 0.5),
        "q90_tokens": quantile(crossed, runs, 0.9),
        "log_threshold": lt,
        "seconds": time.perf_counter() - t0,
    }


def markdown(rows: list[dict[str, Any]], meta: dict[str, Any]) -> str:
    def n(v: int | None, cap: int) -> str:
        return f"{v:,}" if v is not None else f"> {cap:,}"

    out = [
        "# The ids statistic's power",
        "",
        f"`python scripts/ids_power.py` ({meta['machine']}, {meta['date']}; seed {meta['seed']}): tokens the "
        "`ids` bettor needs to cross its threshold (one case's family at alpha 1e-4, log-threshold "
        f"{rows[0]['log_threshold']:.2f}) against a fixed tilt at every position (a logit bias of +b on "
        "the ids that gain; where half gain, -b on the others), "
        f"laws the softmax of normal logits of scale {meta['scale']:g}, weights learned after each "
        f"sample of {M} tokens; each run to the bettor's crossing or {meta['cap']:,} tokens; b set for "
        f"the row's mean per-token TV; {meta['runs']} runs a row.",
        "",
        "| V | per-token TV | ids that gain | tokens to cross: median | 9 runs in 10 | crossed | seconds |",
        "|---:|---:|---|---:|---:|---:|---:|",
    ]
    for r in rows:
        out.append(
            f"| {r['vocab']:,} | {r['tv']:g} | {r['gain']} | {n(r['median_tokens'], r['cap'])} | "
            f"{n(r['q90_tokens'], r['cap'])} | {r['crossed']}/{r['runs']} | {r['seconds']:.0f} |"
        )
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=40)
    ap.add_argument("--cap", type=int, default=400_000)
    ap.add_argument("--scale", type=float, default=2.0)
    ap.add_argument("--seed", type=int, default=21)
    ap.add_argument("--only", action="append", default=[], help="V:TV:GAIN rows to run (default: every row)")
    ap.add_argument("--update", action="store_true", help="keep --json's other rows, rerun the chosen ones")
    ap.add_argument("--json")
    ap.add_argument("--markdown")
    a = ap.parse_args(argv)
    chosen = [(int(v), float(tv), g) for v, tv, g in (s.split(":") for s in a.only)] or list(ROWS)
    rows = []
    if a.update and a.json:
        with open(a.json) as f:
            rows = json.load(f)["rows"]
    for vocab, tv, gain in chosen:
        r = row(vocab, tv, gain, a.runs, a.cap, a.scale, a.seed)
        print(json.dumps(r), flush=True)
        rows = [x for x in rows if (x["vocab"], x["tv"], x["gain"]) != (vocab, tv, gain)] + [r]
    order = {k: i for i, k in enumerate(ROWS)}
    rows.sort(key=lambda x: order.get((x["vocab"], x["tv"], x["gain"]), len(order)))
    meta = {
        "date": datetime.date.today().isoformat(),
        "machine": f"{platform.machine()}, {platform.python_version()}",
        "seed": a.seed,
        "runs": a.runs,
        "cap": a.cap,
        "scale": a.scale,
    }
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"meta": meta, "rows": rows}, f, indent=1)
    if a.markdown:
        with open(a.markdown, "w") as f:
            f.write(markdown(rows, meta))
    return 0


if __name__ == "__main__":
    sys.exit(main())
