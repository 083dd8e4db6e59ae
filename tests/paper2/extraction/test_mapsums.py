"""The reducers' per-cell work (paper2.extraction.mapsums): log Z, the key-0 attention, the pair
kit and the tiles' sums against a direct float64 computation in numpy, cell by cell, on float32
score maps NaN where a causal or sliding-window mask hides a key; the tiles of maps, their log Z
shared between reducers."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from causalpos.paper2.extraction import mapsums as M

T = 11  # odd and prime: no tile of maps and no row block divides it
CPU = torch.device("cpu")
#: Rounding of a float64 sum against the sum of its terms' magnitudes (a few T of them): exact
#: arithmetic would give 0; a wrong cell, row or offset gives O(1).
REL = 1e-12


def _allowed(window: int | None) -> np.ndarray:
    """The keys the model's mask lets each query see: causal (j ≤ i), or a sliding window of
    ``window`` keys (i − window < j ≤ i)."""
    d = np.subtract.outer(np.arange(T), np.arange(T))
    return (d >= 0) if window is None else (d >= 0) & (d < window)


def _scores(b: int, h: int, window: int | None, seed: int) -> torch.Tensor:
    """(b, h, T, T) float32 logits of spread 3 around a row-dependent level, NaN where masked."""
    rng = np.random.default_rng(seed)
    s = rng.normal(scale=3.0, size=(b, h, T, T)) + rng.normal(size=(b, h, T, 1))
    s[..., ~_allowed(window)] = np.nan
    return torch.from_numpy(s.astype(np.float32))


def _base(kind: str) -> tuple[np.ndarray, int | None]:
    """Measured pairs (rows i ≥ 1) of ``kind``, and the model's window that hides the rest:
    every causal pair, a sliding window's pairs, or a random half of the causal pairs."""
    if kind == "sliding":
        base, window = _allowed(4), 4
    else:
        base, window = _allowed(None), None
    if kind == "subsample":
        base = base & (np.random.default_rng(5).random((T, T)) < 0.5)
    base = base.copy()
    base[0] = False
    return base, window


def _ref_log_z(s: torch.Tensor) -> np.ndarray:
    """log Σ_j exp(s_ij) over each row's finite keys, in float64 (fsum: exactly rounded sums),
    −inf for a row without one."""
    x = s.numpy().astype(np.float64)
    out = np.full(x.shape[:-1], -np.inf)
    for idx in np.ndindex(*x.shape[:-1]):
        row = x[idx][np.isfinite(x[idx])]
        if row.size:
            top = row.max()
            out[idx] = top + math.log(math.fsum(np.exp(row - top)))
    return out


def _cell_sums(y: np.ndarray, r: np.ndarray, base: np.ndarray, blocks) -> dict[str, np.ndarray]:
    """Per row block (lo, hi) and map: Σ over the measured pairs (i, j) of rows [lo, hi) of
    ``y`` (m, T, T) by key column j (``cols``) and by offset d = i − j (``off``), of y² by offset
    (``off2``), of r_i y_ij by offset (``cross``), of r_i and r_i² by offset (``r``, ``r2``);
    r (m, T) per query row. One mask of cells per sum, each cell selected once."""
    rows = np.arange(T)[:, None] * np.ones((1, T), dtype=int)
    d = rows - np.arange(T)[None, :]
    ry = r[:, :, None] * np.ones((1, 1, T))
    out = {k: np.zeros((len(blocks), y.shape[0], T)) for k in ("cols", "off", "off2")}
    out |= {k: np.zeros((len(blocks), y.shape[0], T)) for k in ("cross", "r", "r2")}
    for k, (lo, hi) in enumerate(blocks):
        in_block = base & (rows >= lo) & (rows < hi)
        for col in range(T):
            out["cols"][k, :, col] = y[:, in_block & (np.arange(T)[None, :] == col)].sum(-1)
        for off in range(T):
            cells = in_block & (d == off)
            out["off"][k, :, off] = y[:, cells].sum(-1)
            out["off2"][k, :, off] = (y[:, cells] ** 2).sum(-1)
            out["cross"][k, :, off] = (ry[:, cells] * y[:, cells]).sum(-1)
            out["r"][k, :, off] = ry[:, cells].sum(-1)
            out["r2"][k, :, off] = (ry[:, cells] ** 2).sum(-1)
    return out


