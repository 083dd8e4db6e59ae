"""Stage ``init_twin``: the untrained twin of a model trained here."""

from __future__ import annotations

from causalpos.training import twin


def init_twin(trained_dir, out):
    """Rule ``init_twin``: the exact weights the training of ``trained_dir`` started from."""
    return twin.prepare_init_twin(trained_dir, out)
