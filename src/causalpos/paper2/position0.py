"""Paper 2 §4: the position-0 trajectory, sink-reading heads, content probes, BOS replacement.

- **Trajectory.** Under causal attention position 0 attends only to itself, so its residual stream
  evolves as a closed system from the embedding of token 0: with a fixed token 0 the cross-prompt
  standard deviation is exactly 0 at every layer. It is > 0 when token 0 varies or attention is
  bidirectional. Left padding breaks the premise (position 0 becomes a pad), so padded batches are
  refused.
- **Sink-reading heads.** Mean attention to key 0 over queries i ≥ 1 and prompts ≥ τ.
- **Probes.** Cross-validated ridge classifier from position-0 states (per layer) or from sink heads'
  value vectors at key 0 to a prompt-level label, against chance and a label-permutation null.
- **BOS replacement.** The replaced embeddings are built by
  :func:`causalpos.capture.bos_replaced_embeddings` (one implementation for extraction and here;
  pass them to :func:`position0_states` as ``inputs_embeds``); effect
  = 1 − C_res(intervention) / C_res(baseline) (:func:`bos_effect`).
"""

from __future__ import annotations

import numpy as np
import torch
import xarray as xr

from causalpos import stats
from causalpos.models.variants import VARIANTS


def check_unpadded(
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor | None = None,
    pad_token_id: int | None = None,
    bos_token_id: int | None = None,
) -> None:
    """Refuse inputs whose position 0 may not be the prompt's first token.

    Raises ``ValueError`` if ``attention_mask`` has any zero (padding) or if a row starts with the
    pad token (left padding). Right padding would be harmless for position 0 under a causal mask,
    but a mask with zeros is refused all the same: the trajectory needs N prompts of equal length.
    """
    if input_ids.ndim != 2:
        raise ValueError(f"input_ids must be (prompt, T), got shape {tuple(input_ids.shape)}")
    if attention_mask is not None and bool((attention_mask == 0).any()):
        rows = torch.nonzero((attention_mask == 0).any(dim=1)).flatten()[:5].tolist()
        raise ValueError(
            f"attention_mask has zeros (padding) in prompts {rows}: the position-0 trajectory needs "
            "prompts of equal length without padding (left padding moves a pad token to position 0). "
            "Cut every prompt to the same number of tokens and pass no attention mask."
        )
    if pad_token_id is not None and pad_token_id != bos_token_id:
        left = input_ids[:, 0] == pad_token_id
        if bool(left.any()):
            rows = torch.nonzero(left).flatten()[:5].tolist()
            raise ValueError(
                f"prompts {rows} start with the pad token id {pad_token_id} (left padding): position 0 "
                "must be the prompt's first token. Use unpadded prompts of equal length."
            )


def _decoder_layers(model) -> torch.nn.ModuleList | None:
    base = getattr(model, "model", None)
    layers = getattr(base, "layers", None) if base is not None else None
    return layers if isinstance(layers, torch.nn.ModuleList) else None


@torch.no_grad()
def position0_states(
    model,
    input_ids: torch.Tensor | None = None,
    *,
    inputs_embeds: torch.Tensor | None = None,
    attention_mask: torch.Tensor | None = None,
    batch_size: int | None = None,
) -> np.ndarray:
    """Residual stream at position 0 after the embedding and after every block.

    Uses ``output_hidden_states``; the model's last hidden state is taken *before* the final norm
    (a forward hook on the last decoder layer), so every entry is the raw residual stream.

    Args:
        model: a Hugging Face causal LM (Llama-family layout ``model.model.layers``).
        input_ids: ``(prompt, T)`` token ids, no padding (see :func:`check_unpadded`).
        inputs_embeds: ``(prompt, T, d)`` instead of ``input_ids`` (BOS replacement).
        attention_mask: refused if it has zeros; otherwise not passed on.
        batch_size: prompts per forward pass; None = all at once. Bitwise-equal position-0 states
            across prompts are guaranteed by the maths only up to the kernels: batches of different
            sizes may take different BLAS paths, so keep the default for exactness checks.

    Returns:
        ``(prompt, layer, dim)`` float64, layer 0 = embedding output, layer ℓ = after block ℓ.
    """
    if (input_ids is None) == (inputs_embeds is None):
        raise ValueError("pass exactly one of input_ids and inputs_embeds")
    cfg = model.config
    if input_ids is not None:
        check_unpadded(
            input_ids,
            attention_mask,
            getattr(cfg, "pad_token_id", None),
            getattr(cfg, "bos_token_id", None),
        )
        n = input_ids.shape[0]
    else:
        if inputs_embeds.ndim != 3:
            raise ValueError(
                f"inputs_embeds must be (prompt, T, d), got shape {tuple(inputs_embeds.shape)}"
            )
        check_unpadded(torch.zeros(inputs_embeds.shape[:2], dtype=torch.long), attention_mask)
        n = inputs_embeds.shape[0]
    bs = n if batch_size is None else int(batch_size)
    layers = _decoder_layers(model)
    captured: list[torch.Tensor] = []
    handle = None
    if layers is not None:

        def hook(_mod, _inp, out):
            captured.append((out[0] if isinstance(out, tuple) else out)[:, 0].detach())

        handle = layers[-1].register_forward_hook(hook)
    chunks = []
    try:
        for start in range(0, n, bs):
            sl = slice(start, start + bs)
            kw = (
                {"input_ids": input_ids[sl]}
                if input_ids is not None
                else {"inputs_embeds": inputs_embeds[sl]}
            )
            # logits_to_keep=1: the vocabulary projection of every position is not needed (for
            # SmolLM2 at T = 128 it was a fifth of the job's arithmetic)
            out = model(**kw, output_hidden_states=True, use_cache=False, logits_to_keep=1)
            hs = torch.stack([h[:, 0] for h in out.hidden_states], dim=1)  # (b, L+1, d)
            if captured:
                hs[:, -1] = captured.pop()  # pre-final-norm residual, not last_hidden_state
            chunks.append(hs.to(torch.float64).cpu())
    finally:
        if handle is not None:
            handle.remove()
    return torch.cat(chunks).numpy()


