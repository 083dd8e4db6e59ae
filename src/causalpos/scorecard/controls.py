"""The controls' verdicts, decided from the numbers paper 2's tables carry (``paper2_controls``,
``paper2_plant_doses``, ``paper2_headline``: each control's estimate, interval and declared
margin, never its verdict), for the scorecard's rows, the findings page and the notebook API
(:func:`with_verdicts`). ``not run`` where the numbers are absent or where the prompts cannot
control the reading (the counted key-0 reading on prompts with a fixed BOS)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from causalpos.verdicts import NOT_RECOVERED, RECOVERED, negative_control, recovered
from causalpos.verdicts import dose_series as series_rule

NOT_RUN = "not run"
#: The key-0 readings of a negative control (``negative_<landmark>_*`` columns).
LANDMARKS = ("modelled", "counted")


def _finite(*xs) -> bool:
    try:
        return bool(np.isfinite(np.asarray(xs, dtype=float)).all())
    except (TypeError, ValueError):
        return False


def negative_verdict(lo, hi, margin) -> str:
    """A negative control's verdict on its (1 − 2α) interval (``lo``, ``hi``) against the declared
    ``margin``; ``not run`` where a bound or the margin is not a finite number."""
    if not _finite(lo, hi, margin):
        return NOT_RUN
    return negative_control((float(lo), float(hi)), float(margin))


def positive_verdict(lo, hi, truth) -> str:
    """A planted effect of size ``truth`` read back with interval (``lo``, ``hi``); ``not run``
    where no truth could be set."""
    if not _finite(truth):
        return NOT_RUN
    return recovered((float(lo), float(hi)), float(truth))


def dose_verdicts(g: pd.DataFrame) -> tuple[str, str]:
    """(dose 0's verdict, the series') of one dose series' rows (dose 0 first; columns
    ``leakage_lo``, ``leakage_hi``, ``step_lo``, ``step_hi``, ``margin``): dose 0 by
    :func:`~causalpos.verdicts.negative_control` on its 95 % interval (two one-sided tests at
    2.5 % each: stricter than the controls' 5 %), the series by
    :func:`~causalpos.verdicts.dose_series`."""
    margin = float(g["margin"].iloc[0])
    zero = (float(g["leakage_lo"].iloc[0]), float(g["leakage_hi"].iloc[0]))
    steps = list(zip(g["step_lo"].iloc[1:], g["step_hi"].iloc[1:], strict=True))
    return negative_control(zero, margin), series_rule(zero, steps, margin)


def _num(df: pd.DataFrame, name: str) -> pd.Series:
    if name not in df:
        return pd.Series(np.nan, index=df.index)
    return pd.to_numeric(df[name], errors="coerce")


def _controls(df: pd.DataFrame, fixed_bos: bool | None) -> pd.DataFrame:
    out = df.copy()
    bos = _num(df, "fixed_bos") == 1 if fixed_bos is None else pd.Series(fixed_bos, df.index)
    for lm in LANDMARKS:
        pre = f"negative_{lm}_"
        if f"{pre}margin" not in df:
            continue
        cols = [_num(df, f"{pre}{k}") for k in ("tost_lo", "tost_hi", "margin")]
        words = [negative_verdict(*x) for x in zip(*cols, strict=True)]
        if lm == "counted":  # a fixed BOS: its identity is a key-0 column of any run
            words = [NOT_RUN if b else w for w, b in zip(words, bos, strict=True)]
        out[f"{pre}control"] = words
    out["negative_control"] = out.get("negative_modelled_control", NOT_RUN)
    pp = [_num(df, f"per_prompt{k}") for k in ("_lo", "_hi", "_margin")]
    out["per_prompt_control"] = [
        negative_control((lo, hi), m) if _finite(m) else NOT_RUN for lo, hi, m in zip(*pp)
    ]
    planted = [_num(df, k) for k in ("planted_estimate_lo", "planted_estimate_hi", "planted")]
    out["positive_control"] = [positive_verdict(*x) for x in zip(*planted, strict=True)]
    if "planted_model_truth" in df:
        lo, hi, truth = (_num(df, f"planted_model_{k}") for k in ("lo", "hi", "truth"))
        ok = [positive_verdict(*x) == RECOVERED for x in zip(lo, hi, truth, strict=True)]
        ok = [a and c == 1 for a, c in zip(ok, _num(df, "planted_model_check"), strict=True)]
        named = df["planted_model_variant"].fillna("").astype(str) != ""
        out["planted_model_control"] = [
            (RECOVERED if a else NOT_RECOVERED) if n else "" for a, n in zip(ok, named, strict=True)
        ]
    return out


def _doses(df: pd.DataFrame) -> pd.DataFrame:
    out = df.copy()
    zero, series = [], []
    judged = _num(df, "dose0_is_control") == 1
    for _, g in df.groupby([c for c in ("model", "dataset", "series") if c in df], sort=False):
        g = g.assign(**{c: _num(g, c) for c in ("leakage_lo", "leakage_hi", "step_lo", "step_hi")})
        z, s = dose_verdicts(g.assign(margin=_num(g, "margin")))
        zero += [(i, z if j == 0 else "") for j, i in enumerate(g.index)]
        series += [(i, s if judged[i] else NOT_RUN) for i in g.index]
    out["dose0_control"] = pd.Series(dict(zero))
    out["positive_control"] = pd.Series(dict(series))
    return out


def _headline(df: pd.DataFrame) -> pd.DataFrame:
    out = df.copy()
    cols = [_num(df, k) for k in ("control_tost_lo", "control_tost_hi", "control_margin")]
    named = df.get("control_variant", pd.Series("", df.index)).fillna("").astype(str) != ""
    words = [negative_verdict(*x) for x in zip(*cols, strict=True)]
    out["control_verdict"] = [w if n else "" for w, n in zip(words, named, strict=True)]
    return out


def with_verdicts(name: str, df: pd.DataFrame, fixed_bos: bool | None = None) -> pd.DataFrame:
    """Table ``name`` with its controls' verdict columns: ``negative_control``,
    ``negative_<landmark>_control``, ``per_prompt_control``, ``positive_control``,
    ``planted_model_control`` (``controls``), ``dose0_control``, ``positive_control``
    (``plant_doses``), ``control_verdict`` (``headline``: its position-free run's control); any
    other table as given. ``fixed_bos``: whether token 0 is a fixed BOS (None: its column says)."""
    if df is None or df.empty:
        return df
    build = {"controls": lambda d: _controls(d, fixed_bos), "plant_doses": _doses}
    build["headline"] = _headline
    return build[name](df) if name in build else df
