"""The positive control that propagates: an absolute-position term planted in the residual
stream of one lower layer (variants ``plant_stream<k>``, :mod:`causalpos.models.variants`), as a
dose series (paper2.md §2, Controls).

A forward pre-hook on decoder layer ℓ (``model.model.layers[ℓ]``) adds to the hidden state of
position i of sequence p

    Δh_pi = dose · s_p · g(i) · u,

``dose`` the k-th entry of ``leakage.plant_stream.doses``, s_p the stream's RMS norm at the
layer's input measured on the sequence itself (s_p² = mean_i ‖h_pi‖², before the term), g a fixed
position profile of unit RMS (:func:`stream_profile`), u a unit direction drawn from the run's
seed (:func:`stream_direction`): the dose is the plant's size relative to the stream, the same
number for every model. Layers below ℓ are bit for bit the unplanted run's; ℓ and above read the
term through their own norms, projections, attention and MLPs: it propagates, unlike a query term
in the last layer's logits, which cancels in the softmax (:mod:`causalpos.paper2.summary.planted`).

The profile (decision): ``log``, g(i) = log(1 + i) centred over 0..T−1 and scaled to unit RMS.
Centred, because a constant vector added to every token carries no position; a function of i,
never of i − j, so its effect on a logit map (a query and a key effect) is not absorbed by a
relative baseline; decaying as models' absolute-position effects do, smooth and monotone.
``linear`` (g ∝ i, centred, unit RMS) is the alternative without the decay. Planted in a
position-free run (``identity_rope+plant_stream<k>+bidirectional``) the plant is the only absolute
position: dose 0 reads ≈ 0 and the reading must rise with the dose
(:mod:`causalpos.paper2.summary.doses`). Memory: the profile times the direction (T × d float32,
per device) and one hidden state per batch.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from causalpos.capture.position0 import decoder_layers
from causalpos.models.variants import Variant, _rng, plant_layer

#: The profiles g(i) a stream plant may take (config ``leakage.plant_stream.profile``).
STREAM_PROFILES = ("log", "linear")

#: Store attrs of a stream-planted run (written by :func:`resolve_stream`).
STREAM_ATTRS = tuple(
    f"plant_stream_{k}" for k in ("layer", "dose", "index", "profile", "seed", "norm")
)

#: ``plant_stream_norm``: what s_p is.
STREAM_NORM = "per-sequence RMS over positions of the layer input's norm, sqrt(mean_i |h_i|^2)"

#: The draw stream of :func:`causalpos.models.variants._rng` the direction u comes from.
_DIRECTION_STREAM = 4


def stream_profile(seq_len: int, profile: str = "log") -> np.ndarray:
    """g (float64, (seq_len,)): the position profile, centred over positions 0..T−1 and scaled
    to unit RMS (module docstring): ``log`` from log(1 + i), ``linear`` from i."""
    if profile not in STREAM_PROFILES:
        raise ValueError(
            f"leakage.plant_stream.profile {profile!r} unknown; allowed: {list(STREAM_PROFILES)}"
        )
    if seq_len < 2:
        raise ValueError(f"stream_profile: a position profile needs seq_len >= 2, got {seq_len}")
    i = np.arange(seq_len, dtype=np.float64)
    g = np.log1p(i) if profile == "log" else i
    g = g - g.mean()
    return g / np.sqrt(np.mean(g * g))


def stream_direction(hidden: int, seed: int) -> np.ndarray:
    """u (float64, (hidden,)): a unit vector drawn from ``seed`` (the same for every sequence and
    every dose of a series)."""
    u = _rng(seed, None, _DIRECTION_STREAM).standard_normal(int(hidden))
    return u / np.linalg.norm(u)


@dataclass(frozen=True)
class StreamPlant:
    """A resolved stream plant: layer ℓ (0-based), dose, profile g (T,) and direction u (d,)."""

    layer: int
    dose: float
    profile: np.ndarray
    direction: np.ndarray
    _cache: dict = field(default_factory=dict, compare=False, repr=False)

    def term(self, device: torch.device) -> torch.Tensor:
        """dose · g(i) · u as a float32 (T, d) tensor on ``device`` (cached), to be scaled by
        each sequence's s_p."""
        key = str(device)
        if key not in self._cache:
            gu = self.dose * np.outer(self.profile, self.direction)
            self._cache[key] = torch.as_tensor(gu, dtype=torch.float32, device=device)
        return self._cache[key]

    def add(self, h: torch.Tensor) -> torch.Tensor:
        """``h`` (batch, T, d) plus dose · s_p · g(i) · u, s_p measured on ``h`` (float32), in
        ``h``'s dtype."""
        if h.ndim != 3 or h.shape[1] != len(self.profile) or h.shape[2] != len(self.direction):
            raise RuntimeError(
                f"stream plant: hidden state {tuple(h.shape)} at layer {self.layer}, planted "
                f"for {len(self.profile)} positions of width {len(self.direction)}"
            )
        hf = h.to(torch.float32)
        s = hf.pow(2).sum(-1).mean(-1).sqrt()  # (batch,): the stream's RMS norm
        out = hf + s[:, None, None] * self.term(h.device)[None]
        return out.to(h.dtype)


