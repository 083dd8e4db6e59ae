"""Figures: one module per family (``paper1``, ``paper2``, ``training``, ``training_compare``),
shared helpers and style in ``common``, the display names in ``labels``."""
