"""Paper 2's extraction-time reducers: per-map leakage and attention to key 0 (sinks)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
import xarray as xr

from causalpos import stats
from causalpos.capture import merging
from causalpos.models.layer_kinds import pattern
from causalpos.paper2.extraction.design import parse_fit, query_window
from causalpos.paper2.extraction.mapsums import (
    PairKit,
    cached_log_z,
    key0_attention,
    map_tiles,
    pair_kit,
    row_log_z,
    shared_log_z,
    tile_sums,
)
from causalpos.paper2.extraction.metric import (
    DEFAULT_FITS,
    DEFAULT_WINDOWS,
    SPLIT_TERMS,
    TARGETS,
    allowed_pattern,
    measured_mask,
)
from causalpos.paper2.extraction.windows import WindowPlan, plan_windows, window_leakage

#: Each per-sequence variable's dims after (sequence, layer, head); ``leak_delta``'s: the others'.
_DIMS = {
    "leak_delta": ("leak_window", "leak_fit", "leak_target"),
    "leak_sst": ("leak_window", "leak_target"),
    "leak_split": ("leak_window", "leak_fit", "leak_term"),
    "leak_offsum": ("leak_exp_window", "leak_target", "leak_offset"),
    "leak_key0sum": ("leak_exp_window", "leak_target"),
    "leak_rowsum": ("leak_target", "query"),
}


class LeakageReducer:
    """Per-(sequence, layer, head) leakage during extraction; implements capture's Reducer protocol.

    Result variables (prefixed ``leak_`` so they merge into the score store without clashes;
    per-sequence dims: :data:`_DIMS`, float64 unless stated):

    - per query window × fit × target (``logit``, ``logattn``): ``leak_r2_base``, ``leak_r2_full``,
      ``leak_delta`` (ΔR²), ``leak_null`` (its exact permutation-null mean), ``leak_sst`` (no fit);
    - ``leak_split``: the observational split of the log-attention ΔSS, terms
      logit/logz/cross/logattn in units of SST(log-attention);
    - ``leak_floor`` (layer, leak_window, leak_fit) k/(N−1); ``leak_n_pairs`` (layer, leak_window);
    - with ``mean_maps``: ``leak_map_sum`` (layer, head, query, key), the logits summed over
      sequences (NaN where masked), ``leak_logz_sum`` (layer, head, query), each row's log Z
      summed, and ``leak_map_count`` (); the summed log-attention maps are ``leak_map_sum −
      leak_logz_sum`` broadcast over keys (:func:`causalpos.paper2.estimator.storeview.map_sum`);
    - with ``expected_stats``, the expected-map estimator's per-prompt sums
      (:mod:`causalpos.paper2.estimator.expected`) of each map centred by its mean over all
      measured pairs, float32: ``leak_offsum`` over each offset's pairs of the window,
      ``leak_key0sum`` over its key-0 pairs, ``leak_rowsum`` over each query row.

    Args:
        fits: fit names (``"<baseline>+<absolute>"``); windows: query windows
            (:func:`query_window`).
        pair_subsample: at most this many pairs per offset (stratified, ``seed``), the same
            pairs for every map.
        mean_maps: accumulate the summed maps (memory: layers × heads × T × (T + 1) float64).
        expected_stats: the estimator's sums for every window (True) or the listed ones, and the
            summed maps its denominator reads (``mean_maps`` is then on): 2 targets ×
            ((E + 1) × T + E) float32 per sequence, layer and head for E windows (17.8 MB for
            32 prompts, 30 layers × 9 heads, T = 128, E = 1).

    Cost: per (layer, batch) a few float64 passes over the scores, tile by tile, and matrix
    products with the windows' row blocks (:mod:`causalpos.paper2.extraction.mapsums`; log Z
    shared with the :class:`SinkReducer`), plus one T-sized quadratic form per map, window, fit
    and target; designs are built once per pair mask and cached. ``*+both`` fits cost the most.
    """

    name = "leakage"
    #: per-sequence outputs of the default reducer; ``expected_stats`` adds merging.EXPECTED_STATS
    _PER_SEQ = tuple(k for k in merging.LEAKAGE_PER_SEQ if k not in merging.EXPECTED_STATS)

    def __init__(
        self,
        *,
        fits: Sequence[str] = DEFAULT_FITS,
        windows: Sequence[str] = DEFAULT_WINDOWS,
        pair_subsample: int | None = None,
        seed: int = 0,
        mean_maps: bool = True,
        expected_stats: bool | Sequence[str] = False,
    ) -> None:
        for f in fits:
            parse_fit(f)
        for wname in windows:
            query_window(wname, 64)
        if not fits or not windows:
            raise ValueError("LeakageReducer needs at least one fit and one window")
        self.fits = tuple(fits)
        self.windows = tuple(windows)
        self.pair_subsample = pair_subsample
        self.seed = seed
        if expected_stats is True:
            expected_stats = self.windows
        self.expected_windows = tuple(expected_stats or ())
        unknown = [w for w in self.expected_windows if w not in self.windows]
        if unknown:
            raise ValueError(
                f"expected_stats windows {unknown} are not among the reducer's windows "
                f"{list(self.windows)}"
            )
        self.expected_stats = bool(self.expected_windows)
        if self.expected_stats:
            self._PER_SEQ = merging.LEAKAGE_PER_SEQ
            mean_maps = True  # the estimator's denominator reads the summed maps
        self.mean_maps = mean_maps
        #: layer -> [(sequence ids, {variable: (batch, ...) array})], one entry per chunk
        self._rows: dict[int, list[tuple[np.ndarray, dict[str, np.ndarray]]]] = {}
        self._seen: dict[int, set[int]] = {}  # layer -> the sequence ids added
        #: measured pairs -> their windows' designs and the pair kit of each device
        self._plans: dict[bytes, tuple[WindowPlan, dict[str, PairKit]]] = {}
        #: (layer kind, T) -> (measured pairs, the kind's trained pattern as a bool tensor)
        self._kind_bases: dict[tuple[str, int], tuple[np.ndarray, torch.Tensor]] = {}
        self._meta: dict[int, tuple[np.ndarray, np.ndarray]] = {}  # layer -> (floor, n_pairs)
        self._map_sum: dict[int, torch.Tensor] = {}  # layer -> Σ logits (head, T, T)
        self._lz_sum: dict[int, torch.Tensor] = {}  # layer -> Σ log Z (head, T)
        self._count: dict[int, int] = {}
        self._shape: tuple[int, int] | None = None  # (heads, T)

    def set_layer_kinds(self, kinds: Sequence[str]) -> None:
        """Each layer's kind (:mod:`causalpos.models.layer_kinds`): every run of the model is
        then measured on the pairs its layer attends to *as trained* (the causal pattern of its
        kind), whatever mask the run itself used, so the runs of a decomposition share their
        pairs; set by :func:`causalpos.capture.hook.capture_scores` before the first batch."""
        self._kinds = [str(k) for k in kinds]

    def _base_mask(self, finite: torch.Tensor | np.ndarray, layer: int) -> np.ndarray:
        """Measured pairs over all query rows (windows restrict rows of this mask): the layer's
        pattern as trained where its kind is known (every one of them finite in this run), else
        the run's own finite pattern."""
        T = finite.shape[-1]
        sub = None
        if self.pair_subsample is not None:
            sub = stats.stratified_pair_mask(T, self.pair_subsample, self.seed)
        allowed = allowed_pattern(finite)
        kinds = getattr(self, "_kinds", None)
        if kinds is not None:
            ref = pattern(kinds[layer], T) & np.tril(np.ones((T, T), dtype=bool))
            missing = ref & ~allowed
            if missing.any():
                i, j = np.argwhere(missing)[0]
                raise ValueError(
                    f"layer {layer} ({kinds[layer]}): this run masks pair ({i}, {j}), which the "
                    "layer attends to as trained; a run is measured on its layer's trained "
                    "pairs, so its mask may only add pairs (bidirectional, ring), never remove"
                )
            allowed = ref
        if sub is not None:
            sub = sub & allowed  # a sliding window may forbid sampled pairs: measure what exists
        return measured_mask(finite, sub, "all", allowed)

    def _kind_base(self, scores: torch.Tensor, layer: int) -> np.ndarray:
        """The measured pairs of a layer of known kind (cached per kind and T), after checking
        that the batch's first map hides none of the layer's trained pairs (the other maps'
        measured pairs are checked by their sums, :func:`tile_sums`)."""
        T = scores.shape[-1]
        kind = self._kinds[layer]
        key = (kind, T)
        if key not in self._kind_bases:
            ref = pattern(kind, T) & np.tril(np.ones((T, T), dtype=bool))
            # the pairs of a run in which every trained pair is finite
            self._kind_bases[key] = (self._base_mask(ref, layer), torch.as_tensor(ref))
        base, ref = self._kind_bases[key]
        if bool((ref.to(scores.device) & ~torch.isfinite(scores[0, 0])).any()):
            self._base_mask(torch.isfinite(scores[:1, :1]), layer)  # raises, naming the pair
        return base

    @torch.no_grad()
    def update(self, layer: int, scores: torch.Tensor, seq_ids: np.ndarray) -> None:
        """Add one layer of one batch: ``scores`` (batch, head, query, key) float32, NaN where masked."""
        if scores.ndim != 4 or scores.shape[-1] != scores.shape[-2] or scores.shape[-1] < 2:
            raise ValueError(
                f"scores must be (batch, head, T, T), T ≥ 2, got {tuple(scores.shape)}"
            )
        seq_ids = np.asarray(seq_ids).astype(np.int64)
        if seq_ids.shape != (scores.shape[0],):
            raise ValueError(
                f"seq_ids must have one id per batch row ({scores.shape[0]}), got {seq_ids.shape}"
            )
        shape = (scores.shape[1], scores.shape[-1])
        if self._shape is None:
            self._shape = shape
        elif shape != self._shape:
            raise ValueError(
                f"scores changed (heads, T) from {self._shape} to {shape} within one reducer"
            )
        layer = int(layer)
        seen = self._seen.setdefault(layer, set())
        ids = seq_ids.tolist()
        if len(set(ids)) != len(ids) or not seen.isdisjoint(ids):
            dup = [s for k, s in enumerate(ids) if s in seen or s in ids[:k]]
            raise ValueError(f"sequence ids {dup[:5]} already added for layer {layer}")
        if getattr(self, "_kinds", None) is not None:  # its kind decides, not each map
            base = self._kind_base(scores, layer)
        else:
            base = self._base_mask(torch.isfinite(scores), layer)
        seen.update(ids)
        self._rows.setdefault(layer, [])
        self._add(layer, scores, seq_ids, base)

    def _add(self, layer: int, scores: torch.Tensor, seq_ids: np.ndarray, base: np.ndarray) -> None:
        key, device = base.tobytes(), str(scores.device)  # designs and kits built once
        if key not in self._plans:
            self._plans[key] = (plan_windows(base, self.windows, self.fits), {})
        plan, kits = self._plans[key]
        if device not in kits:
            kits[device] = pair_kit(base, plan.bounds, scores.device)
        kit = kits[device]
        if layer in self._meta and not np.array_equal(self._meta[layer][1], plan.n_pairs):
            raise ValueError(
                f"layer {layer}: the measured pair set changed between batches "
                f"({self._meta[layer][1].tolist()} vs {plan.n_pairs.tolist()} pairs per window)"
            )
        self._meta[layer] = (plan.floors, plan.n_pairs)
        b, h, T = scores.shape[0], scores.shape[1], scores.shape[-1]
        flat = scores.reshape(b * h, T, T)
        known = cached_log_z(scores)  # the sink reducer's, where it ran first
        lz = torch.empty((b * h, T), dtype=torch.float64, device=scores.device)
        if self.mean_maps and layer not in self._map_sum:
            self._map_sum[layer] = torch.zeros((h, T, T), dtype=torch.float64, device=lz.device)
            self._lz_sum[layer] = torch.zeros((h, T), dtype=torch.float64, device=lz.device)
        parts, us = [], []
        for sl in map_tiles(b * h, T * T, scores.device):  # bounded float64 temporaries
            x = flat[sl].to(torch.float64, copy=True)
            lz[sl] = row_log_z(flat[sl], x) if known is None else known.reshape(b * h, T)[sl]
            if self.mean_maps:  # Σ a = Σ s − Σ log Z on the finite cells (NaN where s is)
                for k in range(sl.start, sl.stop):
                    self._map_sum[layer][k % h].add_(x[k - sl.start])
            got = tile_sums(x, lz[sl], kit)
            if got is None:  # a measured pair is not finite in some map: name it
                self._base_mask(torch.isfinite(scores), layer)
                raise ValueError(f"layer {layer}: a measured pair is not finite in this batch")
            parts.append(got[0])
            us.append(got[1])
        lz = lz.reshape(b, h, T)
        shared_log_z(scores, lz)
        sums = {k: torch.cat([p[k] for p in parts], dim=1 if k != "rows" else 0) for k in parts[0]}
        out = window_leakage(
            sums,
            torch.cat(us).reshape(b, h, T),
            kit,
            plan,
            len(self.fits),
            [self.windows.index(w) for w in self.expected_windows],
        )
        self._rows[layer].append((seq_ids, {k: v.cpu().numpy() for k, v in out.items()}))
        if self.mean_maps:
            self._lz_sum[layer] += lz.sum(dim=0)
            self._count[layer] = self._count.get(layer, 0) + len(seq_ids)

    def result(self) -> xr.Dataset:
        """This shard's contribution (see the class docstring for the variables)."""
        if not self._rows or self._shape is None:
            raise ValueError(
                "LeakageReducer.result(): no scores were added (update was never called)"
            )
        layers = sorted(self._rows)
        ids = {lay: np.concatenate([i for i, _ in self._rows[lay]]) for lay in layers}
        order = {lay: np.argsort(ids[lay], kind="stable") for lay in layers}
        seqs = ids[layers[0]][order[layers[0]]]
        for lay in layers:
            if not np.array_equal(ids[lay][order[lay]], seqs):
                raise ValueError(
                    f"layer {lay} has a different set of sequences than layer {layers[0]}; "
                    "every sequence must be added for every layer"
                )
        n_heads, T = self._shape
        data = {}
        for k in self._PER_SEQ:
            per_layer = [np.concatenate([p[k] for _, p in self._rows[l]])[order[l]] for l in layers]
            arr = np.stack(per_layer, axis=1)  # (sequence, layer, ...)
            dims = ("sequence", "layer", "head") + _DIMS.get(k, _DIMS["leak_delta"])
            if k in merging.EXPECTED_STATS:
                arr = arr.astype(np.float32)  # centred sums; the estimator works in float64
            data[k] = (dims, arr)
        floors, n_pairs = zip(*(self._meta[l] for l in layers), strict=True)
        data["leak_floor"] = (("layer", "leak_window", "leak_fit"), np.stack(floors))
        data["leak_n_pairs"] = (("layer", "leak_window"), np.stack(n_pairs))
        if self.mean_maps:  # logattn's sum is Σ s − Σ log Z: storeview.map_sum rebuilds it
            # copied layer by layer: the device never holds a second copy of the sums
            logits = np.empty((len(layers), n_heads, T, T))
            for k, l in enumerate(layers):
                logits[k] = self._map_sum[l].cpu().numpy()
            data["leak_map_sum"] = (("layer", "head", "query", "key"), logits)
            data["leak_logz_sum"] = (
                ("layer", "head", "query"),
                torch.stack([self._lz_sum[l] for l in layers]).cpu().numpy(),
            )
            counts = {self._count[l] for l in layers}
            if len(counts) != 1:
                raise ValueError(
                    f"layers were summed over different numbers of sequences: {sorted(counts)}"
                )
            data["leak_map_count"] = ((), np.int64(counts.pop()))
        ds = xr.Dataset(
            data,
            coords={
                "sequence": np.asarray(seqs, dtype=np.int64),
                "layer": np.asarray(layers),
                "head": np.arange(n_heads),
                "leak_window": list(self.windows),
                "leak_fit": list(self.fits),
                "leak_target": list(TARGETS),
                "leak_term": list(SPLIT_TERMS),
                "query": np.arange(T),
                "key": np.arange(T),
                "leak_offset": np.arange(T),
                **({"leak_exp_window": list(self.expected_windows)} if self.expected_stats else {}),
            },
            attrs={
                "leak_fits": list(self.fits),
                "leak_windows": list(self.windows),
                "leak_pair_subsample": -1
                if self.pair_subsample is None
                else int(self.pair_subsample),
                "leak_seed": int(self.seed),
                "leak_expected_windows": list(self.expected_windows),
                "leak_note": "pairs 0<=j<=i<T, row 0 excluded; logattn = s - logsumexp over the "
                "model's own allowed keys (float64); leak_null = exact within-offset "
                "permutation mean of delta",
            },
        )
        # Also on a variable: stage-level merges may drop dataset attributes.
        ds["leak_delta"].attrs.update({k: v for k, v in ds.attrs.items() if k != "leak_note"})
        return ds

    @classmethod
    def merge(cls, parts: Sequence[xr.Dataset]) -> xr.Dataset:
        """Exact merge of shard results: :func:`causalpos.capture.merging.merge_leakage`."""
        return merging.merge_leakage(parts)


