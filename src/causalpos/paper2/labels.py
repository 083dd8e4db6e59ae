"""The names paper 2's summary writes and its tables read: the CI axis, the decomposition's
conditions and each run's ring twin, what a BOS intervention is measured on, the negative
control's threshold, the layer-local ablation's run and where the mask-free route applies (a fixed
token 0). Torch-free, so that the table rule (``aggregate_leakage``) reads them without torch.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from causalpos.models.variants import DECOMPOSITION_CONDITIONS, compose, parse_variant

#: The last axis of every summary variable with a CI.
STAT = ("estimate", "lo", "hi")

#: condition -> (causal run, bidirectional run): paper 2 §3's decomposition under standard,
#: identity and scrambled RoPE (their Table 6); see causalpos.models.variants.
DEFAULT_CONDITIONS: dict[str, tuple[str, str]] = dict(DECOMPOSITION_CONDITIONS)


def ring_twin(run: str) -> str:
    """``run`` on the ring (same rotary and position-0 input, every mask removed): the ablation
    the decomposition reads a condition's residual-stream component on."""
    atoms = [a for a in parse_variant(run).atoms if a not in ("bidirectional", "ring")]
    return compose(*atoms, "ring")


#: The two landmark readings of the headline: the key-0 column modelled in both fits
#: (position-free runs read 0 by construction) or counted (paper 2's reconstructed fit: nothing
#: modelled for key 0).
LANDMARKS = ("modelled", "counted")

#: |headline| at or below which a position-free run passes its negative control even when its CI
#: excludes 0 (a CI of a near-flat expected map can be very narrow).
CONTROL_TOL = 0.01

#: Eq. 5's additivity on the headline (:data:`causalpos.paper2.summary.headline.ABLATIONS`): the
#: layer-local ablation's run and the whole-forward one's.
LOCAL_RUN, WHOLE_RUN = "layer_bidirectional", "bidirectional"

#: What a BOS intervention's effect is measured on: the residual-stream component of §3 (the
#: ring run's logit leakage, Table 9's C_res on the ablation that creates no position), paper 2's
#: own reading of it (the bidirectional run's log-attention leakage) or, for a causal run, its
#: logit leakage (absolute position that reached q, k; observational, not Table 9's quantity).
RESIDUAL_STREAM = "residual_stream"
RESIDUAL_STREAM_PAPER = "residual_stream_paper"


def bos_measure(variant: str, baseline: str, target: str) -> str:
    """:data:`RESIDUAL_STREAM` for a ring intervention against a ring baseline on logits,
    :data:`RESIDUAL_STREAM_PAPER` for a bidirectional one on log-attention; otherwise the
    target (``logit``, ``logattn``)."""
    v, b = parse_variant(variant), parse_variant(baseline)
    if v.ring and b.ring and target == "logit":
        return RESIDUAL_STREAM
    bidirectional = not v.causal and not b.causal and not v.ring and not b.ring
    return RESIDUAL_STREAM_PAPER if bidirectional and target == "logattn" else target


def bos_replacement(variant: str) -> str:
    """The replacement of a BOS-intervention run: ``mean``, ``zeros``, ``token``, ``gaussian``,
    or ``all_token`` / ``all_gaussian`` ("replace all")."""
    v = parse_variant(variant)
    if v.bos_replace is None:
        return ""
    return ("all_" if v.per_prompt else "") + v.bos_replace


#: ``status`` of a table row whose runs were all made.
MEASURED = "measured"

#: ``mask_free_status`` where token 0 varies across the prompts, and where the summary does not
#: record it.
NOT_FIXED = (
    "not applicable: token 0 is not one fixed id across the prompts (ids {ids}), so the ring's "
    "logits read 0 by symmetry; give the dataset prepend_bos, or a tokenizer that adds a BOS"
)
UNRECORDED = (
    "not applicable: the summary does not record token 0 (made without the dataset's token "
    "store); summarize with the data store (rule leakage does)"
)


def token0_status(attrs: Mapping) -> tuple[float, str]:
    """(``token0_fixed``: 1, 0 or NaN where unrecorded, ``mask_free_status``: measured or why
    the mask-free route is not applicable) of a summary, from its attrs (``token0_fixed``,
    ``token0_ids``, read from the data store's tokens by
    :func:`causalpos.stages.leakage.token0_attrs`): the tables and the figures say it alike."""
    fixed = attrs.get("token0_fixed")
    if fixed is None:
        return math.nan, UNRECORDED
    if int(fixed) == 1:
        return 1.0, MEASURED
    raw = attrs.get("token0_ids", [])
    try:
        ids = [int(x) for x in raw]
    except TypeError:  # one id
        ids = [int(raw)]
    text = ", ".join(str(x) for x in ids)
    return 0.0, NOT_FIXED.format(ids=text + (", ..." if len(ids) >= 5 else ""))


#: Readings of a BOS replacement's effect (Table 9) on the headline, 1 − C(replaced) / C(run):
#: ``residual_stream`` the ring pair's logit leakage (§3's C_res on the ablation that creates
#: no position; an unmasked pass keeps no attention sink); ``residual_stream_paper`` the
#: bidirectional pair's log-attention leakage (paper 2's own C_res); ``causal_total`` the causal
#: pair's log-attention leakage (sinks kept); ``sink_heads`` the same pooled over the causal
#: run's sink heads only (prompt-mean attention to key 0 ≥ ``sink_tau``); each -> the target it
#: is read on (a ring's residual stream on its logits).
BOS_READING_TARGET = {
    "residual_stream": "logit",
    "residual_stream_paper": "logattn",
    "causal_total": "logattn",
    "sink_heads": "logattn",
}
BOS_READINGS = tuple(BOS_READING_TARGET)

#: ``leakage_model_boot``: the target whose headline replicates (first window, every run) are kept,
#: claim 1's (the logit leakage), so that two summaries on the same resampled prompts pair (a
#: trained model minus its random-init twin: causalpos.paper2.tables.twins).
HEADLINE_BOOT_TARGET = "logit"
