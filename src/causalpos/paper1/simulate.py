"""Parameter-free decoder simulation of paper 1 §4.1 and §5.1 (Figs. 2, 4, 6, 7, 9, 10).

One layer, applied ``n_layers`` times in sequence (no parameters, no FFN, one head):

    Y = Norm(X);  Q = K = RoPE(Y) or Y;  S = scale · Q Kᵀ;  P = softmax(mask(S));  X ← P Y + X

- ``norm="l2"``: Y = X/‖X‖ (Eq. 1); ``norm="layernorm"``: Y = LayerNorm(X) without affine
  (eps 1e-5, the torch default), so ‖Y‖ ≈ √d; values are Y either way, the residual adds X.
- ``scaling``: ``"none"`` (scale 1), ``"sqrt_d"`` (1/√d), ``"d"`` (1/d).
- ``rope``: Q = K = RoPE(Y) with each token rotated by its own position 0 … n − 1 (HF rotate-half,
  :mod:`causalpos.paper1.rope`); the values stay un-rotated Y.
- ``causal=False`` drops the mask (an encoder); ``residual=False`` gives X ← P Y (App. A.2).

Inputs (§2): per position z_i ~ N(0, I_d) and one shared c ~ N(0, I_d) per sequence,
x_i = m·z_i + ℓ·c, L2-normalized; α = 0: ℓ = 0, m = 1; α = 1: ℓ = 1, m = 0; otherwise
ℓ = √(α/(1 − α)), m = 1 (E⟨x_i, x_j⟩ → α as d → ∞, slightly below at d = 64).

Output: the batch mean of the pre-softmax logits S (after RoPE and scaling) of every layer,
NaN above the diagonal when causal, plus per-group means for Monte-Carlo error bars.

Reproducibility. Block b of :data:`RNG_BLOCK` sequences has its own generator seeded from
(seed, b), c first, then z, so a sequence's inputs depend only on (seed, its index). Each block's
(or block-and-group segment's) logits are summed in float32 (a float64 cast of every logit cost a
third of the run) and those sums added in float64 in block order: the result is **bit-identical for
any chunk_size, pass size (:data:`SUB_BATCH`) and number of worker threads** on a CPU (tested).
c and z are the same for every α and variant at a seed (common random numbers).
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager

import numpy as np
import torch
import xarray as xr

from causalpos.paper1 import rope as rope_mod
from causalpos.paper1.diagonal import normalize
from causalpos.paper1.settings import SimulationSettings

#: Sequences per RNG block: the unit of input generation and of the float64 partial sums.
RNG_BLOCK = 256


#: Default chunk: sequences processed per batched step (a multiple of RNG_BLOCK); larger chunks
#: are slower on 2 cores. Inside a chunk the layers run on passes of SUB_BATCH sequences.
DEFAULT_CHUNK = 256


#: Sequences per pass of a layer's operations inside a chunk: the arithmetic is the same in any
#: pass, only cache use changes (at (n, d) = (50, 64), 32 cut the kernel's CPU by 5-12 % against
#: whole 256-sequence chunks, 16-64 alike).
SUB_BATCH = 32


LAYERNORM_EPS = 1e-5


def input_mix(alpha: float) -> tuple[float, float]:
    """(m, ℓ): weights of the per-position noise z_i and the shared c for a given α (§2)."""
    alpha = float(alpha)
    if not 0.0 <= alpha <= 1.0:
        raise ValueError(f"alpha must lie in [0, 1]; got {alpha}")
    if alpha == 0.0:
        return 1.0, 0.0
    if alpha == 1.0:
        return 0.0, 1.0
    return 1.0, math.sqrt(alpha / (1.0 - alpha))


def make_inputs(
    *, alpha: float, seq_len: int, dim: int, seed: int, start: int, stop: int
) -> torch.Tensor:
    """Unit input vectors of sequences ``start`` … ``stop − 1``, float32, shape (sequence, position, dim).

    Exactly the inputs :func:`run_simulation` uses for those sequence indices at this seed.
    """
    if not 0 <= start <= stop:
        raise ValueError(f"need 0 <= start <= stop; got start={start}, stop={stop}")
    m, ell = input_mix(alpha)
    parts = []
    for block in range(start // RNG_BLOCK, -(-stop // RNG_BLOCK)):
        # SeedSequence decorrelates neighbouring (seed, block) pairs; torch takes a 64-bit seed.
        state = np.random.SeedSequence([int(seed), int(block)]).generate_state(2, np.uint32)
        gen = torch.Generator().manual_seed(int(state[0]) << 32 | int(state[1]))
        c = torch.randn(RNG_BLOCK, 1, dim, generator=gen)
        if m == 0.0:
            x = c.expand(RNG_BLOCK, seq_len, dim).clone()
        else:
            x = torch.randn(RNG_BLOCK, seq_len, dim, generator=gen)
            if ell != 0.0:
                x.add_(c, alpha=ell)
        lo = max(start - block * RNG_BLOCK, 0)
        hi = min(stop - block * RNG_BLOCK, RNG_BLOCK)
        parts.append(x[lo:hi])
    x = parts[0] if len(parts) == 1 else torch.cat(parts) if parts else torch.empty(0, seq_len, dim)
    return x.mul_(torch.rsqrt((x * x).sum(-1, keepdim=True)))  # x is this call's own tensor


@contextmanager
def _threads(n: int | None) -> Iterator[None]:
    if n is None:
        yield
        return
    old = torch.get_num_threads()
    torch.set_num_threads(int(n))
    try:
        yield
    finally:
        torch.set_num_threads(old)


def run_simulation(
    settings: SimulationSettings,
    *,
    chunk_size: int | None = None,
    num_threads: int | None = None,
    progress: bool = False,
) -> xr.Dataset:
    """Monte-Carlo mean pre-softmax logits of the parameter-free decoder (module doc) under
    ``settings`` (:class:`~causalpos.paper1.settings.SimulationSettings`).

    Returns ``score`` (layer, query, key) float32 (layer 0 is the paper's layer 1; NaN above the
    diagonal when ``causal``), ``score_normalized`` (its diagonal normalization), ``score_group``
    (group, layer, query, key) float32 (means over ``n_groups`` disjoint contiguous groups) and
    ``group_size`` (group,) int64. Neither ``chunk_size`` (sequences per batched step, rounded up
    to a multiple of :data:`RNG_BLOCK`) nor ``num_threads`` (workers, each torch single-threaded)
    changes the result.
    """
    settings.check()
    for name, v in (("chunk_size", chunk_size), ("num_threads", num_threads)):
        if v is not None and (not isinstance(v, (int, np.integer)) or v < 1):
            raise ValueError(f"simulate: {name} must be a positive integer or None; got {v!r}")
    chunk = DEFAULT_CHUNK if chunk_size is None else int(chunk_size)
    chunk = -(-chunk // RNG_BLOCK) * RNG_BLOCK
    workers = int(num_threads) if num_threads is not None else max(1, torch.get_num_threads())
    # group g holds sequences [starts[g], starts[g+1]): contiguous, sizes differing by at most 1
    g = np.arange(settings.n_groups + 1, dtype=np.int64)
    starts = -(-g * settings.n_samples // settings.n_groups)
    sums = _sums(settings, starts, chunk, workers, progress)
    return _dataset(settings, sums, starts)


def _sums(
    settings: SimulationSettings, starts: np.ndarray, chunk: int, workers: int, progress: bool
) -> np.ndarray:
    """The float64 logit sums (group, layer, query, key) of every chunk, added in chunk order."""
    n, L, n_samples = int(settings.seq_len), int(settings.n_layers), settings.n_samples
    sums = np.zeros((settings.n_groups, L, n, n), dtype=np.float64)
    kernel = _ChunkKernel(settings, starts)
    bounds = [(c0, min(c0 + chunk, n_samples)) for c0 in range(0, n_samples, chunk)]
    # Parallelism across chunks, one intra-op thread each: with other processes on the cores,
    # OpenMP barriers inside every small op stall (4-7x slower than 1 thread with one core busy).
    # Partial sums are added in chunk order, so the result does not depend on the workers.
    with _threads(1), torch.inference_mode(), ThreadPoolExecutor(max_workers=workers) as pool:
        results = pool.map(kernel, bounds) if workers > 1 else map(kernel, bounds)
        if progress:
            from causalpos.io.progress import progress_bar

            results = progress_bar(results, total=len(bounds), desc="simulate", unit="chunk")
        for parts in results:
            for g, part in parts:
                sums[g] += part
    return sums


def _dataset(settings: SimulationSettings, sums: np.ndarray, starts: np.ndarray) -> xr.Dataset:
    """:func:`run_simulation`'s dataset from the sums (group, layer, query, key)."""
    s = settings
    n, d, L = int(s.seq_len), int(s.dim), int(s.n_layers)
    sizes = np.diff(starts)
    with np.errstate(invalid="ignore"):
        group_mean = sums / sizes[:, None, None, None]
        mean = sums.sum(axis=0) / s.n_samples
    if s.causal:
        upper = np.triu(np.ones((n, n), dtype=bool), k=1)
        group_mean[..., upper] = np.nan
        mean[..., upper] = np.nan
    mean32 = mean.astype(np.float32)
    coords = {
        "layer": np.arange(L),
        "query": np.arange(n),
        "key": np.arange(n),
        "group": np.arange(s.n_groups),
    }
    ds = xr.Dataset(
        {
            "score": (
                ("layer", "query", "key"),
                mean32,
                {
                    "long_name": "mean pre-softmax logit",
                    "masked": "NaN above the diagonal" if s.causal else "none",
                },
            ),
            "score_normalized": (
                ("layer", "query", "key"),
                normalize(mean32),
                {"long_name": "diagonal-normalized mean logit (paper 1 §5)"},
            ),
            "score_group": (
                ("group", "layer", "query", "key"),
                group_mean.astype(np.float32),
                {"long_name": "mean logit per disjoint group of sequences"},
            ),
            "group_size": (("group",), sizes.astype(np.int64)),
        },
        coords=coords,
    )
    ds["layer"].attrs["description"] = "0-indexed; layer 0 is the paper's layer 1"
    ds.attrs = {
        "alpha": float(s.alpha),
        "norm": s.norm,
        "scaling": s.scaling,
        "rope": bool(s.rope),
        "rope_theta": float(s.rope_theta),
        "causal": bool(s.causal),
        "residual": bool(s.residual),
        "n_samples": int(s.n_samples),
        "seq_len": n,
        "dim": d,
        "n_layers": L,
        "seed": int(s.seed),
        "n_groups": int(s.n_groups),
        "rng_block": RNG_BLOCK,
        "layernorm_eps": LAYERNORM_EPS,
        "precision": "float32 compute and per-block sums (<= rng_block sequences), float64 across blocks",
    }
    return ds