class SinkReducer:
    """Per-sequence mean attention to key 0 over queries i ≥ 1; capture's Reducer protocol.

    Attention is the softmax over the keys the model's mask allows (finite scores), in float64
    (:func:`causalpos.paper2.extraction.mapsums.key0_attention`, log Z shared with the
    :class:`LeakageReducer`); a key 0 outside a sliding window gets attention 0.

    Result: ``sink_attention`` (sequence, layer, head) float64.
    """

    name = "sink"

    def __init__(self) -> None:
        self._rows: dict[int, dict[int, np.ndarray]] = {}

    @torch.no_grad()
    def update(self, layer: int, scores: torch.Tensor, seq_ids: np.ndarray) -> None:
        """Add ``scores`` (batch, head, query, key) float32 pre-softmax logits, NaN where masked."""
        if scores.ndim != 4 or scores.shape[-1] < 2:
            raise ValueError(f"scores must be (batch, head, T>=2, T), got {tuple(scores.shape)}")
        # each row's log Z, shared with the leakage reducer fed the same scores
        att = key0_attention(scores, shared_log_z(scores)).cpu().numpy()  # (batch, head)
        seen = self._rows.setdefault(int(layer), {})
        for b, sid in enumerate(np.asarray(seq_ids).astype(np.int64)):
            if int(sid) in seen:
                raise ValueError(f"sequence id {int(sid)} already added for layer {layer}")
            seen[int(sid)] = att[b]

    def result(self) -> xr.Dataset:
        if not self._rows:
            raise ValueError("SinkReducer.result(): no scores were added")
        layers = sorted(self._rows)
        seqs = sorted(self._rows[layers[0]])
        if any(sorted(self._rows[l]) != seqs for l in layers):
            raise ValueError("SinkReducer: every sequence must be added for every layer")
        arr = np.stack([np.stack([self._rows[l][s] for l in layers]) for s in seqs])
        return xr.Dataset(
            {"sink_attention": (("sequence", "layer", "head"), arr)},
            coords={
                "sequence": np.asarray(seqs, dtype=np.int64),
                "layer": np.asarray(layers),
                "head": np.arange(arr.shape[-1]),
            },
        )

    @classmethod
    def merge(cls, parts: Sequence[xr.Dataset]) -> xr.Dataset:
        """Exact merge of shard results: :func:`causalpos.capture.merging.merge_sink`."""
        return merging.merge_sink(parts)
