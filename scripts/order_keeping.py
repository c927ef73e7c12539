"""What a pass does not cover, measured on one engine: ``bugs.py:pad_mask`` (docs/examples/engines),
whose verify forward leaves every end of sequence of the context out of attention.

For each position of the engine's own generations it computes, exactly from the laws (the law the
engine emits there is the verify forward's, ``p'``; the target's is ``p``):

* the per-token TV and KL(p' || p);
* the information (nats a token) a test gains from a tilt of ``p`` along a direction ``f`` (a test
  betting on ``q ∝ p exp(b f)`` at its best ``b``, to second order:
  ``E[Cov_p(log p'/p, f)]^2 / (2 E[Var_p(f)])``) for:
  - ``temperature``: ``f = log p``, the direction of sharpening and flattening that the token
    test's ``mean``, ``surprisal`` and ``greedy`` statistics aim at;
  - ``oracle``: the best fixed direction over the token ids, estimated on the first half of the
    positions and read on the second (what a test told the deviation in advance could use);
* with ``--learn N``: the log-wealth after N emitted tokens of a predictable plug-in test of a
  per-id tilt (``q ∝ p (n_x + a) / (e_x + a)``, counts of the emitted ids ``n`` against their
  expected counts ``e`` so far), a test that learns the direction from the tokens themselves, on
  this engine and on the exact engine.

    python scripts/order_keeping.py --samples 40 --learn 25600 --json docs/measurements/order-keeping.json
    python scripts/order_keeping.py --samples 0 --learn 225000 --pseudo 300 --pseudo 1000 --pseudo 3000
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from typing import Any

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "docs", "examples", "engines"))

import bugs  # noqa: E402
import tinylm  # noqa: E402


def laws(engine: Any, prompt: list[int], tokens: list[int]) -> tuple[np.ndarray, np.ndarray]:
    """The target's law ``p`` and the verify forward's ``p'`` after each prefix of ``tokens``."""
    seq = prompt + tokens
    p = engine.target_laws_along(prompt, tokens)
    z = engine.target.forward(seq[:-1], tinylm.Cache(engine.target.width), masked_id=bugs.EOS)
    return p, engine.law_from_logits(z[len(prompt) - 1 :])


def information(P: np.ndarray, D: np.ndarray, F: np.ndarray) -> float:
    """Nats a token a tilt along ``F`` (rows: a direction per position) gains against the
    deviation ``D = log p'/p`` under laws ``P`` (module docstring)."""
    Dc = D - (P * D).sum(1, keepdims=True)
    Fc = F - (P * F).sum(1, keepdims=True)
    var = float((P * Fc * Fc).sum(1).mean())
    return float((P * Dc * Fc).sum(1).mean()) ** 2 / (2 * var) if var > 0 else 0.0


def measure(samples: int, tokens: int = 256, seed: int = 0) -> dict[str, float]:
    """The module docstring's figures over ``samples`` generations of the planted engine."""
    e = bugs.pad_mask.build(bugs.pad_mask.samplings[0])
    prompt = list(bugs.pad_mask.prompts[0])
    Ps, Ds = [], []
    for s in range(samples):
        out = e.generate(prompt, tokens, seed + s)
        p, pm = laws(e, prompt, out)
        Ps.append(p)
        Ds.append(np.log(pm) - np.log(p))
    P, D = np.concatenate(Ps), np.concatenate(Ds)
    PM = P * np.exp(D)
    half = len(P) // 2
    Dc = D - (P * D).sum(1, keepdims=True)
    direction = (P[:half] * Dc[:half]).sum(0) / np.maximum(P[:half].sum(0), 1e-300)
    return {
        "tokens": int(len(P)),
        "tv": float(0.5 * np.abs(PM - P).sum(1).mean()),
        "kl": float((PM * D).sum(1).mean()),
        "temperature": information(P, D, np.log(P)),
        "oracle": information(P[half:], D[half:], np.broadcast_to(direction, P[half:].shape)),
    }


def learned(n: int, bug: bool, a: float = 300.0, seed: int = 10_000) -> float:
    """The per-id plug-in tilt's log-wealth after ``n`` tokens of the planted engine (``bug``) or
    the exact one (module docstring)."""
    spec = bugs.pad_mask if bug else bugs.exact_two_turns
    e = spec.build(spec.samplings[0])
    prompt = list(spec.prompts[0])
    seen, expected, log_wealth, s = np.zeros(e.vocab), np.zeros(e.vocab), 0.0, 0
    while n > 0:
        out = e.generate(prompt, min(256, n), seed + s)
        for p, x in zip(e.target_laws_along(prompt, out), out):
            tilt = (seen + a) / (expected + a)
            log_wealth += math.log(tilt[x] / float(p @ tilt))
            seen[x] += 1
            expected += p
        n, s = n - len(out), s + 1
    return log_wealth


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--samples", type=int, default=40)
    ap.add_argument("--learn", type=int, default=0, help="tokens for the plug-in learner (0: skip)")
    ap.add_argument(
        "--pseudo", type=float, action="append", help="the learner's pseudo-count a (repeatable; default 300)"
    )
    ap.add_argument("--json")
    args = ap.parse_args(argv)
    row: dict[str, Any] = measure(args.samples) if args.samples else {}
    alpha = 1e-4
    if row:
        row["tokens_if_told"] = math.log(1 / alpha) / row["kl"]
    if args.learn:
        row["learn_tokens"] = args.learn
        for a in args.pseudo or [300.0]:
            tag = "" if a == 300.0 else f"_a{a:g}"
            row["learned_bug" + tag] = learned(args.learn, True, a=a)
            row["learned_exact" + tag] = learned(args.learn, False, a=a)
    for k, v in row.items():
        print(f"{k}: {v:.6g}" if isinstance(v, float) else f"{k}: {v}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(row, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
