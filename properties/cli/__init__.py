"""The ``specproof`` command: the one command-line layer of the project.

``specproof audit chain|tree TARGET`` audits a black-box verifier statistically, ``specproof
audit engine TARGET`` a whole generate loop, and ``specproof audit`` alone every built-in
backend against what it declares (:mod:`.audit`); ``specproof replay`` turns an audit's witness
into a pytest test; ``specproof matrix`` prints the exactness matrix (proposal process x rule,
each cell checked exactly with Fraction arithmetic); ``specproof rule``, ``calibrate``,
``bench``, ``e2e``, ``conform`` and ``backends`` are in :mod:`.tools`, ``llamacpp`` in
:mod:`.llamacpp`, ``findings`` (the findings in third-party engines) in :mod:`.findings`.

Everything that parses options, shows progress or writes files lives in this package
(:mod:`.common`); the library below returns results and never prints them.

Exit status of an audit: 0 pass, 1 lossy, 2 contract violation, 3 underpowered; every subcommand
exits 4 on a usage or internal error, and on Ctrl-C (:mod:`..verdicts`).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from specproof.properties.cli import audit, findings, llamacpp, serving, tools
from specproof.properties.cli.common import check_outputs
from specproof.properties.verdicts import EXIT_TABLE, USAGE_ERROR
from specproof.reference.errors import NotFoundError, SpecproofInputError, UsageError


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="specproof",
        description=__doc__.split("\n\n")[0],
        epilog=EXIT_TABLE,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(dest="command", required=True)
    tools.add_matrix_parser(sub)
    audit.add_audit_parser(sub)
    audit.add_replay_parser(sub)
    audit.add_signoff_parser(sub)
    audit.add_robustness_parser(sub)
    tools.add_rule_parser(sub)
    tools.add_calibrate_parser(sub)
    tools.add_bench_parser(sub)
    tools.add_e2e_parser(sub)
    tools.add_conform_parser(sub)
    llamacpp.add_llamacpp_parser(sub)
    serving.add_env_parser(sub)
    serving.add_vllm_parser(sub)
    serving.add_openvino_parser(sub)
    serving.add_mistralrs_parser(sub)
    serving.add_tiny_models_parser(sub)
    serving.add_standin_parser(sub)
    tools.add_backends_parser(sub)
    findings.add_findings_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run a subcommand. Usage errors exit 4 with their message; an internal error exits 4 with
    its traceback (a bug of specproof, never a verdict); Ctrl-C exits 4."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as e:  # argparse exits 2 on usage errors, 0 on --help
        return USAGE_ERROR if e.code not in (0, None) else 0
    try:
        check_outputs(args, *getattr(args, "outputs", ()))  # before anything runs
        return int(args.func(args))
    except (UsageError, SpecproofInputError, NotFoundError) as e:
        print(f"specproof {args.command}: {e}", file=sys.stderr)
        return USAGE_ERROR
    except KeyboardInterrupt:
        print(f"specproof {args.command}: interrupted", file=sys.stderr)
        return USAGE_ERROR
    except BrokenPipeError:  # the reader went away (``| head``): what it wanted was written
        _quiet_stdout()
        return 0
    except Exception:
        import traceback

        print(
            f"specproof {args.command}: internal error (a bug of specproof, please report it):",
            file=sys.stderr,
        )
        traceback.print_exc()
        return USAGE_ERROR


def _quiet_stdout() -> None:
    """Point stdout at /dev/null, so the interpreter's last flush of a closed pipe says nothing."""
    import os

    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
