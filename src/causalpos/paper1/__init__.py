"""paper1

``causalpos.paper1.index(model, tokens, ...)``: the non-relativeness index of a model already in
memory (:func:`causalpos.api.paper1.paper1_index`, resolved at first use: importlib, so no rule's
code fingerprint includes the notebook API)."""


def __getattr__(name: str):
    if name != "index":
        raise AttributeError(f"module 'causalpos.paper1' has no attribute {name!r}")
    import importlib

    return importlib.import_module("causalpos.api.paper1").paper1_index
