"""Paper 2 (Ruscio et al. 2026): where absolute position leaks into attention maps, and how much of
it the causal mask and the residual stream put there.

Where each quantity is computed:

- the headline leakage (ΔR² of a run's expected map, content-free): the estimator
  :func:`causalpos.paper2.estimator.expected.estimate`, read for every run by
  :func:`causalpos.paper2.summary.headline.leakage_block`;
- the decomposition's components (§3, in one unit): :mod:`causalpos.paper2.decomposition`;
- every interval and test: :mod:`causalpos.paper2.inference`;
- claim 4's verdict: :mod:`causalpos.scorecard.paper2_claim4` (the scorecard reads the tables).

Sub-packages, in the order the data flows: ``extraction/``, ``estimator/``, ``summary/``,
``tables/`` (what each holds: CONTRIBUTING.md's layout).

``causalpos.paper2.leakage(model, tokens, ...)``: the headline leakage and decomposition of a
model already in memory, one tidy frame (:func:`causalpos.api.paper2.paper2_leakage`, resolved at
first use: importlib, so no rule's code fingerprint includes the notebook API).
"""


def __getattr__(name: str):
    if name != "leakage":
        raise AttributeError(f"module 'causalpos.paper2' has no attribute {name!r}")
    import importlib

    return importlib.import_module("causalpos.api.paper2").paper2_leakage
