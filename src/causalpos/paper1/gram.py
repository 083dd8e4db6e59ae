"""Paper 1 §4.2 (Figs. 3 and 8): how a trained decoder's first layers shape the causal-mask pattern.

Fig. 3 shows, at each step of layer 1 of a Llama-family model, the sample-mean Gram matrix ``Z Zᵀ``
of the intermediate ``Z`` (score panels also averaged over heads). Layer 1 is recomputed by hand
from ``hidden_states[0]`` with the model's own modules' weights, and the result must equal
``hidden_states[1]`` (:func:`compute_gram_panels` raises if not), so a panel can never describe a
computation the model does not perform.

Numerics: every matmul of the analysis runs in float32 (weights upcast from bf16 where the model
runs in bf16); sums over samples and heads are float64. Positions are 0-indexed; query on rows,
key on columns; the upper triangle (and, for score panels, every masked cell) is NaN.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
import xarray as xr
from torch import nn

from causalpos.paper1.nearby import NEARBY_PANELS, nearby_index

PANELS: tuple[tuple[str, str, str], ...] = (
    (
        "a",
        "Y(1) = input_layernorm_1(X(0))",
        "Gram of the layer-1 LayerNorm output of the embeddings",
    ),
    (
        "b",
        "Q(1) K(1)^T / sqrt(d) per head",
        "layer-1 pre-softmax scores with the mask, mean over heads",
    ),
    ("c", "A(1) V(1) (heads concatenated)", "attention output before o_proj"),
    ("d", "A(1) V(1) W_O", "attention output after o_proj"),
    ("e", "O = A V W_O + X(0)", "after the attention residual"),
    ("f", "post_attention_layernorm_1(O)", "LayerNorm before the MLP"),
    ("g", "X(1) = MLP(LN(O)) + O", "layer-1 output (= hidden_states[1])"),
    ("h", "Y(2) = input_layernorm_2(X(1))", "layer-2 LayerNorm output"),
    (
        "i",
        "Q(2) K(2)^T / sqrt(d) per head",
        "layer-2 pre-softmax scores with the mask, mean over heads",
    ),
)


def _linear(mod: nn.Linear, x: torch.Tensor) -> torch.Tensor:
    return F.linear(x, mod.weight.float(), None if mod.bias is None else mod.bias.float())


def _rms(norm: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """RMSNorm as LlamaRMSNorm computes it (same operation order), in float32."""
    eps = getattr(norm, "variance_epsilon", None)
    if eps is None:
        eps = norm.eps
    return norm.weight.float() * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps))


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


@dataclass(frozen=True)
class _Geometry:
    n_heads: int
    n_kv_heads: int
    head_dim: int
    scaling: float


def _geometry(attn: nn.Module, config) -> _Geometry:
    head_dim = int(
        getattr(attn, "head_dim", None) or config.hidden_size // config.num_attention_heads
    )
    n_heads = attn.q_proj.out_features // head_dim
    n_kv = attn.k_proj.out_features // head_dim
    return _Geometry(n_heads, n_kv, head_dim, float(getattr(attn, "scaling", head_dim**-0.5)))


def _layer_window(config, layer: int) -> int | None:
    """Sliding window of ``layer`` (None = full causal attention), as transformers decides it."""
    types = getattr(config, "layer_types", None)
    window = getattr(config, "sliding_window", None)
    if types:
        return window if types[layer] == "sliding_attention" else None
    return window


def allowed_mask(n: int, window: int | None, device: torch.device | None = None) -> torch.Tensor:
    """``(query, key)`` bool: key j is visible from query i (j ≤ i, and i − j < window if windowed)."""
    i = torch.arange(n, device=device)[:, None]
    j = torch.arange(n, device=device)[None, :]
    ok = j <= i
    if window is not None:
        ok &= (i - j) < window
    return ok


def _rotary(model: nn.Module, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The model's own cos/sin ``(batch, seq, head_dim)`` in float32 (identity for NoPE models)."""
    pos = torch.arange(x.shape[1], device=x.device)[None].expand(x.shape[0], -1)
    cos, sin = _inner(model).rotary_emb(x.float(), pos)
    return cos.float(), sin.float()


def _inner(model: nn.Module) -> nn.Module:
    inner = getattr(model, "model", None)
    if inner is None or not hasattr(inner, "layers") or not hasattr(inner, "rotary_emb"):
        raise TypeError(
            f"{type(model).__name__} is not a Llama-family causal LM (needs .model.layers and "
            ".model.rotary_emb): Fig. 3/8 analyses support Llama, Mistral, Qwen2/3-style decoders"
        )
    return inner