def _ref_sums(s: torch.Tensor, base: np.ndarray, blocks):
    """(sums, |sums|, u, centred log-attention sums) in numpy float64, from the definitions:
    x = s − s̄ on the measured pairs (s̄ their mean), u = log Z − its mean over the pairs, a = s −
    log Z_i on the pairs centred by its own mean."""
    m = s.shape[0] * s.shape[1]
    x = s.numpy().astype(np.float64).reshape(m, T, T)
    lz = _ref_log_z(s).reshape(m, T)
    n = base.sum()
    x_bar = np.array([math.fsum(xm[base]) / n for xm in x])
    xc = np.where(base, x - x_bar[:, None, None], 0.0)
    n_i = base.sum(axis=1)
    u = lz - np.array([math.fsum(lm * n_i) / n for lm in lz])[:, None]
    a = x - lz[:, :, None]
    a_bar = np.array([math.fsum(am[base]) / n for am in a])
    ac = np.where(base, a - a_bar[:, None, None], 0.0)
    ref = _cell_sums(xc, u, base, blocks)
    ref["rows"] = xc.sum(-1)
    mag = _cell_sums(np.abs(xc), np.abs(u), base, blocks)
    mag["rows"] = np.abs(xc).sum(-1)
    att = _cell_sums(ac, u, base, blocks)
    return ref, mag, u, att


def _tiled(scores: torch.Tensor, kit: M.PairKit):
    """What the leakage reducer does with a batch: per tile of maps a float64 copy, its log Z,
    its sums; the tiles' sums concatenated on the map axis."""
    b, h = scores.shape[:2]
    flat = scores.reshape(b * h, T, T)
    lz = torch.empty((b * h, T), dtype=torch.float64)
    parts, us, tiles = [], [], []
    for sl in M.map_tiles(b * h, T * T, CPU):
        x = flat[sl].to(torch.float64, copy=True)
        lz[sl] = M.row_log_z(flat[sl], x)
        got = M.tile_sums(x, lz[sl], kit)
        assert got is not None
        parts.append(got[0])
        us.append(got[1])
        tiles.append(sl.stop - sl.start)
    sums = {k: torch.cat([p[k] for p in parts], dim=0 if k == "rows" else 1) for k in parts[0]}
    return sums, torch.cat(us), lz, tiles


def _assert_sums(got: np.ndarray, want: np.ndarray, magnitude: np.ndarray) -> None:
    """|got − want| ≤ REL × (Σ |terms|), and got is want where every term is 0."""
    assert got.shape == want.shape
    bad = np.abs(got - want) > REL * magnitude
    assert not bad.any(), (np.argwhere(bad)[:5], got[bad][:5], want[bad][:5])


@pytest.mark.parametrize("n_maps, cells, sizes", [(7, 1, [1] * 7), (7, 2 * 121 + 5, [2, 2, 2, 1])])
def test_map_tiles_cover_the_maps_in_order_at_most_the_tiles_cells(
    monkeypatch, n_maps, cells, sizes
):
    monkeypatch.setattr(M, "TILE_CELLS", cells)
    got = list(M.map_tiles(n_maps, T * T, CPU))
    assert [sl.stop - sl.start for sl in got] == sizes
    assert [sl.start for sl in got] == list(np.cumsum([0, *sizes[:-1]]))
    assert got[-1].stop == n_maps


def test_map_tiles_default_holds_the_cells_of_tile_cells():
    per = M.TILE_CELLS // (T * T)
    got = list(M.map_tiles(3 * per + 2, T * T, CPU))
    assert [sl.stop - sl.start for sl in got] == [per, per, per, 2]


@pytest.mark.parametrize("window", [None, 4])
def test_row_log_z_is_each_rows_logsumexp_over_its_finite_keys(window):
    s = _scores(3, 2, window, seed=1)
    want = _ref_log_z(s)
    got = M.row_log_z(s)
    assert got.dtype == torch.float64
    np.testing.assert_allclose(got.numpy(), want, rtol=REL, atol=0)
    # with the float64 copy at hand: the same numbers
    assert torch.equal(M.row_log_z(s, s.to(torch.float64)), got)
    # row 0 sees key 0 alone: log Z is its score
    np.testing.assert_array_equal(got[..., 0].numpy(), s[..., 0, 0].double().numpy())


def test_row_log_z_masks_an_infinite_score_and_gives_minus_inf_to_a_row_without_keys():
    s = _scores(1, 2, None, seed=2)
    s[0, 0, 5, 2] = torch.inf  # not a finite key: masked
    s[0, 1, 7] = torch.nan  # no finite key
    got = M.row_log_z(s)
    want = _ref_log_z(s)
    assert got[0, 1, 7] == -torch.inf and want[0, 1, 7] == -np.inf
    finite = np.isfinite(want)
    np.testing.assert_allclose(got.numpy()[finite], want[finite], rtol=REL, atol=0)
    # row 5 of map 0 without its infinite key: the logsumexp of the other five
    keys = s[0, 0, 5, [0, 1, 3, 4, 5]].double().numpy()
    assert got[0, 0, 5].item() == pytest.approx(np.log(np.exp(keys).sum()), rel=REL)


