"""``causalpos`` command line: tools around a results tree.

causalpos --version                                # the package's version
causalpos diff-results A B [--rtol R] [--atol A] [--renames F]  # every table of two trees
causalpos verify [DIR ...] [--sizes-only] [--configfile F] [--config K=V]  # stores, tables, weights
causalpos summary [SCORECARD_CSV] [--update README.md]  # the README's overview and digest
causalpos findings [RESULTS] [--update docs/findings.md]  # the findings page from a run's tables
causalpos findings --check                    # the template's rule: no number or verdict typed
causalpos catalogue [--update docs/outputs.md]  # the tables' list, from causalpos.catalogue
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from pathlib import Path

from causalpos.paths import (
    BENCHMARKS_ROOT,
    FINDINGS_TEMPLATE,
    MODELS_ROOT,
    RESULTS_ROOT,
    SCORECARD_CSV,
)

#: Exit status of a usage error (a path that is not there, a file not what the command reads),
#: as argparse's own; distinct from diff-results' 1 (DIFFERENT) and verify's 1 and 3.
EXIT_USAGE = 2


def package_version() -> str:
    """The installed distribution's version, else (a source tree not installed) ``__version__``."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("causalpos")
    except PackageNotFoundError:
        from causalpos import __version__

        return __version__


def _usage_error(message: str) -> int:
    print(f"causalpos: {message}", file=sys.stderr)
    return EXIT_USAGE