def rope_is_identity(model: nn.Module) -> bool:
    """True when the model's rotary application is the identity (cos ≡ 1, sin ≡ 0) — a NoPE model."""
    probe = torch.zeros(1, 64, model.config.hidden_size, device=next(model.parameters()).device)
    cos, sin = _rotary(model, probe)
    return bool(torch.all(cos == 1) and torch.all(sin == 0))


def _check_nope_loaded(model: nn.Module) -> None:
    if getattr(model.config, "causalpos_rope", None) == "none" and not rope_is_identity(model):
        raise ValueError(
            "config says causalpos_rope='none' (a NoPE model) but the loaded model still rotates q/k: "
            "load it with causalpos.models.load.load_model (or causalpos.training.architecture.apply_causalpos_attributes)"
        )


def _qk(
    layer: nn.Module, y: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, g: _Geometry
) -> tuple[torch.Tensor, torch.Tensor]:
    """Post-rotary q ``(batch, heads, seq, d)`` and k repeated for GQA ``(batch, heads, seq, d)``."""
    attn = layer.self_attn
    b, t, _ = y.shape
    q = _linear(attn.q_proj, y).view(b, t, g.n_heads, g.head_dim)
    k = _linear(attn.k_proj, y).view(b, t, g.n_kv_heads, g.head_dim)
    # Qwen3-style per-head q/k RMSNorm comes before the rotation, as in its modeling code.
    if getattr(attn, "q_norm", None) is not None:
        q = _rms(attn.q_norm, q)
    if getattr(attn, "k_norm", None) is not None:
        k = _rms(attn.k_norm, k)
    q, k = q.transpose(1, 2), k.transpose(1, 2)
    c, s = cos[:, None], sin[:, None]
    q = q * c + _rotate_half(q) * s
    k = k * c + _rotate_half(k) * s
    # repeat_kv convention: query head h reads kv head h // (heads / kv_heads).
    k = k.repeat_interleave(g.n_heads // g.n_kv_heads, dim=1)
    return q, k


def _scores(q: torch.Tensor, k: torch.Tensor, g: _Geometry) -> torch.Tensor:
    """Pre-softmax scores ``(batch, heads, query, key)`` with the model's own scaling, float32."""
    return (q @ k.transpose(-1, -2)) * g.scaling


def _masked(s: torch.Tensor, config, layer: int) -> torch.Tensor:
    """Scores ``s`` with the cells ``layer`` does not attend set to −inf."""
    return s.masked_fill(
        ~allowed_mask(s.shape[-1], _layer_window(config, layer), s.device), -math.inf
    )


def _score_sum(s: torch.Tensor) -> torch.Tensor:
    """Sum over batch and heads in float64, masked (−inf) cells as 0 (NaN at the end)."""
    return torch.nan_to_num(s, neginf=0.0).double().sum((0, 1))


@dataclass
class Layer1Trace:
    """Every intermediate of a hand-recomputed layer 1, float32, ``(batch, seq, ·)``."""

    y1: torch.Tensor  # (batch, seq, hidden)
    scores1: torch.Tensor  # (batch, heads, seq, seq), masked cells -inf
    av: torch.Tensor  # (batch, seq, heads * head_dim)
    avo: torch.Tensor  # (batch, seq, hidden)
    o: torch.Tensor  # (batch, seq, hidden)
    ln_o: torch.Tensor  # (batch, seq, hidden)
    x1: torch.Tensor  # (batch, seq, hidden)
    y2: torch.Tensor  # (batch, seq, hidden)
    scores2: torch.Tensor  # (batch, heads, seq, seq), masked cells -inf


@torch.no_grad()
def trace_layer1(model: nn.Module, x0: torch.Tensor) -> Layer1Trace:
    """Recompute decoder layer 1 (index 0) and layer 2's scores from embeddings ``x0`` ``(batch,
    seq, hidden)``, float32 throughout; masked score cells are −inf."""
    inner = _inner(model)
    if len(inner.layers) < 2:
        raise ValueError(
            "Fig. 3 needs a model with at least 2 layers (panel (i) is layer 2's scores)"
        )
    cfg = model.config
    l1, l2 = inner.layers[0], inner.layers[1]
    g1, g2 = _geometry(l1.self_attn, cfg), _geometry(l2.self_attn, cfg)
    x0 = x0.float()
    b, t, _ = x0.shape
    cos, sin = _rotary(model, x0)

    y1 = _rms(l1.input_layernorm, x0)
    q, k = _qk(l1, y1, cos, sin, g1)
    s1 = _masked(_scores(q, k, g1), cfg, 0)
    v = _linear(l1.self_attn.v_proj, y1).view(b, t, g1.n_kv_heads, g1.head_dim).transpose(1, 2)
    v = v.repeat_interleave(g1.n_heads // g1.n_kv_heads, dim=1)
    p = torch.softmax(s1, dim=-1)
    av = (p @ v).transpose(1, 2).reshape(b, t, g1.n_heads * g1.head_dim)
    avo = _linear(l1.self_attn.o_proj, av)
    o = avo + x0
    ln_o = _rms(l1.post_attention_layernorm, o)
    mlp = l1.mlp
    gated = mlp.act_fn(_linear(mlp.gate_proj, ln_o)) * _linear(mlp.up_proj, ln_o)
    x1 = _linear(mlp.down_proj, gated) + o

    y2 = _rms(l2.input_layernorm, x1)
    q2, k2 = _qk(l2, y2, cos, sin, g2)
    s2 = _masked(_scores(q2, k2, g2), cfg, 1)
    return Layer1Trace(y1, s1, av, avo, o, ln_o, x1, y2, s2)


def x1_tolerance(dtype: torch.dtype) -> float:
    """Allowed max |recomputed X(1) − hidden_states[1]| relative to max |hidden_states[1]|.

    float32: sdpa and this eager recomputation differ by summation order only (≤ 3e-7 measured);
    1e-5 still catches a missing rotary, mask or norm (errors of order 1). bf16/fp16 round every
    op to 8/11 bits.
    """
    return 1e-5 if dtype == torch.float32 else (3e-2 if dtype == torch.bfloat16 else 5e-3)


def _hidden_states(
    model: nn.Module, tokens: torch.Tensor, batch_size: int
) -> Iterator[tuple[torch.Tensor, ...]]:
    """The model's ``hidden_states`` on each batch of ``batch_size`` sequences of ``tokens``."""
    if tokens.ndim != 2:
        raise ValueError(
            f"tokens must be (n_samples, seq) integer ids, got shape {tuple(tokens.shape)}"
        )
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1 (got {batch_size})")
    device = next(model.parameters()).device
    for i in range(0, tokens.shape[0], batch_size):
        chunk = tokens[i : i + batch_size].to(device)
        yield model(input_ids=chunk, output_hidden_states=True, use_cache=False).hidden_states


def _gram(z: torch.Tensor) -> torch.Tensor:
    """Per-sample Gram ``Z Zᵀ`` ``(batch, seq, seq)`` float32, summed over the batch in float64."""
    return (z @ z.transpose(-1, -2)).double().sum(0)


def _as_tokens(tokens) -> torch.Tensor:
    t = torch.as_tensor(np.asarray(tokens) if not isinstance(tokens, torch.Tensor) else tokens)
    if t.dtype not in (torch.int64, torch.int32):
        raise ValueError(f"tokens must be integer token ids, got dtype {t.dtype}")
    return t.long()


@torch.no_grad()
def compute_gram_panels(
    model: nn.Module, tokens, *, batch_size: int = 32, check: bool = True
) -> xr.Dataset:
    """Paper 1 Fig. 3 panels (a)–(i) of a Llama-family model (NoPE by default in the paper).

    ``tokens``: ``(n_samples, seq)`` int token ids. Each panel is the sample mean of one
    intermediate's Gram ``Z Zᵀ``; score panels (b), (i) are ``Q Kᵀ · scaling`` averaged over
    samples and heads, masked cells NaN. Returns ``gram (panel, query, key)`` float32 and
    ``nearby (nearby_panel, sample)`` (:func:`nearby_index` of panels (f) and (i) per sample).
    With ``check``, raises ``AssertionError`` when the recomputed X(1) differs from
    ``hidden_states[1]`` by more than :func:`x1_tolerance` of its magnitude.
    """
    tokens = _as_tokens(tokens)
    _check_nope_loaded(model)
    model_dtype = next(model.parameters()).dtype
    tol = x1_tolerance(model_dtype)
    n, t = tokens.shape
    sums = torch.zeros(len(PANELS), t, t, dtype=torch.float64)
    worst = 0.0
    heads = (1, 1)
    nearby = []
    for hs in _hidden_states(model, tokens, batch_size):
        tr = trace_layer1(model, hs[0])
        ref = hs[1].float()
        err = float((tr.x1 - ref).abs().max() / ref.abs().max().clamp_min(1e-30))
        worst = max(worst, err)
        if check and err > tol:
            raise AssertionError(
                f"recomputed layer-1 output differs from hidden_states[1] by {err:.3g} (relative max-abs; "
                f"tolerance {tol:.1g} for {model_dtype}): the model is not a plain "
                "Llama-family decoder (extra scaling, norm or rotary?) or a NoPE model was loaded with RoPE"
            )
        heads = (tr.scores1.shape[1], tr.scores2.shape[1])
        grams = [_gram(z) for z in (tr.av, tr.avo, tr.o, tr.ln_o, tr.x1, tr.y2)]
        grams = [_gram(tr.y1), _score_sum(tr.scores1), *grams, _score_sum(tr.scores2)]
        for i, gsum in enumerate(grams):
            sums[i] += gsum.cpu()
        f_maps = (tr.ln_o @ tr.ln_o.transpose(-1, -2)).double().cpu().numpy()
        i_maps = tr.scores2.double().mean(1).cpu().numpy()  # head mean; masked cells -inf
        nearby.append(np.stack([nearby_index(f_maps), nearby_index(i_maps)], 0))
    counts = torch.full((len(PANELS), 1, 1), float(n), dtype=torch.float64)
    counts[1] *= heads[0]
    counts[8] *= heads[1]
    mean = (sums / counts).numpy()
    lower = np.tril(np.ones((t, t), dtype=bool))
    mean[:, ~lower] = np.nan
    for p, layer in ((1, 0), (8, 1)):
        mean[p][~allowed_mask(t, _layer_window(model.config, layer)).numpy()] = np.nan
    ds = xr.Dataset(
        {
            "gram": (("panel", "query", "key"), mean.astype(np.float32)),
            "nearby": (("nearby_panel", "sample"), np.concatenate(nearby, axis=1)),
        },
        coords={
            "nearby_panel": list(NEARBY_PANELS),
            "panel": [p[0] for p in PANELS],
            "title": ("panel", [p[1] for p in PANELS]),
            "description": ("panel", [p[2] for p in PANELS]),
            "query": np.arange(t),
            "key": np.arange(t),
        },
        attrs={
            "n_samples": n,
            "seq_len": t,
            "rope_identity": rope_is_identity(model),
            "x1_max_rel_error": worst,
            "x1_tolerance": tol,
            "bos": bool((tokens[:, 0] == tokens[0, 0]).all()),
            "dtype": str(model_dtype).replace("torch.", ""),
            "compute": "float32 matmuls, float64 sums",
            "positions": "0-indexed",
        },
    )
    return ds


@torch.no_grad()
def fig8_scores(model: nn.Module, tokens, *, batch_size: int = 32) -> xr.Dataset:
    """Paper 1 Fig. 8: per layer, raw pre-softmax ``Q Kᵀ · scaling`` with the mask, mean over samples and heads.

    Post-rotary q, k are recomputed from ``hidden_states[l]``, one batch at a time. Returns
    ``score (layer, query, key)`` float32 (head mean) and ``score_head (layer, head, query, key)``;
    masked cells NaN.
    """
    tokens = _as_tokens(tokens)
    _check_nope_loaded(model)
    inner = _inner(model)
    cfg = model.config
    n, t = tokens.shape
    n_layers = len(inner.layers)
    sums: torch.Tensor | None = None
    for hs in _hidden_states(model, tokens, batch_size):
        cos, sin = _rotary(model, hs[0])
        for li, layer in enumerate(inner.layers):
            g = _geometry(layer.self_attn, cfg)
            q, k = _qk(layer, _rms(layer.input_layernorm, hs[li].float()), cos, sin, g)
            s = _scores(q, k, g).double().sum(0).cpu()
            if sums is None:
                sums = torch.zeros(n_layers, s.shape[0], t, t, dtype=torch.float64)
            sums[li] += s
    assert sums is not None
    head_mean = (sums / n).numpy()
    for li in range(n_layers):
        head_mean[li][:, ~allowed_mask(t, _layer_window(cfg, li)).numpy()] = np.nan
    ds = xr.Dataset(
        {
            "score": (("layer", "query", "key"), head_mean.mean(1).astype(np.float32)),
            "score_head": (("layer", "head", "query", "key"), head_mean.astype(np.float32)),
        },
        coords={
            "layer": np.arange(n_layers),
            "head": np.arange(head_mean.shape[1]),
            "query": np.arange(t),
            "key": np.arange(t),
        },
        attrs={
            "n_samples": n,
            "seq_len": t,
            "rope_identity": rope_is_identity(model),
            "compute": "float32 matmuls, float64 sums",
            "positions": "0-indexed",
            "layers": "0-indexed",
        },
    )
    return ds


def gram_store(
    model: nn.Module, tokens, *, batch_size: int = 32, attrs: dict | None = None
) -> xr.Dataset:
    """Fig. 3 panels and Fig. 8 scores in one dataset (``gram`` and ``score``/``score_head``) for ``gram/{model}.zarr``."""
    panels = compute_gram_panels(model, tokens, batch_size=batch_size)
    scores = fig8_scores(model, tokens, batch_size=batch_size)
    ds = xr.merge([panels, scores], combine_attrs="override")
    ds.attrs = {**scores.attrs, **panels.attrs, **(attrs or {})}
    return ds
