"""``causalpos`` command line: tools around a results tree.

causalpos diff-results A B [--rtol R] [--atol A]   # every table of two results trees
causalpos verify [RESULTS_DIR] [--configfile F] [--sizes-only]  # every store vs its manifest
causalpos summary [SCORECARD_CSV] [--update README.md]  # the README's digest of a scorecard
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
        "--configfile",
        help="the --configfile the tree was built with: its rebuild commands name it "
        "(default: none, the embedded config.yaml)",
    )
    verify.add_argument(
        "--sizes-only",
        action="store_true",
        help="compare file sizes, skip checksums (faster; still finds deleted and truncated files)",
    )
    summary = sub.add_parser(
        "summary",
        help="the README's 'what was reproduced' digest of a scorecard: rows that could have "
        "failed, per paper, and every differs / inconclusive row; --update rewrites the README's "
        "block",
    )
    summary.add_argument(
        "scorecard", nargs="?", default="results/report/scorecard.csv", help="default: %(default)s"
    )
    summary.add_argument("--update", metavar="README", help="rewrite this file's summary block")
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
        print(report.report(configfile=args.configfile))
        return 0 if report.clean else 1
    if args.command == "summary":
        from pathlib import Path

        import pandas as pd

        from causalpos.scorecard import readme_summary, update_readme

        card = pd.read_csv(args.scorecard, keep_default_na=False)
        block = readme_summary(card, source=args.scorecard)
        if args.update:
            path = Path(args.update)
            path.write_text(update_readme(path.read_text(), block))
        else:
            print(block, end="")
        return 0
    return 2  # pragma: no cover - argparse rejects unknown commands


if __name__ == "__main__":
    sys.exit(main())
