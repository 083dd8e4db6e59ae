"""Figure rules of paper 2: summary and position-0 stores in, figure files out."""

from __future__ import annotations

from collections.abc import Sequence

from causalpos.figures import paper2
from causalpos.io.store import open_dataset


def _opened(labels: Sequence[str], stores: Sequence[str]) -> dict:
    return {label: open_dataset(p) for label, p in zip(labels, stores, strict=True)}


def plot_paper2_layers(
    stores: Sequence[str], outputs: Sequence[str], *, labels: Sequence[str]
) -> None:
    """Rule ``plot_paper2_layers``: §3's components by layer on the headline, per (model,
    dataset)."""
    paper2.leakage_by_layer(_opened(labels, stores), list(outputs))


def plot_paper2_shares(
    stores: Sequence[str], outputs: Sequence[str], *, labels: Sequence[str]
) -> None:
    """Rule ``plot_paper2_shares``: the causal-mask share on four readings of the headline."""
    paper2.component_shares(_opened(labels, stores), list(outputs))


def plot_paper2_position0(
    stores: Sequence[str], outputs: Sequence[str], *, labels: Sequence[str]
) -> None:
    """Rule ``plot_paper2_position0``: position-0 cross-prompt deviation per condition."""
    paper2.position0_conditions(_opened(labels, stores), list(outputs))


def plot_paper2_heads(store: str, outputs: Sequence[str]) -> None:
    """Rule ``plot_paper2_heads``: the headline per head, BH q-values marked, of one summary."""
    paper2.head_maps(open_dataset(store), list(outputs))