def resolve_stream(
    variant: Variant,
    spec: Mapping[str, Any] | None,
    *,
    n_layers: int,
    shape: tuple[int, int],
    seed: int,
) -> tuple[StreamPlant | None, dict[str, Any]]:
    """The stream plant of ``variant`` and the store attrs that record it (:data:`STREAM_ATTRS`).

    ``spec``: ``{"layer": int (negative counts from the last), "dose": float >= 0, "profile":
    one of STREAM_PROFILES}`` (config ``leakage.plant_stream``), required by a ``plant_stream<k>``
    variant and refused by any other; ``shape``: (seq_len, hidden)."""
    if not variant.stream:
        if spec:
            raise ValueError(
                f"capture: variant {variant.name!r} plants nothing in the residual stream but "
                f"stream settings {dict(spec)} were given; give them only to a plant_stream<k> "
                "variant"
            )
        return None, {}
    if not spec or set(spec) != {"layer", "dose", "profile"}:
        raise ValueError(
            f"capture: variant {variant.name!r} needs stream={{'layer': int, 'dose': float, "
            f"'profile': str}} (config leakage.plant_stream), got {spec!r}"
        )
    dose = float(spec["dose"])
    if not np.isfinite(dose) or dose < 0:
        raise ValueError(f"leakage.plant_stream.doses: a dose must be >= 0, got {spec['dose']!r}")
    layer = plant_layer(spec["layer"], n_layers, key="leakage.plant_stream.layer")
    seq_len, hidden = shape
    plant = StreamPlant(
        layer=layer,
        dose=dose,
        profile=stream_profile(seq_len, str(spec["profile"])),
        direction=stream_direction(hidden, seed),
    )
    attrs = {
        "plant_stream_layer": layer,
        "plant_stream_dose": dose,
        "plant_stream_index": int(variant.stream),
        "plant_stream_profile": str(spec["profile"]),
        "plant_stream_seed": int(seed),
        "plant_stream_norm": STREAM_NORM,
    }
    return plant, attrs


@contextmanager
def planted_stream(model: torch.nn.Module, plant: StreamPlant | None) -> Iterator[None]:
    """Inside the block, every forward pass of ``model`` adds ``plant``'s term to the input of
    decoder layer ``plant.layer`` (a forward pre-hook; removed on exit). ``None`` or dose 0:
    no hook, the model's own forward pass."""
    if plant is None or plant.dose == 0:
        yield
        return
    layers = decoder_layers(model)
    if layers is None:
        raise ValueError(
            f"stream plant: {type(model).__name__} has no decoder blocks (model.model.layers) to "
            "plant the term in; run plant_stream variants on a Llama-family model"
        )

    def hook(_mod, args, kwargs):
        if args:
            return (plant.add(args[0]), *args[1:]), kwargs
        return args, dict(kwargs, hidden_states=plant.add(kwargs["hidden_states"]))

    handle = layers[plant.layer].register_forward_pre_hook(hook, with_kwargs=True)
    try:
        yield
    finally:
        handle.remove()
