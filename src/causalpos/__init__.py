"""causalpos: where positional information comes from in decoder-only transformers.

The science of two studies, importable and unit-tested:

- Kim et al. (2025), *Behind RoPE: How Does Causal Mask Encode Positional Information?*
- Ruscio et al. (2026), *Where does Absolute Position come from in decoder-only Transformers?*

Imports go one way, science <- ``stages`` <- the workflow's scripts and :mod:`causalpos.api`
(CONTRIBUTING.md, "Architecture rules"; tests/test_architecture.py enforces them).

From a notebook (:mod:`causalpos.api`, ``docs/api.md``): ``causalpos.tokenize_texts``,
``causalpos.capture(model, tokens)``, ``causalpos.paper1.index(model, tokens)``,
``causalpos.paper2.leakage(model, tokens)``.
"""

__version__ = "0.1.0"

#: Names of the notebook API resolved at first use (module, attribute): ``import causalpos``
#: stays light, and no job's code fingerprint includes the API (importlib, not an import
#: statement: no rule runs it). ``causalpos.capture`` is the callable package itself;
#: ``causalpos.paper1`` and ``causalpos.paper2`` the packages (``.index``, ``.leakage``).
_LAZY = {
    "capture": ("causalpos.capture", None),
    "paper1": ("causalpos.paper1", None),
    "paper2": ("causalpos.paper2", None),
    "tokenize_texts": ("causalpos.sampling", "tokenize_texts"),
}


def __getattr__(name: str):
    if name not in _LAZY:
        raise AttributeError(f"module 'causalpos' has no attribute {name!r}")
    import importlib

    module, attr = _LAZY[name]
    found = importlib.import_module(module)
    return found if attr is None else getattr(found, attr)
