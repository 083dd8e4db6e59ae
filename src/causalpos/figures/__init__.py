"""Figures: one module per family (``paper1``, ``paper2``, ``training``), shared helpers in ``common``."""
