"""capture: every layer's pre-softmax scores, read inside a model's own forward pass.

The package is callable: ``causalpos.capture(model, tokens, ...)`` is
:func:`causalpos.api.scores.capture` (imported at the call, so no rule's code fingerprint
includes the notebook API).
"""

import importlib
import sys
import types


class _CallablePackage(types.ModuleType):
    """This package, callable as :func:`causalpos.api.scores.capture`."""

    def __call__(self, model, tokens, *args, **kwargs):
        return importlib.import_module("causalpos.api.scores").capture(
            model, tokens, *args, **kwargs
        )


sys.modules[__name__].__class__ = _CallablePackage
