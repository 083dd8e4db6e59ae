"""Loss by position beyond the training length, the link paper 1 (§8) and paper 2 (§6) leave
unmeasured: each one-factor variant's next-token NLL per position on held-out sequences longer
than its training context, with a bootstrap CI over sequences.

Position convention: ``position`` t (0-indexed, 1 .. seq − 1) is the *predicted* token; its NLL is
−log p(token t | tokens 0 .. t − 1). A model trained on ``context``-token windows was trained on
targets t ≤ context − 1; every t ≥ context is extrapolation.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import torch
import xarray as xr
from torch import nn

from causalpos.inference import bootstrap_ci
from causalpos.training.loss import sequence_nll


@torch.no_grad()
def per_token_nll(
    model: nn.Module, tokens, *, batch_size: int = 16, autocast_dtype: torch.dtype | None = None
) -> np.ndarray:
    """Next-token NLL ``(n_sequences, seq − 1)`` float32 (column t − 1 ↔ predicted position t).

    Logits are log-softmaxed in float32 whatever the model's dtype.
    """
    tokens = torch.as_tensor(
        np.asarray(tokens) if not isinstance(tokens, torch.Tensor) else tokens
    ).long()
    if tokens.ndim != 2 or tokens.shape[1] < 2:
        raise ValueError(
            f"tokens must be (n_sequences, seq >= 2) token ids, got shape {tuple(tokens.shape)}"
        )
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1 (got {batch_size})")
    was_training = model.training
    model.eval()
    out = [
        sequence_nll(model, tokens[i : i + batch_size], autocast_dtype=autocast_dtype).cpu()
        for i in range(0, len(tokens), batch_size)
    ]
    model.train(was_training)
    return torch.cat(out).numpy().astype(np.float32)


def loss_by_position(
    model: nn.Module,
    tokens,
    *,
    train_context: int,
    batch_size: int = 16,
    n_bootstrap: int = 2000,
    confidence: float = 0.95,
    seed: int = 0,
    excess_from: int | None = None,
) -> xr.Dataset:
    """Per-position mean next-token NLL of ``model`` on ``tokens`` ``(n_sequences, seq)`` with a bootstrap CI.

    Returns ``nll (sequence, position)`` float32 and ``nll_mean``, ``nll_lo``, ``nll_hi``
    ``(position)`` float64 (nats), ``position`` = 1 .. seq − 1; attrs ``mean_nll_within`` /
    ``mean_nll_beyond`` (over targets t < train_context and t ≥ train_context). Where ``tokens``
    reach beyond ``train_context`` also ``excess (sequence)`` = mean NLL over t ≥ train_context −
    mean NLL over ``excess_from`` ≤ t < train_context (default ``train_context // 2``), and its
    mean with bootstrap CI ``excess_mean``, ``excess_lo``, ``excess_hi`` (scalars).
    """
    nll = per_token_nll(model, tokens, batch_size=batch_size)
    # Percentile bootstrap over sequences; one resampling shared by all positions (keeps pairing).
    mean, lo, hi = bootstrap_ci(nll, n_boot=n_bootstrap, level=confidence, seed=seed)
    positions = np.arange(1, nll.shape[1] + 1)
    within = positions < train_context
    attrs = {
        "train_context": int(train_context),
        "confidence": confidence,
        "n_bootstrap": n_bootstrap,
        "seed": seed,
        "mean_nll_within": float(mean[within].mean()) if within.any() else float("nan"),
        "mean_nll_beyond": float(mean[~within].mean()) if (~within).any() else float("nan"),
        "position_convention": "position t = predicted token (0-indexed); nll = -log p(x_t | x_<t)",
    }
    data = {
        "nll": (("sequence", "position"), nll),
        "nll_mean": ("position", mean),
        "nll_lo": ("position", lo),
        "nll_hi": ("position", hi),
    }
    start = train_context // 2 if excess_from is None else int(excess_from)
    ref = (positions >= start) & within
    if ref.any() and (~within).any():
        # Paired within each sequence. The first targets (little context, high loss) are left
        # out of the reference so the excess is not dominated by them.
        excess = nll[:, ~within].astype(np.float64).mean(1) - nll[:, ref].astype(np.float64).mean(1)
        attrs["excess_from"] = start
        e = bootstrap_ci(excess, n_boot=n_bootstrap, level=confidence, seed=seed)
        data["excess"] = ("sequence", excess)
        for key, v in zip(("excess_mean", "excess_lo", "excess_hi"), e):
            data[key] = ((), float(v))
    return xr.Dataset(
        data, coords={"sequence": np.arange(nll.shape[0]), "position": positions}, attrs=attrs
    )


def measure_length_generalization(
    models: Mapping[str, nn.Module],
    tokens,
    *,
    train_context: int | Mapping[str, int],
    batch_size: int = 16,
    n_bootstrap: int = 2000,
    confidence: float = 0.95,
    seed: int = 0,
    excess_from: int | None = None,
) -> xr.Dataset:
    """:func:`loss_by_position` for each named model (the one-factor variants), stacked on a ``variant`` dim.

    ``models``: variant name → loaded model (NoPE ones loaded with ``load_model``: the identity
    rotation). ``train_context``: one value or one per variant. The same bootstrap seed for every
    variant, so the CIs resample the same sequences. Adds ``train_context``,
    ``mean_nll_within`` and ``mean_nll_beyond`` per variant.
    """
    if not models:
        raise ValueError("measure_length_generalization needs at least one model")
    parts = []
    for name, model in models.items():
        ctx = train_context[name] if isinstance(train_context, Mapping) else train_context
        ds = loss_by_position(
            model,
            tokens,
            train_context=ctx,
            batch_size=batch_size,
            n_bootstrap=n_bootstrap,
            confidence=confidence,
            seed=seed,
            excess_from=excess_from,
        )
        ds = ds.assign(
            train_context=ctx, **{k: ds.attrs[k] for k in ("mean_nll_within", "mean_nll_beyond")}
        )
        parts.append(ds.expand_dims(variant=[name]))
    out = xr.concat(parts, dim="variant", combine_attrs="drop_conflicts")
    for key in ("train_context", "mean_nll_within", "mean_nll_beyond"):
        out.attrs.pop(key, None)
    return out


def summary_table(ds: xr.Dataset):
    """One row per variant of a ``stages.lengthgen.length_generalization`` dataset (a
    ``pandas.DataFrame``, nats); the excess columns where the sequences go beyond the context."""
    import pandas as pd

    rows = []
    for name in ds["variant"].values:
        sub = ds.sel(variant=name)
        row = {
            "variant": str(name),
            "positional": str(sub["positional"].item()) if "positional" in sub else str(name),
            "train_context": int(sub["train_context"]),
            "seq_len": int(ds.sizes["position"]) + 1,
            "n_sequences": int(ds.sizes["sequence"]),
        }
        for key in ("final_heldout_loss", "unigram_entropy", "mean_nll_within", "mean_nll_beyond"):
            row[key] = float(sub[key]) if key in sub else float("nan")
        if "excess_mean" in sub:
            row["excess_from"] = int(ds.attrs.get("excess_from", int(sub["train_context"]) // 2))
            row.update({k: float(sub[k]) for k in ("excess_mean", "excess_lo", "excess_hi")})
            row["confidence"] = float(ds.attrs.get("confidence", 0.95))
        rows.append(row)
    return pd.DataFrame(rows)
