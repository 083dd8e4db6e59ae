"""One shared cache of the headline estimator's Grams for every run of a :class:`PromptSet`.

Every block of the headline summary (:mod:`causalpos.paper2.headline`) reads the same per-prompt
statistics through the same designs: a run's store is loaded once, each layer's pair mask and
:class:`~causalpos.paper2.expected.PromptStats` are built once per (run, window, target), each
design once per (mask, fit, landmark), each Gram once per (run, window, target, fit, landmark),
and each estimate once per Gram and resampling.
"""

from __future__ import annotations

import numpy as np
import xarray as xr

from causalpos.paper2 import expected as X
from causalpos.paper2.design import Design, build_design, parse_fit
from causalpos.paper2.prompts import PromptSet

#: The store variables the headline reads.
NEEDED = ("leak_offsum", "leak_key0sum", "leak_rowsum", "leak_map_sum", "leak_sst", "leak_delta")
FIT = "saturated+query"


class GramCache:
    """Lazily computed, memoised statistics, Grams and estimates of the runs of ``ps``."""

    def __init__(self, ps: PromptSet, *, n_flips: int = 2000, seed: int = 0):
        self.ps = ps
        self.n_flips = n_flips
        self.seed = seed
        self._data: dict[str, xr.Dataset] = {}
        self._masks: dict[tuple, dict] = {}
        self._stats: dict[tuple, X.PromptStats] = {}
        self._designs: dict[tuple, Design] = {}
        self._grams: dict[tuple, dict[str, np.ndarray]] = {}
        self._est: dict[tuple, dict[str, np.ndarray]] = {}
        self._weights = None

    @property
    def n(self) -> int:
        return int(self.ps.sequences.size)

    def weights(self) -> np.ndarray:
        """(1 + B, n): all-ones (the estimate) then the summary's resampling weights."""
        if self._weights is None:
            self._weights = np.concatenate(
                [np.ones((1, self.n)), np.asarray(self.ps.counts, dtype=np.float64)]
            )
        return self._weights

    def data(self, run: str) -> xr.Dataset:
        if run not in self._data:
            self._data[run] = self.ps.runs[run][list(NEEDED)].load()
        return self._data[run]

    def masks(self, run: str, window: str, target: str) -> dict:
        key = (run, window, target)
        if key not in self._masks:
            self._masks[key] = X.store_masks(self.data(run), window, target)
        return self._masks[key]

    def stats(self, run: str, window: str, target: str, layer) -> X.PromptStats:
        key = (run, window, target, layer)
        if key not in self._stats:
            mask = self.masks(run, window, target)[layer]
            self._stats[key] = X.store_stats(self.data(run), layer, window, target, mask)
        return self._stats[key]

    def design(self, mask: np.ndarray, fit: str, landmark: bool) -> Design:
        key = (np.packbits(mask).tobytes(), mask.shape, fit, landmark)
        if key not in self._designs:
            self._designs[key] = build_design(mask, fit, landmark=landmark)
        return self._designs[key]

    def grams(
        self, run: str, window: str, target: str, *, fit: str = FIT, landmark: bool = True
    ) -> dict[str, np.ndarray]:
        """:func:`causalpos.paper2.expected.prompt_grams` of every layer, leading (layer, head)."""
        key = (run, window, target, fit, landmark)
        if key not in self._grams:
            parse_fit(fit)
            per_layer = []
            for layer, mask in self.masks(run, window, target).items():
                st = self.stats(run, window, target, layer)
                per_layer.append(X.prompt_grams(st, self.design(mask, fit, landmark)))
            self._grams[key] = {k: np.stack([g[k] for g in per_layer]) for k in per_layer[0]}
        return self._grams[key]

    def logz_gram(self, run: str, window: str, *, landmark: bool = True) -> np.ndarray:
        """Numerator Gram (layer, head, n, n) of the run's −log Z_i (log-attention − logits)."""
        from causalpos.paper2.decomposition import difference_stats, numerator_gram

        key = (run, window, "logz", FIT, landmark)
        if key not in self._grams:
            per_layer = []
            for layer, mask in self.masks(run, window, "logattn").items():
                st = difference_stats(
                    self.stats(run, window, "logattn", layer),
                    self.stats(run, window, "logit", layer),
                )
                per_layer.append(numerator_gram(st, self.design(mask, FIT, landmark)))
            self._grams[key] = {"num": np.stack(per_layer)}
        return self._grams[key]["num"]

    def estimate(
        self,
        run: str,
        window: str,
        target: str,
        *,
        fit: str = FIT,
        landmark: bool = True,
        flips: bool = True,
    ) -> dict[str, np.ndarray]:
        """:func:`causalpos.paper2.expected.estimate` on the summary's resampling (memoised)."""
        key = (run, window, target, fit, landmark, flips)
        if key not in self._est:
            g = self.grams(run, window, target, fit=fit, landmark=landmark)
            self._est[key] = X.estimate(
                g,
                counts=self.ps.counts,
                level=self.ps.level,
                n_flips=self.n_flips if flips else 0,
                seed=self.seed,
            )
        return self._est[key]

    def numerator(self, gram: np.ndarray) -> np.ndarray:
        """N*(m) (1 + B, layer, head) of a numerator Gram under :meth:`weights`."""
        return X._offdiag(gram, self.weights())

    def denominator(self, run: str, window: str, target: str, *, landmark: bool = True):
        """D*(m) (1 + B, layer, head) of the run's map under :meth:`weights`."""
        g = self.grams(run, window, target, landmark=landmark)
        return X.u_statistics(g, self.weights())["den"]

    def mean_map(self, run: str, target: str, layer) -> tuple[np.ndarray, np.ndarray]:
        """The run's expected map (head, T, T) of one layer and the keys its softmax allowed
        ((T, T) bool: finite in every head's summed map)."""
        ds = self.data(run)
        msum = ds["leak_map_sum"].sel(leak_target=target, layer=layer).values.astype(np.float64)
        allowed = np.isfinite(msum).all(0)
        return msum / self.n, allowed
