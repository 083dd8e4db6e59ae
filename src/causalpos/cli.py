"""``causalpos`` command line: tools around a results tree.

causalpos diff-results A B [--rtol R] [--atol A]   # every table of two results trees
causalpos verify [RESULTS_DIR] [--sizes-only]      # every store checked against its manifest
"""

from __future__ import annotations

import argparse
import sys


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="causalpos", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    diff = sub.add_parser(
        "diff-results",
        help="compare every table (CSV, TSV, Markdown) of two results trees; exit 1 if any differs",
    )
    diff.add_argument("a")
    diff.add_argument("b")
    diff.add_argument("--rtol", type=float, default=0.0, help="relative tolerance (default exact)")
    diff.add_argument("--atol", type=float, default=0.0, help="absolute tolerance (default exact)")
    verify = sub.add_parser(
        "verify",
        help="check every store of a results tree against its manifest and list stale "
        "temporaries; exit 1 if any store is damaged or a temporary is left",
    )
    verify.add_argument("results", nargs="?", default="results", help="default: results")
    verify.add_argument(
        "--sizes-only",
        action="store_true",
        help="compare file sizes, skip checksums (faster; still finds deleted and truncated files)",
    )
    args = parser.parse_args(argv)
    if args.command == "diff-results":
        from causalpos.io.compare_trees import compare_trees

        result = compare_trees(args.a, args.b, rtol=args.rtol, atol=args.atol)
        print(result.report())
        return 0 if result.identical else 1
    if args.command == "verify":
        from causalpos.io.verify import verify_tree

        try:
            report = verify_tree(args.results, checksums=not args.sizes_only)
        except FileNotFoundError as e:
            print(e, file=sys.stderr)
            return 2
        print(report.report())
        return 0 if report.clean else 1
    return 2  # pragma: no cover - argparse rejects unknown commands


if __name__ == "__main__":
    sys.exit(main())