def trajectory(states: np.ndarray) -> xr.Dataset:
    """Cross-prompt spread of position-0 states per layer.

    Args:
        states: ``(prompt, layer, dim)`` from :func:`position0_states`.

    Returns:
        Dataset over ``layer`` with ``std`` (mean over dims of the cross-prompt standard deviation,
        ddof 0), ``mean_norm`` (mean over prompts of ‖h‖), ``ratio`` = std / mean_norm and
        ``max_abs_dev`` (max |h − h_prompt0|). Deviations are taken from prompt 0 before the std
        (the std is shift-invariant), so identical states give exactly 0, not a rounding residue
        of the mean.
    """
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


def position0_trajectory(
    model, input_ids: torch.Tensor, *, batch_size: int | None = None
) -> xr.Dataset:
    """:func:`trajectory` of :func:`position0_states`, with the model's causality in the attrs."""
    ds = trajectory(position0_states(model, input_ids, batch_size=batch_size))
    ds.attrs["is_causal"] = int(bool(getattr(model.config, "is_causal", True)))
    ds.attrs["token0_fixed"] = int(bool((input_ids[:, 0] == input_ids[0, 0]).all()))
    return ds


def sink_heads(sink_attention: xr.DataArray, tau: float = 0.5) -> xr.DataArray:
    """Heads whose mean attention to key 0 (over prompts, if a ``sequence`` dim is present) is ≥ τ."""
    if not 0.0 <= tau <= 1.0:
        raise ValueError(f"tau is an attention weight in [0, 1], got {tau}")
    m = sink_attention.mean("sequence") if "sequence" in sink_attention.dims else sink_attention
    return m >= tau


def _stratified_folds(labels: np.ndarray, n_folds: int, rng: np.random.Generator) -> np.ndarray:
    fold = np.empty(labels.size, dtype=np.int64)
    for lab in np.unique(labels):
        idx = np.flatnonzero(labels == lab)
        fold[rng.permutation(idx)] = np.arange(idx.size) % n_folds
    return fold


