"""One shared cache of the headline estimator's Grams for every run of a :class:`PromptSet`.

Every block of the headline summary reads the same statistics through the same designs: a run's
store is loaded once, each layer's pair mask built once per (run, window, target), each design
once per (mask, fit, landmark), each Gram and estimate once per (run, window, target, fit,
landmark).
"""

from __future__ import annotations

import numpy as np
import xarray as xr

from causalpos.paper2 import inference as inf
from causalpos.paper2.estimator import expected as X
from causalpos.paper2.estimator.pairgrams import (
    PromptStats,
    difference_stats,
    numerator_grams,
    prompt_grams,
)
from causalpos.paper2.estimator.replicates import linear_parts, u_replicates
from causalpos.paper2.estimator.storeview import AXES, map_sum, store_masks, store_stats
from causalpos.paper2.extraction.design import Design, build_design, parse_fit
from causalpos.paper2.prompts import PromptSet

#: The store variables the headline reads: the view's and ``leak_delta`` (the pair subsample).
NEEDED = (*AXES, "leak_delta")
FIT = "saturated+query"
#: The per-prompt statistics (prompt axis first) a group of layers stacks after the prompts'.
_STAT_FIELDS = ("off", "rows", "key0", "sst")


class GramCache:
    """Lazily computed, memoised statistics, Grams and estimates of the runs of ``ps``."""

    def __init__(self, ps: PromptSet):
        self.ps = ps
        self._data: dict[str, xr.Dataset] = {}
        self._masks: dict[tuple, dict] = {}
        self._designs: dict[tuple, Design] = {}
        self._grams: dict[tuple, dict[str, np.ndarray]] = {}
        self._est: dict[tuple, dict[str, np.ndarray]] = {}
        self._parts: dict[tuple, dict[str, np.ndarray]] = {}
        self._sst_sum: dict[tuple, np.ndarray] = {}  # (run, window, target, layer) -> (head,)

    @property
    def n(self) -> int:
        return int(self.ps.sequences.size)

    def data(self, run: str) -> xr.Dataset:
        if run not in self._data:
            self._data[run] = self.ps.runs[run][list(NEEDED)].load()
        return self._data[run]

    def masks(self, run: str, window: str, target: str) -> dict:
        key = (run, window, target)
        if key not in self._masks:
            self._masks[key] = store_masks(self.data(run), window, target)
        return self._masks[key]

    def stats(self, run: str, window: str, target: str, layer) -> PromptStats:
        """The layer's per-prompt statistics, computed again at each call: only the Grams built
        from them are kept (holding them grew the summary's memory as n: 1.9 GB of its 5.6 GB
        peak at 64 prompts of SmolLM2's 9 runs). Their ``sst_sum`` (a number a head) is kept: it
        is a pass over the summed maps, most of a call's cost."""
        mask = self.masks(run, window, target)[layer]
        key = (run, window, target, layer)
        st = store_stats(self.data(run), layer, window, target, mask, self._sst_sum.get(key))
        self._sst_sum.setdefault(key, st.sst_sum)
        return st

    def design(self, mask: np.ndarray, fit: str, landmark: bool) -> Design:
        key = (np.packbits(mask).tobytes(), mask.shape, fit, landmark)
        if key not in self._designs:
            self._designs[key] = build_design(mask, fit, landmark=landmark)
        return self._designs[key]

    def grams(
        self, run: str, window: str, target: str, *, fit: str = FIT, landmark: bool = True
    ) -> dict[str, np.ndarray]:
        """:func:`~causalpos.paper2.estimator.pairgrams.prompt_grams` of every layer, leading
        (layer, head)."""
        key = (run, window, target, fit, landmark)
        if key not in self._grams:
            parse_fit(fit)
            self._grams[key] = self._by_layer_groups(
                run,
                window,
                target,
                lambda layer: self.stats(run, window, target, layer),
                lambda st, mask: prompt_grams(st, self.design(mask, fit, landmark)),
            )
        return self._grams[key]

    def difference_gram(
        self, a: tuple[str, str], b: tuple[str, str], window: str, *, landmark: bool = True
    ) -> np.ndarray:
        """Numerator Gram (layer, head, n, n) of the per-prompt difference map a − b, each a
        (run, target) of the same prompts on the same pairs (their linear statistics subtracted,
        :func:`~causalpos.paper2.estimator.pairgrams.difference_stats`): e.g. the causal run's
        −log Z, or its logits minus the ring run's (``d_logit``)."""
        key = ("difference", a, b, window, landmark)
        if key not in self._grams:
            # a difference of maps on different pairs would mix pair sets in its sums
            ma, mb = self.masks(a[0], window, a[1]), self.masks(b[0], window, b[1])
            for layer, mask in ma.items():
                if layer not in mb or not np.array_equal(mask, mb[layer]):
                    raise ValueError(
                        f"the difference map {a[0]}:{a[1]} - {b[0]}:{b[1]} needs both maps on the "
                        f"same pairs, but layer {layer} of window {window!r} differs: measure both "
                        "runs on the layer's trained pairs (the leakage reducer's layer kinds)"
                    )
            self._grams[key] = self._by_layer_groups(
                a[0],
                window,
                a[1],
                lambda layer: difference_stats(
                    self.stats(a[0], window, a[1], layer), self.stats(b[0], window, b[1], layer)
                ),
                lambda st, mask: {"num": numerator_grams(st, self.design(mask, FIT, landmark))},
            )
        return self._grams[key]["num"]

    def _by_layer_groups(self, run, window, target, stats_of, grams_of) -> dict[str, np.ndarray]:
        """``grams_of(stats, mask)`` of every layer, leading (layer, head): one call per group of
        layers that share their measured pairs (one design), on their statistics stacked along
        a layer axis after the prompts' (every map's Gram is its own: the batch changes no
        term)."""
        masks = self.masks(run, window, target)
        layers = list(masks)
        groups: dict[bytes, list[int]] = {}
        for i, layer in enumerate(layers):
            groups.setdefault(np.packbits(masks[layer]).tobytes(), []).append(i)
        out: dict[str, np.ndarray] = {}
        for idx in groups.values():
            sts = [stats_of(layers[i]) for i in idx]
            st = PromptStats(
                **{f: np.stack([getattr(x, f) for x in sts], axis=1) for f in _STAT_FIELDS},
                sst_sum=np.stack([x.sst_sum for x in sts]),
            )
            g = grams_of(st, masks[layers[idx[0]]])
            for k, v in g.items():
                if k not in out:
                    out[k] = np.empty((len(layers),) + v.shape[1:], dtype=v.dtype)
                out[k][idx] = v
        return out

    def estimate(
        self, run: str, window: str, target: str, *, fit: str = FIT, landmark: bool = True
    ) -> dict[str, np.ndarray]:
        """:func:`causalpos.paper2.estimator.expected.estimate` on the summary's multipliers,
        ``lean`` (memoised); the numerator's per-layer linear parts go to :meth:`parts`. Only the
        headline reading (``fit`` :data:`FIT`, ``landmark``) is read per head: the others (the
        key-0 column counted, the linear baseline) per layer and pooled only (``heads=False``)."""
        key = (run, window, target, fit, landmark)
        if key not in self._est:
            g = self.grams(run, window, target, fit=fit, landmark=landmark)
            heads = fit == FIT and landmark
            r = X.estimate(g, self.ps.multipliers, level=self.ps.level, lean=True, heads=heads)
            self._parts.setdefault(key, r.pop("num_parts_layer"))
            self._est[key] = r
        return self._est[key]

    def parts(
        self, run: str, window: str, target: str, *, fit: str = FIT, landmark: bool = True
    ) -> dict[str, np.ndarray]:
        """:func:`~causalpos.paper2.estimator.replicates.linear_parts` (B, layer) of the run's
        numerator Gram summed over heads, under the multipliers: the estimate's where it ran, else
        from the layers' Grams (memoised). A combination or sum of Grams takes the same of their
        parts."""
        key = (run, window, target, fit, landmark)
        return self._parts_of(key, lambda: self.grams(*key[:3], fit=fit, landmark=landmark)["num"])

    def difference_parts(
        self, a: tuple[str, str], b: tuple[str, str], window: str, landmark: bool = True
    ) -> dict[str, np.ndarray]:
        """:meth:`parts` of :meth:`difference_gram`."""
        key = ("difference", a, b, window, landmark)
        return self._parts_of(key, lambda: self.difference_gram(a, b, window, landmark=landmark))

    def _parts_of(self, key: tuple, num) -> dict[str, np.ndarray]:
        """The memoised linear parts of the Gram ``num()`` (layer, head, n, n) summed over heads."""
        if key not in self._parts:
            self._parts[key] = linear_parts(num().sum(1), self.ps.multipliers)
        return self._parts[key]

    def numerator(
        self, gram: np.ndarray, *, contrast: bool = False, parts: dict | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """(N̂, replicates (B, ...)) per prompt pair of a numerator Gram (..., n, n) (e.g. a
        component's combination of Grams): the calibrated interval's reflected replicates.
        ``contrast``: a difference of positive semi-definite Grams (N̂ of either sign), whose
        variance does not follow the calibrated model V(N) = V2 + αN (N ≥ 0): its replicates are
        N* − N̂ with the unbiased linear variance, reflected (the basic interval). ``parts``: the
        Gram's linear parts under the multipliers, where known (the same combination of
        :meth:`parts`)."""
        pairs = self.n * (self.n - 1)
        if contrast:
            u = u_replicates(gram, self.ps.multipliers, parts)
            return u["est"] / pairs, inf.reflect(u["est"], u["est"] + u["delta"]) / pairs
        r = inf.calibrated(gram, self.ps.multipliers, self.ps.level, parts)
        return r["est"] / pairs, r["boot"] / pairs

    def denominator(
        self, run: str, window: str, target: str, level: str, *, landmark: bool = True
    ) -> tuple[np.ndarray, np.ndarray]:
        """(D̂, replicates) per prompt pair of the run's map at ``level`` (pooled, layer, head)."""
        r = self.estimate(run, window, target, landmark=landmark)
        return r[f"{level}_den"], r[f"{level}_den_boot"]

    def mean_map(self, run: str, target: str, layer) -> tuple[np.ndarray, np.ndarray]:
        """The run's expected map (head, T, T) of one layer and the keys its softmax allowed
        ((T, T) bool: finite in every head's summed map)."""
        msum = map_sum(self.data(run), layer, target)
        return msum / self.n, np.isfinite(msum).all(0)
