"""Paper 2 (Ruscio et al. 2026): where absolute position leaks into attention maps, and how much of
it the causal mask and the residual stream put there. Sub-packages, in the order the data flows:
``extraction/``, ``estimator/``, ``summary/``, ``tables/`` (CONTRIBUTING.md's layout); the
decomposition's components: :mod:`.decomposition`; every interval and test: :mod:`.inference`.

``causalpos.paper2.leakage(model, tokens, ...)``: the headline leakage and decomposition of a
model already in memory (:func:`causalpos.api.paper2.paper2_leakage`, imported at first use so
that no rule's code fingerprint includes the notebook API).
"""


def __getattr__(name: str):
    if name != "leakage":
        raise AttributeError(f"module 'causalpos.paper2' has no attribute {name!r}")
    import importlib

    return importlib.import_module("causalpos.api.paper2").paper2_leakage
