"""Captured scores of a model already in memory (``causalpos.capture``), and what the other
notebook functions share: the prompts as a token dataset, the variants as extraction specs, and
the extraction itself, run by the stage code of rule ``extract_scores``."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import xarray as xr

    from causalpos.capture.settings import ExtractSettings

#: The runs :func:`capture` and paper 2's :func:`causalpos.api.paper2.paper2_leakage` read by
#: default: the model as trained and the ring (every mask removed, RoPE offsets taken
#: cyclically: the ablation of paper 2's decomposition whose own edges create no position).
DEFAULT_VARIANTS = ("causal", "ring")

#: What a variant's spec may give beside its name (its planted term or stream dose).
SPEC_KEYS = ("plant", "stream")


def capture(
    model,
    tokens,
    variants: str | Sequence[str] | Mapping[str, Mapping] = DEFAULT_VARIANTS,
    layers: Sequence[int] | None = None,
    *,
    per_sequence: bool = False,
    extract: ExtractSettings | None = None,
) -> xr.Dataset:
    """Every layer's pre-softmax attention scores of ``model`` on ``tokens`` under each variant.

    Args:
        model: a transformers causal LM in eval mode, of any architecture the capture supports
            (Llama, Qwen2/3, Phi-3, Mistral, Gemma-3, ...), on any device and dtype; scores
            are captured in float32 inside the model's own forward pass.
        tokens: ``(sequence, position)`` integer ids (numpy, torch, nested lists) or a token
            dataset (:func:`causalpos.sampling.tokenize_texts`, or a pipeline's data store).
        variants: forward passes by name (``causal``, ``ring``, ``bidirectional``,
            ``identity_rope+ring``, ...: :mod:`causalpos.models.variants`), or a mapping name ->
            ``{"plant": {"layer", "scale"}}`` / ``{"stream": {"layer", "dose", "profile"}}``
            for a planted variant.
        layers: the layers returned (default every layer; negative counts from the last).
        per_sequence: also return every prompt's maps (``score_maps``; host memory
            ``n_sequences × layers × heads × T²`` float32, 4 bytes a cell).
        extract: the batch size (or ``"auto"``), groups and seed
            (:class:`~causalpos.capture.settings.ExtractSettings`; its dtype and device are the
            loaded model's).

    Returns:
        An ``xarray.Dataset`` with a ``variant`` dimension: ``score_mean`` (variant, layer,
        head, query, key), the mean map over the prompts; ``score_m2`` the sum of squared
        deviations (variance = ``score_m2 / (n_sequences - 1)``); ``n_sequences`` (variant);
        with ``per_sequence``, ``score_maps`` (variant, sequence, layer, head, query, key). Maps
        are float32 as the pipeline stores them (``results/scores/``), NaN where the mask hides
        a key; coordinate ``layer_kind`` (each layer's mask: global, sliding window); attrs the
        stores' (model, architecture, dtype, seq_len, ...).
    """
    import numpy as np
    import xarray as xr

    data = token_dataset(tokens)
    n_layers = int(model.config.num_hidden_layers)
    keep = list(range(n_layers)) if layers is None else checked_layers(layers, n_layers)
    specs = variant_specs(variants, ["moments", "maps"] if per_sequence else ["moments"])
    if per_sequence:
        for spec in specs.values():
            spec["layers"] = keep
    runs = run_variants(model, data, specs, extract)
    parts = []
    for ds in runs.values():
        ds = ds.sel(layer=keep)
        if "score_maps" in ds:
            maps = ds["score_maps"].rename(map_layer="layer")
            ds = ds.drop_vars(["score_maps", "map_layer"]).assign(score_maps=maps)
        parts.append(ds)
    names = list(runs)
    out = xr.concat(
        parts,
        dim=xr.DataArray(np.asarray(names), dims="variant", name="variant"),
        coords="minimal",
        compat="override",
        combine_attrs="drop_conflicts",
    )
    out.attrs["variants"] = names
    return out


def checked_layers(layers: Sequence[int], n_layers: int) -> list[int]:
    """``layers`` as sorted indices 0..n_layers-1 (negative counts from the last); a layer the
    model does not have raises, naming the range."""
    out = set()
    for layer in layers:
        k = int(layer)
        if not -n_layers <= k < n_layers:
            raise ValueError(
                f"layers: {k} is not a layer of the model; give 0..{n_layers - 1}, or "
                f"-1..-{n_layers} counted from the last"
            )
        out.add(k % n_layers)
    if not out:
        raise ValueError("layers: give at least one layer (None: every layer)")
    return sorted(out)


def token_dataset(tokens) -> xr.Dataset:
    """The prompts as a token dataset (what rule ``sample_sequences`` writes): a dataset with
    ``tokens`` as given, or an id array wrapped as one. For an array, position 0 is recorded as
    the data store records it (``bos``: every prompt starts with the same token, ``bos_id``);
    the prompts' mode is unknown (no negative control reads them: paper 2's need chunks at
    random offsets, ``tokenize_texts(..., mode="chunks")``)."""
    import numpy as np
    import xarray as xr

    if isinstance(tokens, xr.Dataset):
        if "tokens" not in tokens or tokens["tokens"].dims != ("sequence", "position"):
            raise ValueError(
                "tokens: a dataset must hold `tokens` (sequence, position), as "
                "causalpos.tokenize_texts and the pipeline's data stores do"
            )
        return tokens
    if hasattr(tokens, "detach"):  # a torch tensor
        tokens = tokens.detach().cpu().numpy()
    arr = np.asarray(tokens)
    if arr.ndim != 2 or arr.shape[0] == 0 or not np.issubdtype(arr.dtype, np.integer):
        raise ValueError(
            f"tokens: give a non-empty (sequence, position) array of token ids, got shape "
            f"{arr.shape} dtype {arr.dtype} (texts: causalpos.tokenize_texts(tokenizer, texts, "
            "seq_len))"
        )
    fixed = bool((arr[:, 0] == arr[0, 0]).all())
    return xr.Dataset(
        {"tokens": (("sequence", "position"), arr.astype(np.int64))},
        coords={"sequence": np.arange(arr.shape[0]), "position": np.arange(arr.shape[1])},
        attrs={"bos": fixed, "bos_id": int(arr[0, 0]) if fixed else -1},
    )


def variant_specs(
    variants: str | Sequence[str] | Mapping[str, Mapping], reducers: Sequence[str]
) -> dict[str, dict[str, Any]]:
    """Extraction specs (:func:`causalpos.stages.extract.extract_scores`) of ``variants``, each
    with ``reducers``: names, or name -> its ``plant`` / ``stream`` settings. A variant named
    twice or a key that is no spec's raises."""
    if isinstance(variants, str):
        variants = [variants]
    if isinstance(variants, Mapping):
        items = [(str(k), dict(v or {})) for k, v in variants.items()]
    else:
        items = [(str(v), {}) for v in variants]
    names = [name for name, _ in items]
    if not names or len(set(names)) != len(names):
        raise ValueError(f"variants: give each variant once, at least one; got {names}")
    out = {}
    for name, extra in items:
        unknown = sorted(set(extra) - set(SPEC_KEYS))
        if unknown:
            raise ValueError(
                f"variants[{name!r}]: unknown key(s) {unknown}; a variant's spec may give "
                f"{list(SPEC_KEYS)} (a planted term {{'layer', 'scale'}}, a stream dose "
                "{'layer', 'dose', 'profile'})"
            )
        out[name] = {"reducers": list(reducers), **extra}
    return out


def run_variants(
    model, data: xr.Dataset, specs: Mapping[str, Mapping], extract: ExtractSettings | None
) -> dict[str, xr.Dataset]:
    """Variant -> its result as the pipeline's final store holds it: the stage code of rule
    ``extract_scores`` (:func:`~causalpos.stages.extract.extract_variants`) on the loaded
    ``model``, each result as :func:`~causalpos.stages.extract.as_merged` writes it (float32
    maps, checked for NaN from the model)."""
    from causalpos.capture.settings import ExtractSettings
    from causalpos.stages.extract import as_merged, check_variant_specs, extract_variants

    if getattr(model, "training", False):
        raise ValueError(
            "the model is in training mode (dropout would change every score): call "
            "model.eval() first"
        )
    check_variant_specs(specs)
    settings = extract or ExtractSettings()
    name = getattr(model.config, "name_or_path", "") or model.config.model_type
    what = f"causalpos API: model {name}"
    return {
        variant: as_merged(ds, f"{what}, variant {variant!r}")
        for variant, ds in extract_variants(model, data, specs, settings, what=what)
    }