class _ChunkKernel:
    """Runs the layers on one chunk of sequences; returns float64 partial sums per segment.

    A segment is the intersection of an RNG block with a group; its partial sum (layer, query, key)
    is taken over a fixed set of sequences in a fixed shape, so it is the same for any chunking.
    The layers run on passes of :data:`SUB_BATCH` sequences (one pass's tensors stay in cache);
    a layer's logits of the whole chunk are kept, so the sums do not depend on the pass size.
    """

    def __init__(self, settings: SimulationSettings, starts: np.ndarray) -> None:
        seq_len, dim = int(settings.seq_len), int(settings.dim)
        self.alpha, self.norm, self.rope = settings.alpha, settings.norm, settings.rope
        self.scale = {"none": 1.0, "sqrt_d": 1.0 / math.sqrt(dim), "d": 1.0 / dim}[settings.scaling]
        self.causal, self.residual, self.seed = settings.causal, settings.residual, settings.seed
        self.starts = starts
        self.n, self.d, self.L = seq_len, dim, int(settings.n_layers)
        self.mask = torch.full((seq_len, seq_len), float("-inf")).triu_(1) if self.causal else None
        if self.rope:
            # rotate-half tables repeat over the two halves: keep one half, (n, d/2)
            cos, sin = rope_mod.cos_sin(np.arange(seq_len), dim, settings.rope_theta)
            self.cos = torch.from_numpy(cos[:, : dim // 2]).float()
            self.sin = torch.from_numpy(sin[:, : dim // 2]).float()

    def _rope(self, y: torch.Tensor) -> torch.Tensor:
        """RoPE(y) = y·cos + rotate_half(y)·sin, written half by half (no concatenation)."""
        h = self.d // 2
        y1, y2 = y[..., :h], y[..., h:]
        q = torch.empty_like(y)
        torch.mul(y1, self.cos, out=q[..., :h]).addcmul_(y2, self.sin, value=-1.0)
        torch.mul(y2, self.cos, out=q[..., h:]).addcmul_(y1, self.sin)
        return q

    def segments(self, c0: int, c1: int) -> list[tuple[int, int, int]]:
        """(group, start, stop) of the segments covering sequences c0 … c1 − 1, in order."""
        out = []
        b0 = c0
        while b0 < c1:
            b1 = min((b0 // RNG_BLOCK + 1) * RNG_BLOCK, c1)
            g = int(np.searchsorted(self.starts, b0, side="right")) - 1
            end = min(b1, int(self.starts[g + 1]))
            out.append((g, b0, end))
            b0 = end
        return out

    def __call__(self, bounds: tuple[int, int]) -> list[tuple[int, np.ndarray]]:
        c0, c1 = bounds
        torch.set_num_threads(1)  # intra-op threads of this worker (see simulate)
        segs = self.segments(c0, c1)
        parts = [np.empty((self.L, self.n, self.n)) for _ in segs]
        x = make_inputs(
            alpha=self.alpha, seq_len=self.n, dim=self.d, seed=self.seed, start=c0, stop=c1
        )
        m = c1 - c0
        # The module doc's layer on passes of SUB_BATCH sequences; a layer's logits of the whole
        # chunk are kept in `s`, so each segment is summed in one reduction of a fixed shape.
        # Buffers are reused in place where the old value is not needed again.
        s = torch.empty(m, self.n, self.n)
        sq = torch.empty_like(x) if self.norm == "l2" else None
        with torch.inference_mode():
            for layer in range(self.L):
                if layer == self.L - 1:
                    x_next = None
                elif self.norm == "l2" and layer == 0:
                    # make_inputs already returns unit vectors: layer 1's Y is X itself, so
                    # X <- P Y (+ X) goes to a new tensor
                    x_next = torch.empty_like(x)
                else:
                    x_next = x  # the old X is not needed once Y is computed
                for i0 in range(0, m, SUB_BATCH):
                    i1 = min(i0 + SUB_BATCH, m)
                    xb = x[i0:i1]
                    self._layer(
                        layer,
                        xb,
                        s[i0:i1],
                        None if sq is None else sq[i0:i1],
                        xb if x_next is x else None if x_next is None else x_next[i0:i1],
                    )
                for part, (_, a, b) in zip(parts, segs):
                    part[layer] = s[a - c0 : b - c0].sum(0).numpy()  # float32 over <= RNG_BLOCK
                x = x_next
        return [(g, part) for (g, _, _), part in zip(segs, parts)]

    def _layer(
        self,
        layer: int,
        x: torch.Tensor,
        s: torch.Tensor,
        sq: torch.Tensor | None,
        x_next: torch.Tensor | None,
    ) -> None:
        """One layer on a pass of sequences: logits into ``s``; X <- P Y (+ X) into ``x_next``
        (``x`` itself or a separate tensor; None: the last layer, logits only)."""
        if self.norm == "l2":
            if layer == 0:
                y = x  # unit inputs: no second normalization
            else:
                r = torch.mul(x, x, out=sq).sum(-1, keepdim=True).rsqrt_()
                y = torch.mul(x, r, out=sq)  # x * x is no longer needed: reuse its buffer
        else:
            y = torch.nn.functional.layer_norm(x, (self.d,), eps=LAYERNORM_EPS)
        q = self._rope(y) if self.rope else y
        kt = q.transpose(1, 2)
        if self.causal:
            torch.baddbmm(self.mask, q, kt, alpha=self.scale, out=s)
        else:
            torch.bmm(q, kt, out=s)
            if self.scale != 1.0:
                s.mul_(self.scale)
        if x_next is None:
            return
        p = torch.softmax(s, dim=-1)
        if not self.residual:
            torch.bmm(p, y, out=x_next)
        elif x_next is x:
            x.baddbmm_(p, y)
        else:
            torch.baddbmm(x, p, y, out=x_next)
