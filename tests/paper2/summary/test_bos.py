"""Table 9 on the headline (paper2.summary.bos): a replacement that changes nothing reads 0, one
that removes the query effect reads 1, the sink-head reading pools the sink heads only."""

from __future__ import annotations

import numpy as np
import pytest

from causalpos.paper2.estimator import expected as X
from causalpos.paper2.estimator import storeview as SV
from causalpos.paper2.prompts import PromptSet
from causalpos.paper2.settings import LeakageSettings
from causalpos.paper2.summary import assemble as S
from causalpos.paper2.summary import headline as H
from tests.paper2_headline_runs import HEADS, N, T, store
from tests.paper2_maps import content_maps


def _sink_store(y, causal, sink):
    ds = store(y, causal)
    att = np.broadcast_to(np.asarray(sink, float)[None, None], (N, 1, HEADS))
    return ds.assign(sink_attention=(("sequence", "layer", "head"), att.copy())).assign_coords(
        layer=ds["layer"].values
    )


def test_bos_effects_on_the_headline_keep_the_sinks():
    """Table 9 on the headline: a replacement that changes nothing reads 0 exactly (negative
    control), one that removes the whole query effect reads 1 (planted: the effect's known
    size); the sink-head reading pools the baseline's sink heads only (independent check)."""
    rng = np.random.default_rng(8)
    free, _ = content_maps(N, HEADS, T, rng)
    planted = 1.5 * np.log(np.arange(1, T + 1))[None].repeat(HEADS, 0)
    planted[2] = 0.0  # head 2 carries no position
    leaky = free + planted[None, :, :, None]
    sink = [0.9, 0.1, 0.8]  # heads 0 and 2 are the baseline's sink heads
    runs = {
        "causal": _sink_store(leaky, True, sink),
        "bos_replace_mean": _sink_store(free, True, sink),  # every query effect gone
        "bos_replace_all_gaussian": _sink_store(leaky, True, sink),  # nothing changed
        "bidirectional": _sink_store(leaky, False, [0, 0, 0]),
        "bos_replace_mean+bidirectional": _sink_store(free, False, [0, 0, 0]),
        "ring": _sink_store(leaky, False, [0, 0, 0]),
        "bos_replace_mean+ring": _sink_store(free, False, [0, 0, 0]),
    }
    from causalpos.paper2.summary.bos import wanted_bos

    summ = S.leakage_summary(runs, LeakageSettings(n_boot=300, n_perm=0, bos_windows=("late",)))
    # each reading on its own target: the ring's residual stream on logits
    assert "'residual_stream': 'logit'" in summ.attrs["bos_target"]
    eff = summ["bos_effect"].sel(window="all")
    for reading in ("causal_total", "sink_heads"):  # nothing changed: 0 exactly
        same = eff.sel(bos_replacement="all_gaussian", bos_reading=reading)
        np.testing.assert_array_equal(same.values, [0.0, 0.0, 0.0])
    # no ring or bidirectional all_gaussian pair: its residual-stream readings are not run (NaN)
    for reading in ("residual_stream", "residual_stream_paper"):
        assert eff.sel(bos_replacement="all_gaussian", bos_reading=reading).isnull().all()
    # the ring's residual stream is read on logits, where the planted effect lives
    e = eff.sel(bos_replacement="mean", bos_reading="residual_stream")
    assert float(e.sel(stat="estimate")) > 0.95
    # logits, where the planted query effect lives (log-attention cancels a row constant):
    # removing all of it reads 1 in every reading
    ps = PromptSet.from_stores(runs, LeakageSettings(n_boot=300))
    _, pairs, _ = wanted_bos(ps)
    blk = H.headline_blocks(
        ps, LeakageSettings(), conditions={}, bos_pairs=pairs, bos_target="logit"
    )
    eff = blk["bos_effect"].sel(window="all")
    for reading in ("causal_total", "sink_heads", "residual_stream", "residual_stream_paper"):
        e = eff.sel(bos_replacement="mean", bos_reading=reading)
        assert float(e.sel(stat="lo")) <= 1.0 <= float(e.sel(stat="hi")) + 0.02, (reading, e.values)
        assert float(e.sel(stat="estimate")) > 0.95
    # the sink-head reading equals the estimator pooled over heads 0 and 2 of each run
    sel = np.array([[True, False, True]])
    c = {}
    for v in ("causal", "bos_replace_mean"):
        g, _ = SV.store_grams(runs[v].sortby("sequence"), window="all", target="logit")
        sub = {k: np.asarray(x)[sel] for k, x in g.items()}
        u = X.u_statistics(sub, np.ones((1, ps.sequences.size)))
        c[v] = float(u["num"].sum() / u["den"].sum())
    e = eff.sel(bos_replacement="mean", bos_reading="sink_heads", stat="estimate")
    assert float(e) == pytest.approx(1.0 - c["bos_replace_mean"] / c["causal"])
    assert int(blk["bos_sink_heads"].sel(bos_replacement="mean")) == 2
    full = blk["leakage_model"].sel(variant="causal", window="all", target="logit")[0]
    assert c["causal"] != pytest.approx(float(full))  # a subset, not all heads
