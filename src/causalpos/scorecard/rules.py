"""The text of the rule that decided a scorecard row, rendered from the rule itself: the
docstring of its function in :mod:`causalpos.verdicts` and the values the row judged it with
(the config's materiality threshold, a control's margin and α, a target's margin), so the
scorecard's ``rule`` column and the findings page that quotes it cannot drift from the rule.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable

#: A Sphinx role (``:func:`~causalpos.verdicts.decides```): rendered as its last name, in code.
ROLE = re.compile(r":(?:func|data|class|meth|mod|attr):`~?([^`]+)`")


def docstring_text(rule: Callable) -> str:
    """``rule``'s docstring on one line, as Markdown: roles and ````literals```` as inline
    code."""
    doc = inspect.getdoc(rule) or ""
    doc = ROLE.sub(lambda m: f"`{m[1].rsplit('.', 1)[-1]}`", doc)
    doc = re.sub(r"``([^`]+)``", r"`\1`", doc)
    return " ".join(doc.split())


def value_text(x) -> str:
    """A rule's value as the text states it: a number to four significant digits."""
    if isinstance(x, bool) or not isinstance(x, int | float):
        return str(x)
    return f"{float(x):.4g}"


def rule_text(rule: Callable, **values) -> str:
    """The rule ``rule`` (a function of :mod:`causalpos.verdicts`) as a row states it: its name,
    the values it was applied with (``name = value``, in the order given) and its docstring.
    ``rule_text(positive, threshold=0.002)`` -> "`positive` (threshold = 0.002): An effect
    larger than `threshold` ..."."""
    given = ", ".join(f"{k} = {value_text(v)}" for k, v in values.items())
    head = f"`{rule.__name__}`" + (f" ({given})" if given else "")
    return f"{head}: {docstring_text(rule)}"


def rules_text(*rules: str) -> str:
    """Several rules applied in turn (a test's rule, then its control's), as one text."""
    return " Then ".join(r for r in rules if r)
