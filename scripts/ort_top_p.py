"""ONNX Runtime GenAI under top-p: the rows the ORT table leaves out (docs/measurements/ort-genai.md).

The registered ORT engines are audited at T 1 and at T 0.7 with top-k 8 at the default plan. Under
top-p the law an engine computing in float32 keeps is not pinned down at every context (over a
whole plan's contexts some law's cumulative mass comes within float32's reach of the cut), so
top-p is audited apart here at a fixed number of samples: each speculative strategy the wheel runs
(draft model, n-gram lookup, MTP on float16 logits) and plain decoding, at T 0.7 with top-k 8 and
top-p 0.9 (``TOP_P`` of properties/engine/adapters/onnxruntime_genai.py).

    python scripts/ort_top_p.py [--samples N] [--json PATH] [--markdown PATH]

Needs ``specproof env install ort``. The same audits, at 300 samples, are tests/test_ort_genai.py's
``test_top_p_keeps_the_law_at_a_fixed_size``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys

from specproof.properties.engine.adapters import onnxruntime_genai as adapter
from specproof.properties.engine.audit import audit_engine
from specproof.properties.engine.config import EngineAuditConfig
from specproof.properties.engine.registry import ENGINES, ensure_registered
from specproof.properties.engine.report import write_report
from specproof.reference.errors import UsageError

#: the strategies the wheel runs on the tiny pair (ort.mtp raises on every call; top-k 1 is its
#: own row of the main table) and the control
NAMES = ("ort.draft", "ort.ngram", "ort.mtp.fp16", "ort.plain")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--samples", type=int, default=300, help="samples per engine (default 300)")
    ap.add_argument("--json", metavar="PATH", help="every audit as JSON")
    ap.add_argument("--markdown", metavar="PATH", help="the table as Markdown")
    args = ap.parse_args(argv)
    ensure_registered()
    ok, why = adapter.ort_env.installed()
    if not ok:
        print(f"ONNX Runtime GenAI is not installed ({why}): specproof env install ort", file=sys.stderr)
        return 4
    config = EngineAuditConfig(samples=args.samples, seed=0, report_samples=32)
    results, refused = [], 0
    try:
        for name in NAMES:
            spec = dataclasses.replace(ENGINES[name], samplings=(adapter.TOP_P,))
            try:
                r = audit_engine(spec, config)
            except UsageError as e:  # a context whose top-p cut float32 cannot pin: no verdict
                print(f"engine {name}: not audited: {e}", flush=True)
                refused += 1
                continue
            print(r.summary().splitlines()[0], flush=True)
            results.append(r)
    finally:
        adapter.close_workers()
    if args.json:
        with open(args.json, "w") as f:
            json.dump([r.to_json() for r in results], f, indent=1)
    if args.markdown:
        write_report(args.markdown, results, "ONNX Runtime GenAI 0.18.0 at T 0.7, top-k 8, top-p 0.9")
    if refused:
        return 4
    return 0 if all(r.agrees for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
