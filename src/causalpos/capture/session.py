"""The state of one score capture (:mod:`causalpos.capture.hook`): the reducers fed, the batch's
sequence ids, each layer's scaling and soft-capping, the reusable float32 score buffer, the masks'
NaN patterns and the NaN counts each batch is checked against, and a variant's planted term."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import torch

from causalpos.capture.reducers import Reducer

#: The name the capture's attention and mask functions are registered under in transformers.
CAPTURE_IMPLEMENTATION = "causalpos_capture"
_FLOAT32_MAX = float(torch.finfo(torch.float32).max)


class CaptureSession:
    """The state of one capture (module docstring)."""

    def __init__(self, reducers: Sequence[Reducer]) -> None:
        self.reducers = list(reducers)
        self.scaling: dict[int, float] = {}
        self.softcap: dict[int, float | None] = {}
        self._buffer: torch.Tensor | None = None
        self.begin_batch(np.zeros(0, dtype=np.int64))
        #: ``layer_bidirectional``: the maps are recorded without the mask (the forward pass
        #: keeps it)
        self.unmasked = False
        self.no_window = False  # variant no_window: every mask must be causal
        #: ``plant_query``: layer -> the planted term b (float64, (T,)) added to its query rows
        self.plant: dict[int, np.ndarray] = {}
        self._plant_t: dict[tuple[int, int, torch.device], torch.Tensor] = {}
        #: ``ring``: the rotation of keys by ±T (:class:`causalpos.capture.ring.RingRotation`)
        #: and the batch's position ids (None: 0..T−1 for every sequence)
        self.ring = None
        self.position_ids: torch.Tensor | None = None

    def plant_rows(self, layer: int, tq: int, device: torch.device) -> torch.Tensor | None:
        """The planted term of ``layer`` as a float32 (1, 1, tq, 1) column (None: no plant), for
        the last ``tq`` positions of the sequence."""
        if layer not in self.plant:
            return None
        key = (layer, tq, device)
        if key not in self._plant_t:
            b = self.plant[layer]
            if tq > len(b):
                raise RuntimeError(f"capture: planted term of length {len(b)} for {tq} queries")
            col = torch.as_tensor(b[len(b) - tq :], dtype=torch.float32, device=device)
            self._plant_t[key] = col.view(1, 1, tq, 1)
        return self._plant_t[key]

    def positions(self, seq_len: int, device: torch.device) -> torch.Tensor:
        """The batch's position ids ``(b or 1, T)``: those passed to the model (scrambled RoPE),
        else 0..T−1."""
        if self.position_ids is not None:
            return self.position_ids.to(device)
        return torch.arange(seq_len, device=device)[None]

    def full_allowed(self, allowed: torch.Tensor) -> torch.Tensor:
        """An all-True mask shaped like ``allowed`` (one per mask object and batch)."""
        key = id(allowed)
        if key not in self._full:
            self._full[key] = torch.ones_like(allowed)
        return self._full[key]

    def begin_batch(self, seq_ids: np.ndarray) -> None:
        self.seq_ids = np.asarray(seq_ids, dtype=np.int64)
        self.calls: list[int] = []
        self._masks: dict[int, tuple[torch.Tensor, torch.Tensor | None, str]] = {}
        self._masked: dict[tuple[int, int, int], int] = {}
        self._nan: list[tuple[int, torch.Tensor, int]] = []
        self._full: dict[int, torch.Tensor] = {}  # the all-allowed pattern of each mask

    def count_nan(
        self,
        layer: int,
        scores: torch.Tensor,
        mask: torch.Tensor,
        q: torch.Tensor,
        k: torch.Tensor,
        scaling: float,
    ) -> None:
        """Record how many of ``scores`` are NaN, and how many the mask hides (the expected
        count), for :meth:`check_nan`.

        On a GPU the count stays on the device, so the forward pass does not wait. On a CPU a
        bound comes first: with every query and key entry finite and max|q| · max|k| · d ·
        |scaling| below float32's largest value, no product or sum can overflow, so every
        allowed cell is finite and only the mask's cells are NaN; the count (a pass over the
        scores, as long as their matmul) is taken only when the bound fails.
        """
        if scores.device.type == "cpu":
            d = q.shape[-1]
            bound = float(q.abs().amax()) * float(k.abs().amax()) * d * abs(scaling)
            if math.isfinite(bound) and bound < _FLOAT32_MAX:
                return
        b, h = scores.shape[:2]
        key = (id(mask), b, h)
        if key not in self._masked:
            self._masked[key] = int((~mask).expand(b, h, *scores.shape[2:]).sum())
        self._nan.append((layer, torch.count_nonzero(torch.isnan(scores)), self._masked[key]))

    def check_nan(self) -> None:
        """Raise if a layer of the batch produced NaN scores where its mask allows a value."""
        if not self._nan:
            return
        counts = torch.stack([c for _, c, _ in self._nan]).tolist()  # one sync per batch
        for (layer, _, masked), n in zip(self._nan, counts, strict=True):
            if n > masked:
                raise FloatingPointError(
                    f"capture: the model produced NaN scores in layer {layer} ({n - masked} "
                    f"values where the attention mask allows one; sequences "
                    f"{int(self.seq_ids.min())}..{int(self.seq_ids.max())}): its weights or "
                    "activations are not finite. A trained model that diverged (NaN loss in "
                    "its training log) must be retrained with a lower train.lr; a model run in "
                    "float16 that overflows needs `dtype: bfloat16` or `dtype: float32` in the "
                    "config. Nothing was written for this shard."
                )

    def buffer(self, shape: tuple[int, ...], device: torch.device) -> torch.Tensor:
        n = math.prod(shape)
        if self._buffer is None or self._buffer.numel() < n or self._buffer.device != device:
            self._buffer = torch.empty(n, dtype=torch.float32, device=device)
        return self._buffer[:n].view(shape)

    def mask_info(
        self, mask: torch.Tensor | None, tq: int, tk: int
    ) -> tuple[torch.Tensor, torch.Tensor | None, str]:
        """``(allowed, nan_bias, kind)`` of a layer's boolean mask (cached per mask object).

        ``kind``: "causal" | "full" | "custom". ``nan_bias`` (float32, 0 where allowed, NaN where
        masked; None when nothing is masked) is added to the scores: one fused pass instead of
        a scale and a masked fill.
        """
        if mask is None:
            raise RuntimeError(
                "capture: the model passed no attention mask to the capture implementation, so "
                "masked cells cannot be marked. Either the mask registration "
                f"(AttentionMaskInterface[{CAPTURE_IMPLEMENTATION!r}]) is missing or the model "
                "builds masks another way; this architecture is not supported by the capture"
            )
        key = id(mask)
        if key not in self._masks:
            if mask.dtype != torch.bool:
                raise RuntimeError(f"capture: expected a boolean mask, got {mask.dtype}")
            # Without padding every row of the batch has the same mask: broadcast one.
            shared = mask[:1] if bool((mask == mask[:1]).all()) else mask
            causal = torch.ones((tq, tk), dtype=torch.bool, device=mask.device).tril(
                diagonal=tk - tq
            )
            if bool(shared.all()):
                kind, bias = "full", None
            else:
                kind = "causal" if bool((shared == causal).all()) else "custom"
                bias = torch.zeros(shared.shape, dtype=torch.float32, device=mask.device)
                bias.masked_fill_(~shared, float("nan"))
            self._masks[key] = (mask, bias, kind)
        return self._masks[key]
