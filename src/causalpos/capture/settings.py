"""Extraction's settings, declared once (standard library only): :class:`ExtractSettings`, what an
extraction job reads from the resolved config (each field's config key and default:
:mod:`causalpos.settings`), and :class:`CaptureRun`, how one variant runs through the capture hook.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from causalpos.settings import Scheduling, from_params, setting, shared


@dataclass(frozen=True)
class ExtractSettings:
    """What one extraction job (rule ``extract_scores``) reads from the config beside its
    variants and shard."""

    batch_size: int | str = setting(
        16, "extract.batch_size", 'sequences per forward pass, or "auto" (free memory)'
    )
    memory_fraction: float | None = setting(
        0.8,
        "extract.memory_fraction",
        'the share of free memory "auto" plans for (None: the batch size is given)',
    )
    n_groups: int = setting(16, "extract.n_groups", "head-averaged maps per group of sequences")
    dtype: str = shared("dtype", "the model's weights and activations")
    seed: int = shared("seed", "randomised variants' draws")
    # where the model runs changes no number: the rule's untracked ``run`` (Scheduling.device)
    device: str = setting(Scheduling.device, None, "where the model runs (changes no number)")

    from_params = classmethod(from_params)


@dataclass(frozen=True)
class CaptureRun:
    """One forward-pass variant through :func:`causalpos.capture.hook.capture_scores`: ``plant``
    as :func:`~causalpos.capture.hook.resolve_plant` reads it, ``stream`` as
    :func:`causalpos.capture.stream.resolve_stream` does; ``seed`` of the variant's random draws;
    ``progress``: a progress bar to stderr (the job log)."""

    variant: str
    batch_size: int
    seed: int = 0
    plant: Mapping[str, Any] | None = None
    stream: Mapping[str, Any] | None = None
    progress: bool = True