def _tolerance(text: str) -> float:
    """An argparse type: a finite number >= 0 (``--rtol`` / ``--atol``)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not math.isfinite(value) or value < 0:
        raise argparse.ArgumentTypeError(
            f"{text!r}: a tolerance is a finite number >= 0 (0, the default, compares exactly)"
        )
    return value


def _diff_results(args: argparse.Namespace) -> int:
    from causalpos.io.compare_trees import compare_trees

    for which, path in (("A", args.a), ("B", args.b)):
        if not Path(path).is_dir():
            return _usage_error(
                f"diff-results: {which} = {path} is not a directory; give two results trees "
                "(e.g. OLD/results NEW/results)"
            )
    renames = None
    if args.renames is not None:
        from causalpos.io.renames import read_renames

        try:
            renames = read_renames(args.renames)
        except (OSError, ValueError) as e:
            return _usage_error(f"diff-results: --renames {args.renames}: {e}")
    # the benchmark tables hold a run's timings, not its results
    timings = BENCHMARKS_ROOT.removeprefix(RESULTS_ROOT + "/")
    result = compare_trees(
        args.a, args.b, rtol=args.rtol, atol=args.atol, exclude=(timings,), renames=renames
    )
    print(result.report())
    return 0 if result.identical else 1


def _summary(args: argparse.Namespace) -> int:
    import pandas as pd

    from causalpos.scorecard import readme_summary, update_readme
    from causalpos.scorecard.overview import readme_overview, update_overview

    if not Path(args.scorecard).is_file():
        return _usage_error(
            f"summary: no scorecard at {args.scorecard}; build it first (`snakemake --cores 1 "
            f"{SCORECARD_CSV}`, with the --configfile you run) or name the CSV"
        )
    try:
        card = pd.read_csv(args.scorecard, keep_default_na=False)
    except (ValueError, OSError) as e:  # pandas' ParserError and EmptyDataError are ValueErrors
        return _usage_error(f"summary: {args.scorecard} is not a readable CSV ({e})")
    read = ("paper", "target", "measured", "paper_value", "verdict")
    missing = [c for c in read if c not in card.columns]
    if missing:
        return _usage_error(
            f"summary: {args.scorecard} is not a scorecard: it has no column(s) "
            f"{', '.join(missing)} (a scorecard is {SCORECARD_CSV})"
        )
    try:
        block = readme_summary(card, source=args.scorecard)
        overview = readme_overview(card, source=args.scorecard)
    except ValueError as e:  # an older scorecard (no section column) or unknown sections
        return _usage_error(f"summary: {args.scorecard}: {e}")
    if args.update:
        path = Path(args.update)
        if not path.is_file():
            return _usage_error(f"summary --update: no file {path}")
        try:
            text = update_readme(path.read_text(), block)
        except ValueError as e:
            return _usage_error(f"summary --update {path}: {e}")
        try:
            text = update_overview(text, overview)
        except ValueError as e:  # a README without the overview: its digest all the same
            print(f"causalpos: summary --update {path}: digest written; {e}", file=sys.stderr)
        path.write_text(text)
    else:
        print(overview + "\n" + block, end="")
    return 0


def _findings(args: argparse.Namespace) -> int:
    from causalpos.findings import FindingsError, Tables, render

    template = Path(args.template)
    if not template.is_file():
        return _usage_error(
            f"findings: no template {template} (run from the repository's root, or --template)"
        )
    text = template.read_text()
    if args.check:
        from causalpos.findings.lint import check_template

        problems = check_template(text, root=Path.cwd())
        for p in problems:
            print(f"{template}: {p}")
        return 1 if problems else 0
    if not Path(args.results).is_dir():
        return _usage_error(f"findings: {args.results} is not a results tree (e.g. results)")
    try:
        page = render(
            text, Tables.of_results(args.results), strict=not args.allow_missing, name=args.template
        )
    except FindingsError as e:
        print(f"causalpos findings: {e}", file=sys.stderr)
        return 1
    if args.update:
        Path(args.update).write_text(page)
    else:
        print(page, end="")
    return 0


def _verify(args: argparse.Namespace) -> int:
    from causalpos.config.provenance import config_expectations
    from causalpos.io.runconfig import CONFIG_ENV, CONFIGFILES_ENV
    from causalpos.io.verify import EXIT_DAMAGED, EXIT_OK, EXIT_UNVERIFIED, verify_tree

    explicit = bool(args.configfile or args.config)
    values = None
    if args.config:
        from snakemake.cli import parse_config  # how Snakemake reads `--config KEY=VALUE`

        try:
            values = parse_config(args.config)
        except ValueError as e:
            return _usage_error(f"verify --config: {e} (give KEY=VALUE, as to snakemake)")
    previous = {k: os.environ.get(k) for k in (CONFIGFILES_ENV, CONFIG_ENV)}
    if explicit:  # named in the rebuild commands
        os.environ[CONFIGFILES_ENV] = os.pathsep.join(args.configfile)
        os.environ[CONFIG_ENV] = json.dumps({"args": args.config, "values": values or {}})
    roots = args.results or [RESULTS_ROOT] + [m for m in [MODELS_ROOT] if os.path.isdir(m)]
    try:
        codes = set()
        for root in roots:  # reported inside: the rebuild commands name the config files
            # each store's and table's settings against its config (--configfile / --config,
            # else the config files and overrides it records)
            expected = config_expectations(args.configfile if explicit else None, values)
            report = verify_tree(
                root, checksums=not args.sizes_only, expected=expected, progress=sys.stderr
            )
            print(report.report())
            codes.add(report.exit_code)
    except FileNotFoundError as e:
        print(e, file=sys.stderr)
        return 2
    finally:
        for key, value in previous.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
    return next((c for c in (EXIT_DAMAGED, EXIT_UNVERIFIED) if c in codes), EXIT_OK)


def _catalogue(args: argparse.Namespace) -> int:
    import causalpos.catalogue as tables
    import causalpos.catalogue_stores as stores
    from causalpos.scorecard.markdown import replace_block

    blocks = [
        (tables.tables_block(), tables.BLOCK_BEGIN, tables.BLOCK_END),
        (stores.variables_block(), stores.BLOCK_BEGIN, stores.BLOCK_END),
    ]
    if not args.update:
        print("\n".join(block for block, _, _ in blocks), end="")
        return 0
    path = Path(args.update)
    if not path.is_file():
        return _usage_error(f"catalogue: no file {path} to update (docs/outputs.md holds the list)")
    text = path.read_text()
    try:
        for (block, begin, end), what in zip(blocks, ("tables", "summary variables")):
            text = replace_block(
                text, block, (begin, end), what, ' (docs/outputs.md: under "Tables and stores")'
            )
    except ValueError as e:
        return _usage_error(f"catalogue: {path}: {e}")
    path.write_text(text)
    return 0


def _add_findings(sub) -> None:
    """The ``findings`` subcommand's arguments."""
    findings = sub.add_parser(
        "findings",
        help="the findings page (docs/findings.md) from a run's tables: every {{reference}} of "
        "the template filled; exit 1 naming each reference that matches no row or several",
    )
    findings.add_argument(
        "results", nargs="?", default=RESULTS_ROOT, help="results tree (default: %(default)s)"
    )
    findings.add_argument("--template", default=FINDINGS_TEMPLATE, help="default: %(default)s")
    findings.add_argument("--update", metavar="FILE", help="write the page here (else stdout)")
    findings.add_argument(
        "--allow-missing",
        action="store_true",
        help="mark references this run has no value for instead of failing (a config other "
        "than config.yaml)",
    )
    findings.add_argument(
        "--check",
        action="store_true",
        help="check the template's rule instead: no measured number or verdict typed outside "
        "a reference; exit 1 listing each",
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="causalpos", description=__doc__.splitlines()[0])
    parser.add_argument("--version", action="version", version=f"causalpos {package_version()}")
    sub = parser.add_subparsers(dest="command", required=True)
    diff = sub.add_parser(
        "diff-results",
        help="compare every table (CSV, TSV, Markdown) of two results trees, but the jobs' "
        f"benchmark tables ({BENCHMARKS_ROOT}/: timings); exit 1 if any differs, 2 on a usage "
        "error (a tree that is not there)",
    )
    diff.add_argument("a")
    diff.add_argument("b")
    for name, what in (("--rtol", "relative"), ("--atol", "absolute")):
        diff.add_argument(
            name, type=_tolerance, default=0.0, help=f"{what} tolerance, >= 0 (default exact)"
        )
    diff.add_argument(
        "--renames",
        metavar="FILE",
        help="compare A (the older tree) under the renames FILE lists (a Markdown table; "
        "docs/outputs.md's: table files, columns, names, removed and added columns), so that "
        "only an unlisted rename or removal differs",
    )
    verify = sub.add_parser(
        "verify",
        help="check every store of a results tree against its manifest, every store and table "
        "against its provenance record (its path, its content, its config), and list stale "
        "temporaries and the outputs Snakemake marks incomplete; exit 1 if anything is damaged, "
        "mismatched, left or incomplete, 3 if nothing is but some stores have no manifest "
        "(written by older code: unverified); its progress (stores checked of all found, the one "
        "being checked) goes to stderr",
    )
    verify.add_argument(
        "results",
        nargs="*",
        help=f"trees to check (stores and model directories); default: {RESULTS_ROOT} and, "
        f"where it exists, {MODELS_ROOT}",
    )
    verify.add_argument(
        "--sizes-only",
        action="store_true",
        help="compare file sizes, skip checksums (faster; still finds deleted and truncated files)",
    )
    verify.add_argument(
        "--configfile",
        action="append",
        default=[],
        help="the config file the results were built with: every store's and table's settings "
        "are compared with it and it is named in the rebuild commands (default: the config file "
        "and --config overrides each store and table records it was built with)",
    )
    verify.add_argument(
        "--config",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a `snakemake --config` override the results were built with (one per --config; "
        "with or without --configfile, which then defaults to config.yaml)",
    )
    summary = sub.add_parser(
        "summary",
        help="the README's 'what was reproduced' from a scorecard: a plain-language overview "
        "(per paper: how its tests came out, its main numbers, what stays undecided) and the "
        "digest (rows that could have failed, per section, and every differs row, control not "
        "passed and failing check); --update rewrites both of the README's blocks",
    )
    summary.add_argument("scorecard", nargs="?", default=SCORECARD_CSV, help="default: %(default)s")
    summary.add_argument("--update", metavar="README", help="rewrite this file's two blocks")
    _add_findings(sub)
    catalogue = sub.add_parser(
        "catalogue",
        help="the list of every table (file, rule, what it reads, whether the scorecard reads "
        "it, what it holds) from causalpos.catalogue; --update rewrites its block in a file",
    )
    catalogue.add_argument("--update", metavar="FILE", help="e.g. docs/outputs.md")
    args = parser.parse_args(argv)
    commands = {
        "catalogue": _catalogue,
        "findings": _findings,
        "diff-results": _diff_results,
        "verify": _verify,
        "summary": _summary,
    }
    return commands[args.command](args)


if __name__ == "__main__":
    sys.exit(main())
