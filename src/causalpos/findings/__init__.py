"""The findings page (``docs/findings.md``, ``results/report/findings.md``) generated from a run's
tables, so that every number it states is one of theirs: :mod:`~causalpos.findings.refs` parses
a ``{{ ... }}`` reference, :mod:`~causalpos.findings.evaluate` fills it,
:mod:`~causalpos.findings.render` renders the template and :mod:`~causalpos.findings.lint`
checks that it types no number or verdict.
"""

from causalpos.findings.render import TEMPLATE, FindingsError, Tables, render

__all__ = ["TEMPLATE", "FindingsError", "Tables", "render"]