@pytest.mark.parametrize("cells", [1, 2 * 121 + 5, None])
def test_batch_log_z_tile_by_tile_is_the_rows_logsumexp(monkeypatch, cells):
    if cells is not None:
        monkeypatch.setattr(M, "TILE_CELLS", cells)
    s = _scores(3, 3, 4, seed=3)  # 9 maps: tiles of 1, of 2 (the last of 1), one tile
    got = M.batch_log_z(s)
    assert got.shape == (3, 3, T)
    np.testing.assert_allclose(got.numpy(), _ref_log_z(s), rtol=REL, atol=0)


def test_shared_log_z_is_computed_once_per_tensor_and_again_after_a_write():
    s = _scores(2, 2, None, seed=4)
    assert M.cached_log_z(s) is None
    first = M.shared_log_z(s)
    assert M.shared_log_z(s) is first and M.cached_log_z(s) is first
    np.testing.assert_allclose(first.numpy(), _ref_log_z(s), rtol=REL, atol=0)
    s.add_(1.0)  # an in-place write: the recorded log Z no longer holds
    assert M.cached_log_z(s) is None
    again = M.shared_log_z(s)
    np.testing.assert_allclose(again.numpy(), _ref_log_z(s), rtol=REL, atol=0)
    np.testing.assert_allclose(again.numpy() - first.numpy(), 1.0, rtol=1e-5)  # float32 s + 1
    other = s.clone()  # equal values, another tensor
    assert M.cached_log_z(other) is None
    given = torch.zeros((2, 2, T), dtype=torch.float64)
    assert M.shared_log_z(other, given) is given and M.cached_log_z(other) is given


@pytest.mark.parametrize("window", [None, 4])
def test_key0_attention_is_the_mean_softmax_weight_of_key_0_over_rows_1_on(window):
    s = _scores(2, 3, window, seed=6)
    got = M.key0_attention(s, M.batch_log_z(s))
    x = s.numpy().astype(np.float64)
    lz = _ref_log_z(s)
    weights = np.where(np.isfinite(x[..., 1:, 0]), np.exp(x[..., 1:, 0] - lz[..., 1:]), 0.0)
    want = weights.sum(-1) / (T - 1)
    np.testing.assert_allclose(got.numpy(), want, rtol=REL, atol=0)
    if window is not None:  # rows i ≥ window no longer reach key 0
        assert (weights[..., window - 1 :] == 0).all() and (weights[..., : window - 1] > 0).all()