def _ridge_cv_accuracy(
    x: np.ndarray, y: np.ndarray, classes: np.ndarray, folds: np.ndarray, n_folds: int, ridge: float
) -> float:
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
    """Cross-validated ridge classifier (one-vs-rest least squares, argmax) on standardized features.

    Args:
        features: ``(prompt, feature)``.
        labels: ``(prompt,)`` prompt-level labels (e.g. source text).
        n_folds: stratified folds (seeded).
        ridge: L2 penalty on standardized features.
        n_perm: label permutations for the null (0 = skip); p = (#{null ≥ acc}+1)/(R+1).
        seed: folds and permutations.

    Returns:
        ``accuracy``, ``chance`` (majority-class rate), ``null_mean``, ``p_value``.
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
    acc = _ridge_cv_accuracy(x, y, classes, _stratified_folds(y, n_folds, rng), n_folds, ridge)
    null = np.array(
        [
            _ridge_cv_accuracy(x, yp, classes, _stratified_folds(yp, n_folds, rng), n_folds, ridge)
            for yp in (rng.permutation(y) for _ in range(n_perm))
        ]
    )
    return {
        "accuracy": acc,
        "chance": float(counts.max() / y.size),
        "null_mean": float(null.mean()) if n_perm else float("nan"),
        "p_value": float(stats.permutation_pvalue(np.float64(acc), null))
        if n_perm
        else float("nan"),
    }


def probe_by_layer(states: np.ndarray, labels: np.ndarray, **kw) -> xr.Dataset:
    """:func:`probe_cv` at every layer of ``states`` (prompt, layer, dim)."""
    res = [probe_cv(states[:, l], labels, **kw) for l in range(states.shape[1])]
    return xr.Dataset(
        {k: ("layer", np.array([r[k] for r in res])) for k in res[0]},
        coords={"layer": np.arange(states.shape[1])},
    )


@torch.no_grad()
def position0_values(model, states: np.ndarray) -> np.ndarray:
    """Value vectors at key 0 of every block: v_proj(input_layernorm(h_ℓ[0])).

    Args:
        model: Llama-family causal LM (``model.model.layers[ℓ].input_layernorm`` / ``.self_attn.v_proj``).
        states: ``(prompt, L+1, d)`` from :func:`position0_states` (entry ℓ is block ℓ's input).

    Returns:
        ``(prompt, layer, kv_head, head_dim)`` float64 (values carry no rotary embedding).
    """
    layers = _decoder_layers(model)
    if (
        layers is None
        or not hasattr(layers[0], "input_layernorm")
        or not hasattr(layers[0].self_attn, "v_proj")
    ):
        raise ValueError(
            f"position0_values needs a Llama-family layout (model.model.layers[i].input_layernorm, "
            f".self_attn.v_proj); {type(model).__name__} has none"
        )
    cfg = model.config
    n_kv = getattr(cfg, "num_key_value_heads", None) or cfg.num_attention_heads
    head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
    p = next(model.parameters())
    out = []
    for l, layer in enumerate(layers):
        h = torch.as_tensor(states[:, l], dtype=p.dtype, device=p.device)
        v = layer.self_attn.v_proj(layer.input_layernorm(h))
        out.append(v.to(torch.float64).cpu().reshape(h.shape[0], n_kv, head_dim))
    return torch.stack(out, dim=1).numpy()


def bos_effect(
    c_intervention: np.ndarray,
    c_baseline: np.ndarray,
    *,
    n_boot: int = 2000,
    level: float = 0.95,
    seed: int = 0,
) -> tuple[float, float, float]:
    """1 − mean C_res(intervention) / mean C_res(baseline) with a paired bootstrap CI over prompts.

    Args:
        c_intervention, c_baseline: ``(prompt,)`` residual-stream component per prompt (same prompts,
            same order), already restricted to the query window of interest.

    Returns:
        ``(estimate, lo, hi)``. Negative = the intervention increases leakage (Table 9: "replace all"
        gives 128 % of baseline, i.e. effect −0.28).
    """
    ci, cb = np.asarray(c_intervention, np.float64), np.asarray(c_baseline, np.float64)
    if ci.shape != cb.shape or ci.ndim != 1:
        raise ValueError(
            f"need two (prompt,) arrays of equal length, got {ci.shape} and {cb.shape}"
        )
    counts = stats.bootstrap_counts(ci.size, n_boot, seed)
    with np.errstate(divide="ignore", invalid="ignore"):
        boot = 1.0 - stats.bootstrap_means(ci, counts) / stats.bootstrap_means(cb, counts)
        est = 1.0 - ci.mean() / cb.mean()
    lo, hi = stats.percentile_ci(boot, level)
    return float(est), float(lo), float(hi)


#: Forward-pass conditions the position-0 stage can run (capture's variant names; scrambled RoPE
#: changes position ids, which position 0 never sees through a causal mask, so it is not offered).
POSITION0_CONDITIONS = tuple(v for v in VARIANTS if v != "scrambled_rope")


@torch.no_grad()
def condition_states(
    model,
    input_ids: torch.Tensor,
    condition: str,
    *,
    seq_ids: np.ndarray | None = None,
    seed: int = 0,
    batch_size: int | None = None,
) -> np.ndarray:
    """:func:`position0_states` under a forward-pass condition (one of :data:`POSITION0_CONDITIONS`).

    ``bidirectional`` sets ``config.is_causal = False`` for the call; ``identity_rope`` replaces the
    rotation by the identity; ``bos_replace_*`` feeds :func:`causalpos.capture.bos_replaced_embeddings`
    (the same replacement, seeded by ``(seed, sequence id)``, as the extraction of that variant).
    The model is restored afterwards.
    """
    from causalpos.models.forward import bos_replaced_embeddings, model_side
    from causalpos.models.variants import parse_variant

    if condition not in POSITION0_CONDITIONS:
        raise ValueError(
            f"position-0 condition {condition!r} not supported; allowed: {list(POSITION0_CONDITIONS)}"
        )
    v = parse_variant(condition)
    seq_ids = np.arange(input_ids.shape[0]) if seq_ids is None else np.asarray(seq_ids)
    with model_side(model, v):
        if v.bos_replace is not None:
            embeds = bos_replaced_embeddings(
                model, input_ids, seq_ids, v.bos_replace, per_prompt=v.per_prompt, seed=seed
            )
            return position0_states(model, inputs_embeds=embeds, batch_size=batch_size)
        return position0_states(model, input_ids, batch_size=batch_size)


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
