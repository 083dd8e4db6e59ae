"""The findings page (``docs/findings.md``, ``results/report/findings.md``) generated from a run's
tables, so that every number it states is one of theirs.

Modules: :mod:`~causalpos.findings.refs` (what a ``{{ ... }}`` reference holds, parsed),
:mod:`~causalpos.findings.evaluate` (a reference filled from the tables),
:mod:`~causalpos.findings.render` (the template rendered: aliases, directives, strict or with
markers for what a partial run lacks), :mod:`~causalpos.findings.lint` (the template's rule: no
number and no verdict typed outside a reference).
"""

from causalpos.findings.render import TEMPLATE, FindingsError, Tables, render

__all__ = ["TEMPLATE", "FindingsError", "Tables", "render"]
