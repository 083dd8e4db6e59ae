"""The findings template's rule (:func:`check_template`): no number and no verdict is typed.

Outside its references (``{{ ... }}``), a template line may hold a number only where it is not a
measurement:

- in a literal span saying where it comes from: ``{{paper: ...}}`` (the papers' own values),
  ``{{setting: ...}}`` (the config, a model's shape, a data size), ``{{from PATH: ...}}`` (a
  measurement a test or a document of the repository holds; PATH must exist);
- in inline code, a link's target, an HTML comment or a heading;
- inside a name (a digit next to a letter: ``SmolLM2-135M``, ``L2``, ``kjv-chunks128``;
  scientific notation is a number, not a name);
- as a label: after ``Fig.``, ``Figs.``, ``Table``, ``§``, ``Eq.``, ``claim``, ``App.``,
  ``paper`` or ``panel`` (lists allowed: "Figs. 2, 4 and 6"), or after ``layer`` / ``layers``
  (one number, or two joined by "–", "/", "and", "or");
- the integers 0 and 1 (an interval excludes 0, a share of 1 by construction), and an ordered
  list's item number.

A verdict label of the scorecard (:data:`causalpos.verdicts.TESTED`, ``CONTROL``, ``CHECK``) may
appear outside references only in a heading, in a ``{{term: ...}}`` span (the word, not a
verdict) or in the section that defines the verdicts (:data:`DEFINITIONS`).
"""

from __future__ import annotations

import re
from pathlib import Path

from causalpos.findings.refs import Literal, RefError, parse
from causalpos.findings.render import LET, REF, TEMPLATE_NOTE
from causalpos.verdicts import CHECK, CONTROL, TESTED

#: Sections (``## `` headings) that define the verdict words rather than state verdicts.
DEFINITIONS = ("How the scorecard decides",)
VERDICTS = (*TESTED, *CONTROL, *CHECK)

_DOC_LABEL = r"(?:Tables?|Figs?\.|§|Eqs?\.|[Cc]laims?|App\.|[Pp]apers?|[Pp]anels?|\bS\()"
_SEP = r"\s*(?:,|and|or|–|-|/|&)\s*(?:§|Fig\.\s*)?"
DOC_LABELS = re.compile(_DOC_LABEL + r"\s*\d+(?:" + _SEP + r"\d+)*")
LAYER_LABELS = re.compile(r"\b[Ll]ayers?\s+(?:from\s+)?\d+(?:\s*(?:–|-|/|and|or)\s*\d+)?")
NUMBER = re.compile(r"\d+(?:[.,]\d+)*(?:e[-+]?\d+)?")
SCIENTIFIC = re.compile(r"[-+]?\d+(?:\.\d+)?e[-+]?\d+")
_WORD = re.compile(r"[A-Za-z0-9_.+\-]*\d[A-Za-z0-9_.+\-]*")
HIDDEN = (
    re.compile(r"<!--.*?-->", re.S),  # comments: lets, notes
    re.compile(r"`[^`\n]*`"),  # inline code
    re.compile(r"\]\([^)\s]*\)"),  # link targets
    re.compile(r"https?://\S+"),
)


def _blank(m: re.Match) -> str:
    """A match replaced by spaces, its newlines kept (line numbers stay the template's)."""
    return re.sub(r"[^\n]", " ", m[0])


def _spans(template: str, root: Path | None) -> tuple[str, list[str]]:
    """The template with every reference and literal span blanked (a ``term`` span's text kept
    out of the verdict check too), and the problems of the references themselves."""
    problems = []

    def one(m: re.Match) -> str:
        line = template.count("\n", 0, m.start()) + 1
        try:
            ref = parse(m[1])
        except RefError as e:
            problems.append(f"line {line}: {{{{{m[1].strip()}}}}}: {e.reason}")
            return _blank(m)
        body = ref.body
        is_from = isinstance(body, Literal) and body.kind == "from" and root is not None
        if is_from and not (root / body.source).exists():
            problems.append(f"line {line}: 'from {body.source}': no such file in the repository")
        return _blank(m)

    text = TEMPLATE_NOTE.sub(_blank, template)
    text = LET.sub(_blank, text)
    return REF.sub(one, text), problems


def _is_name(line: str, m: re.Match) -> bool:
    for w in _WORD.finditer(line):
        if w.start() <= m.start() and m.end() <= w.end():
            word = w[0].strip(".+-")
            return bool(re.search(r"[A-Za-z_]", word)) and not SCIENTIFIC.fullmatch(word)
    return False


def _number_problems(line: str) -> list[str]:
    if re.match(r"\s*#", line):
        return []
    line = re.sub(r"^\s*\d+\.\s", "   ", line)  # an ordered list's item number
    for pattern in (DOC_LABELS, LAYER_LABELS):
        line = pattern.sub(lambda m: re.sub(r"\d", "#", m[0]), line)
    numbers = NUMBER.finditer(line)
    return [m[0] for m in numbers if m[0] not in ("0", "1") and not _is_name(line, m)]


def check_template(template: str, root: str | Path | None = None) -> list[str]:
    """Every number typed where a measurement would be, every verdict typed outside a reference,
    every malformed reference and every ``from PATH`` span whose PATH is not under ``root`` (the
    repository; None: not checked), one line each, by template line. Empty: the template keeps
    its rule."""
    text, problems = _spans(template, Path(root) if root is not None else None)
    for pattern in HIDDEN:
        text = pattern.sub(_blank, text)
    verdict = re.compile(r"\b(" + "|".join(map(re.escape, VERDICTS)) + r")\b", re.I)
    section = ""
    for no, line in enumerate(text.splitlines(), 1):
        heading = re.match(r"\s*(#+)\s*(.*)", line)
        if heading:
            if len(heading[1]) <= 2:
                section = heading[2].strip()
            continue
        for n in _number_problems(line):
            problems.append(
                f"line {no}: number {n!r} typed outside a reference (a measurement must be "
                "{{table[...].column}}; a paper value, setting or test's number a literal span)"
            )
        if section not in DEFINITIONS:
            for m in verdict.finditer(line):
                problems.append(
                    f"line {no}: verdict word {m[0]!r} typed outside a reference (read it from "
                    "the scorecard: {{scorecard[target=...].verdict}}, or {{term: ...}} for the "
                    "word itself)"
                )
    return sorted(problems, key=lambda p: int(p.split(":")[0].split()[1]))
