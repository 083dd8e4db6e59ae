"""The names paper 2's summary writes and its tables read, torch-free: the CI axis, the
decomposition's conditions, what a BOS intervention is measured on, the negative control's
threshold and the layer-local ablation's run.

Apart from the summary's statistics (:mod:`.prompts`, :mod:`.headline`, :mod:`.bos`, which import
torch) so that the table rule (``aggregate_leakage``) reads them without loading torch; each name
stays importable from the module that uses it in the summary.
"""

from __future__ import annotations

from causalpos.models.variants import DECOMPOSITION_CONDITIONS, parse_variant

#: The last axis of every summary variable with a CI.
STAT = ("estimate", "lo", "hi")

#: condition -> (causal run, bidirectional run): paper 2 §3's decomposition under standard,
#: identity and scrambled RoPE (their Table 6); see causalpos.models.variants.
DEFAULT_CONDITIONS: dict[str, tuple[str, str]] = dict(DECOMPOSITION_CONDITIONS)

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
#: bidirectional run's log-attention leakage, Table 9's C_res) or, for a causal run, its logit
#: leakage (absolute position that reached q, k; observational, not Table 9's quantity).
RESIDUAL_STREAM = "residual_stream"


def bos_measure(variant: str, baseline: str, target: str) -> str:
    """:data:`RESIDUAL_STREAM` for a bidirectional intervention measured on log-attention
    against a bidirectional baseline; otherwise the target (``logit``, ``logattn``)."""
    bidirectional = not parse_variant(variant).causal and not parse_variant(baseline).causal
    return RESIDUAL_STREAM if bidirectional and target == "logattn" else target


def bos_replacement(variant: str) -> str:
    """The replacement of a BOS-intervention run: ``mean``, ``zeros``, ``token``, ``gaussian``,
    or ``all_token`` / ``all_gaussian`` ("replace all")."""
    v = parse_variant(variant)
    if v.bos_replace is None:
        return ""
    return ("all_" if v.per_prompt else "") + v.bos_replace


#: ``status`` of a table row whose runs were all made.
MEASURED = "measured"