def test_pair_kit_holds_the_pairs_their_offsets_and_the_windows_row_blocks():
    base, _ = _base("subsample")
    bounds = [(1, T), (T // 2, T), (1, 4)]  # all, late, early4
    kit = M.pair_kit(base, bounds, CPU)
    i, j = np.nonzero(base)
    np.testing.assert_array_equal(kit.wf.numpy(), base.astype(float))
    np.testing.assert_array_equal(kit.off.numpy(), ~base)
    diag = np.zeros((T, T))
    for a, c in zip(i, j, strict=True):
        diag[a, a - c] = 1.0
    np.testing.assert_array_equal(kit.diag.numpy(), diag)
    np.testing.assert_array_equal(kit.n_i.numpy(), base.sum(axis=1))
    assert kit.n == len(i) and kit.band is None
    # the rows cut at 1, 4, 5, 11: blocks [1, 4), [4, 5), [5, 11)
    assert kit.blocks == ((1, 4), (4, 5), (5, 11))
    np.testing.assert_array_equal(kit.win_blocks.numpy(), [[1, 1, 1], [0, 0, 1], [1, 0, 0]])
    rows = np.arange(T)
    np.testing.assert_array_equal(
        kit.win_rows.numpy(), [(rows >= lo) & (rows < hi) for lo, hi in bounds]
    )
    assert M.pair_kit(_base("causal")[0], bounds, CPU).band == T
    assert M.pair_kit(_base("sliding")[0], bounds, CPU).band == 4


def test_pair_kit_refuses_pairs_above_the_diagonal_on_row_0_or_a_window_from_row_0():
    base, _ = _base("causal")
    for bad, bounds in ((base | np.eye(T, k=1, dtype=bool), [(1, T)]), (base, [(0, T)])):
        with pytest.raises(ValueError, match="lower triangle, row 0 out"):
            M.pair_kit(bad, bounds, CPU)
    row0 = base.copy()
    row0[0, 0] = True
    with pytest.raises(ValueError, match="lower triangle, row 0 out"):
        M.pair_kit(row0, [(1, T)], CPU)


@pytest.mark.parametrize("kind", ["causal", "sliding", "subsample"])
@pytest.mark.parametrize("cells", [1, 2 * 121 + 5, None])
def test_tile_sums_are_the_centred_logits_sums_per_row_block(monkeypatch, kind, cells):
    """Every sum of every map, tile by tile (one map a tile, two with the last tile of one, all
    maps in one), against the cell-by-cell sums; masked keys NaN in the scores."""
    if cells is not None:
        monkeypatch.setattr(M, "TILE_CELLS", cells)
    base, window = _base(kind)
    s = _scores(3, 3, window, seed=7)
    assert torch.isnan(s).any()
    kit = M.pair_kit(base, [(1, T), (T // 2, T), (1, 4)], CPU)
    sums, u, lz, tiles = _tiled(s, kit)
    assert sum(tiles) == 9 and len(tiles) == {1: 9, 2 * 121 + 5: 5, None: 1}[cells]
    ref, mag, u_ref, _ = _ref_sums(s, base, kit.blocks)
    np.testing.assert_allclose(lz.numpy(), _ref_log_z(s).reshape(9, T), rtol=REL, atol=0)
    _assert_sums(u.numpy(), u_ref, 2.0 * np.abs(lz.numpy()).max())  # ℓ − ℓ̄: two terms
    for key in ("rows", "cols", "off", "off2", "cross"):
        _assert_sums(sums[key].numpy(), ref[key], mag[key])
    # off the measured pairs nothing is summed: offsets beyond the window, unmeasured columns
    if kind == "sliding":
        assert (sums["off"][..., 4:] == 0).all() and (sums["off2"][..., 4:] == 0).all()
    assert (sums["cols"].numpy()[:, :, ~base.any(axis=0)] == 0).all()


@pytest.mark.parametrize("kind", ["causal", "subsample"])
def test_the_log_attentions_sums_follow_from_the_logits_and_log_z(kind):
    """The module's identity, against the centred log-attention summed cell by cell: by offset,
    Σ (a − ā) = Σ x − Σ u_i and Σ (a − ā)² = Σ x² − 2 Σ u_i x + Σ u_i²."""
    base, window = _base(kind)
    s = _scores(2, 2, window, seed=8)
    kit = M.pair_kit(base, [(1, T), (3, 8)], CPU)
    sums, u, _, _ = _tiled(s, kit)
    ref, mag, _, att = _ref_sums(s, base, kit.blocks)
    off = sums["off"].numpy() - ref["r"]
    off2 = sums["off2"].numpy() - 2.0 * sums["cross"].numpy() + ref["r2"]
    _assert_sums(off, att["off"], mag["off"] + mag["r"])
    _assert_sums(off2, att["off2"], mag["off2"] + 2.0 * mag["cross"] + mag["r2"])
    assert np.abs(att["off2"]).max() > 1.0  # not a vacuous identity


def test_tile_sums_return_none_for_a_measured_pair_that_is_not_finite_only():
    base, window = _base("subsample")
    s = _scores(1, 2, window, seed=9)
    kit = M.pair_kit(base, [(1, T)], CPU)
    lz = M.batch_log_z(s).reshape(2, T)
    flat = s.reshape(2, T, T)
    clean = M.tile_sums(flat.to(torch.float64, copy=True), lz, kit)
    i, j = np.argwhere(base)[3]
    out = s.clone()
    seen, _ = np.argwhere(~base & _allowed(None))[3], None
    out[0, 1, seen[0], seen[1]] = torch.nan  # a key the model sees but the fit does not measure
    got = M.tile_sums(out.reshape(2, T, T).to(torch.float64, copy=True), lz, kit)
    for key in clean[0]:
        assert torch.equal(got[0][key], clean[0][key]), key
    hidden = s.clone()
    hidden[0, 1, i, j] = torch.nan
    assert M.tile_sums(hidden.reshape(2, T, T).to(torch.float64, copy=True), lz, kit) is None
    hidden[0, 1, i, j] = torch.inf
    assert M.tile_sums(hidden.reshape(2, T, T).to(torch.float64, copy=True), lz, kit) is None
