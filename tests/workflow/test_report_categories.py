"""`snakemake --report` categories: each becomes a docutils target in every caption."""

from __future__ import annotations

import io
import re

from tests.wfutil import REPO


def _categories() -> set[str]:
    """Every category the rules name, and the tables' (causalpos.catalogue)."""
    from causalpos.catalogue import TABLES

    rules = "\n".join(p.read_text() for p in (REPO / "workflow" / "rules").glob("*.smk"))
    return set(re.findall(r'(?:sub)?category="([^"]+)"', rules)) | {t.category for t in TABLES}


def test_report_categories_make_distinct_docutils_targets():
    from docutils.core import publish_string

    cats = sorted(c for c in _categories() if "{" not in c)
    assert len(cats) >= 6
    # what Snakemake's report prepends to every caption (snakemake/report/__init__.py): one
    # explicit target per category; a name with ": " is cut at the colon, so "Paper 2: tables"
    # and "Paper 2: figures" both defined "Paper 2" (docutils: Duplicate explicit target name)
    rst = "Caption.\n\n" + "\n".join(f".. _{c}: javascript:app.showCategory('{c}')" for c in cats)
    warnings = io.StringIO()
    publish_string(
        rst, writer_name="html", settings_overrides={"warning_stream": warnings, "report_level": 2}
    )
    assert warnings.getvalue() == "", warnings.getvalue()
