"""Paper 2 §4 on the states extraction read (:mod:`causalpos.capture.position0`: the residual
stream at position 0, the value vectors at key 0), torch-free: the trajectory (under causal
attention position 0 attends only to itself, so with a fixed token 0 its cross-prompt spread is
exactly 0 at every layer), sink-reading heads and content probes against chance and a
label-permutation null. BOS replacement's effect is read in the summary
(:func:`causalpos.paper2.summary.bos.bos_effects`)."""

from __future__ import annotations

import numpy as np
import xarray as xr

from causalpos import stats


def trajectory(states: np.ndarray) -> xr.Dataset:
    """Cross-prompt spread per layer of position-0 ``states`` (prompt, layer, dim), e.g. a
    store's ``p0_state``: ``std`` (mean over dims of the cross-prompt standard deviation, ddof 0),
    ``mean_norm`` (mean over prompts of ‖h‖), ``ratio`` = std / mean_norm and ``max_abs_dev``
    (max |h − h_prompt0|). Deviations are taken from prompt 0 before the std (shift-invariant), so
    identical states give exactly 0, not a rounding residue of the mean."""
    x = np.asarray(states, dtype=np.float64)
    if x.ndim != 3 or x.shape[0] < 2:
        raise ValueError(f"states must be (prompt>=2, layer, dim), got shape {x.shape}")
    dev = x - x[:1]
    std = dev.std(axis=0).mean(axis=-1)
    norm = np.linalg.norm(x, axis=-1).mean(axis=0)
    return xr.Dataset(
        {
            "std": ("layer", std),
            "mean_norm": ("layer", norm),
            "ratio": ("layer", np.divide(std, norm, out=np.full_like(std, np.nan), where=norm > 0)),
            "max_abs_dev": ("layer", np.abs(dev).max(axis=(0, 2))),
        },
        coords={"layer": np.arange(x.shape[1])},
        attrs={
            "n_prompts": int(x.shape[0]),
            "layer_note": "0 = embedding output, l = after block l (pre-final-norm)",
        },
    )


def sink_heads(sink_attention: xr.DataArray, tau: float = 0.5) -> xr.DataArray:
    """Heads whose mean attention to key 0 (over prompts, if a ``sequence`` dim is present) is ≥ τ."""
    if not 0.0 <= tau <= 1.0:
        raise ValueError(f"tau is an attention weight in [0, 1], got {tau}")
    m = sink_attention.mean("sequence") if "sequence" in sink_attention.dims else sink_attention
    return m >= tau


def _ridge_cv_accuracy(
    x: np.ndarray, y: np.ndarray, classes: np.ndarray, n_folds: int, ridge: float, rng
) -> float:
    """Accuracy of the ridge probe over ``n_folds`` folds stratified by class, drawn from ``rng``."""
    folds = np.empty(y.size, dtype=np.int64)
    for lab in classes:
        idx = np.flatnonzero(y == lab)
        folds[rng.permutation(idx)] = np.arange(idx.size) % n_folds
    correct = 0
    for k in range(n_folds):
        te, tr = folds == k, folds != k
        xtr, xte = x[tr], x[te]
        # Centre on a training row first: identical rows become exact zeros (a fixed BOS must give
        # an exactly constant feature, not rounding noise amplified by the scaling below).
        ref = xtr[:1]
        xtr, xte = xtr - ref, xte - ref
        mu, sd = xtr.mean(0), xtr.std(0)
        keep = sd > 0
        xtr = (xtr[:, keep] - mu[keep]) / sd[keep]
        xte = (xte[:, keep] - mu[keep]) / sd[keep]
        onehot = (y[tr, None] == classes[None, :]).astype(np.float64)
        prior = onehot.mean(0)
        if xtr.shape[1]:
            u, s, vt = np.linalg.svd(xtr, full_matrices=False)
            coef = vt.T @ ((s / (s * s + ridge))[:, None] * (u.T @ (onehot - prior)))
            scores = xte @ coef + prior
        else:
            scores = np.broadcast_to(prior, (xte.shape[0], classes.size))
        correct += int((classes[np.argmax(scores, axis=1)] == y[te]).sum())
    return correct / y.size


def probe_cv(
    features: np.ndarray,
    labels: np.ndarray,
    *,
    n_folds: int = 5,
    ridge: float = 1.0,
    n_perm: int = 200,
    seed: int = 0,
) -> dict[str, float]:
    """Cross-validated ridge classifier (one-vs-rest least squares, argmax) of ``labels``
    (prompt,) from standardized ``features`` (prompt, feature): ``n_folds`` stratified folds,
    L2 penalty ``ridge``, ``n_perm`` label permutations for the null (0: none;
    p = (#{null ≥ acc} + 1)/(R + 1)), folds and permutations seeded by ``seed``.

    Returns ``accuracy``, ``chance`` (majority-class rate), ``null_mean``, ``p_value``.
    """
    x = np.asarray(features, dtype=np.float64)
    y = np.asarray(labels)
    if x.ndim != 2 or y.shape != (x.shape[0],):
        raise ValueError(
            f"features must be (prompt, feature) and labels (prompt,); got {x.shape}, {y.shape}"
        )
    classes, counts = np.unique(y, return_counts=True)
    if classes.size < 2:
        raise ValueError("a probe needs at least two label classes")
    if counts.min() < n_folds:
        raise ValueError(
            f"every class needs >= n_folds={n_folds} prompts for stratified folds; "
            f"smallest class has {counts.min()}"
        )
    rng = np.random.default_rng(seed)
    acc = _ridge_cv_accuracy(x, y, classes, n_folds, ridge, rng)
    perms = (rng.permutation(y) for _ in range(n_perm))
    null = np.array([_ridge_cv_accuracy(x, yp, classes, n_folds, ridge, rng) for yp in perms])
    return {
        "accuracy": acc,
        "chance": float(counts.max() / y.size),
        "null_mean": float(null.mean()) if n_perm else float("nan"),
        "p_value": float(stats.permutation_pvalue(np.float64(acc), null)) if n_perm else np.nan,
    }


def probe_by_layer(states: np.ndarray, labels: np.ndarray, **kw) -> xr.Dataset:
    """:func:`probe_cv` at every layer of ``states`` (prompt, layer, dim)."""
    res = [probe_cv(states[:, l], labels, **kw) for l in range(states.shape[1])]
    return xr.Dataset(
        {k: ("layer", np.array([r[k] for r in res])) for k in res[0]},
        coords={"layer": np.arange(states.shape[1])},
    )


def probe_labels(labels: np.ndarray, n_folds: int) -> tuple[np.ndarray, str]:
    """Prompts usable for a stratified ``n_folds`` probe: those whose class has ≥ ``n_folds`` prompts.

    Returns ``(keep (prompt,) bool, note)``; ``keep`` is all False (and ``note`` says why) when
    fewer than two classes qualify, e.g. random tokens (one label) or a corpus with one chunk per
    source.
    """
    labels = np.array([str(x) for x in np.asarray(labels).ravel()])
    classes, counts = np.unique(labels, return_counts=True)
    ok = classes[counts >= n_folds]
    keep = np.isin(labels, ok)
    if ok.size < 2:
        return np.zeros(labels.size, dtype=bool), (
            f"no probe: {ok.size} label class(es) with >= {n_folds} prompts ({classes.size} classes in all)"
        )
    dropped = classes.size - ok.size
    note = f"{ok.size} classes, {int(keep.sum())} prompts" + (
        f" ({dropped} smaller classes dropped)" if dropped else ""
    )
    return keep, note
