"""What a figure calls the config's names: model, dataset, forward-pass variant and simulation
setting names -> the words a reader sees, and the figures' indexing convention.

Standard library only: the config resolver reads it (every figure rule gets the display names of
what it draws, ``figures.labels`` overriding them). A name the table does not know is shown as it
is (a user's own model: give it a display name under ``figures.labels``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

#: Models of config.yaml and configs/paper.yaml -> (what the model is, its weights' format or
#: None). A random-init twin (``source: random_init`` with ``like:``) drops the format: its
#: weights are drawn, not quantized.
MODELS: dict[str, tuple[str, str | None]] = {
    "smollm2-135m": ("SmolLM2-135M-Instruct", "Q4_1"),
    "gemma3-270m": ("Gemma-3 270M", "Q4_K_M"),
    "llama-3.1-8b": ("Llama-3.1-8B", None),
    "phi-4": ("Phi-4", None),
    "qwen3-8b": ("Qwen3-8B", None),
    "nope-1.5b": ("NoPE 1.5B", "RoPE off at load"),
    "llama-3.2-1b": ("Llama-3.2-1B", None),
    "llama-3.2-3b": ("Llama-3.2-3B", None),
    "qwen2.5-7b": ("Qwen2.5-7B", None),
    "mistral-7b": ("Mistral-7B-v0.1", None),
}
#: Positional types of the models trained here (``train.variants``' ``positional``).
TRAINED = {
    "rope": "RoPE",
    "nope": "NoPE (causal mask only)",
    "ntk": "NTK-scaled RoPE",
    "swa": "sliding-window RoPE",
}
#: How a model trained here is named (then its positional type).
TRAINED_PREFIX = "trained here: "
#: Datasets of config.yaml and configs/paper.yaml -> what they hold.
DATASETS = {
    "kjv-first256": "KJV Bible, first 256 tokens (BOS)",
    "kjv-chunks128": "KJV Bible, 128-token chunks (no BOS)",
    "kjv-chunks128-bos": "KJV Bible, 128-token chunks (BOS)",
    "random-chunks128-bos": "random tokens, 128 (BOS)",
    "kjv-chunks640-bos": "KJV Bible, 640-token chunks (BOS)",
    "kjv-heldout128": "KJV Bible, held-out 128-token chunks",
    "fineweb-first1024": "FineWeb-Edu, first 1,024 tokens",
    "fineweb-first50": "FineWeb-Edu, first 50 tokens",
    "wiki-chunks256": "Wikipedia, 256-token chunks",
    "random-chunks256": "random tokens, 256",
    "kjv-chunks512": "KJV Bible, held-out 512-token chunks",
}
#: Atoms of a forward-pass variant (:data:`causalpos.models.variants.VARIANTS`) -> its words; a
#: composition joins its atoms' words with " + ".
VARIANT_ATOMS = {
    "causal": "causal (as trained)",
    "bidirectional": "bidirectional",
    "identity_rope": "identity RoPE",
    "scrambled_rope": "scrambled RoPE",
    "bos_replace_mean": "BOS → mean",
    "bos_replace_zeros": "BOS → zeros",
    "bos_replace_token": "BOS → token",
    "bos_replace_gaussian": "BOS → Gaussian",
    "bos_replace_all_token": "BOS → a token per prompt",
    "bos_replace_all_gaussian": "BOS → Gaussian per prompt",
    "layer_bidirectional": "each layer unmasked",
    "plant_query": "planted query term",
    "ring": "ring (no mask, cyclic offsets)",
}
#: The figures' indexing convention (the stores'): layers and positions count from 0.
INDEXING = "layers and positions count from 0 (layer 0 = first block, position 0 = first token)"
LAYER_AXIS = "layer (0 = first block)"
POSITION_AXIS = "position (0 = first token)"
#: Position 0's residual stream by depth: 0 is the embedding, l the output of l blocks.
DEPTH_AXIS = "blocks applied (0 = embedding)"


def model_name(
    slug: str,
    *,
    like: str | None = None,
    positional: str | None = None,
    labels: Mapping[str, str] | None = None,
) -> str:
    """A model's display name: ``labels[slug]`` (``figures.labels``) where given; a random-init
    twin (``like``: the model it copies) "<model>, random init"; a model trained here
    (``trained-<variant>``, ``positional`` its type) "trained here: <type>", its init twin
    (``trained-<variant>-init``) with ", init twin"; else the table's, else ``slug``."""
    labels = labels or {}
    if slug in labels:
        return labels[slug]
    if like is not None:
        base = labels.get(like) or MODELS.get(like, (like, None))[0]
        return f"{base}, random init"
    if slug.startswith("trained-"):
        variant = slug.removeprefix("trained-")
        init = variant.endswith("-init")
        variant = variant.removesuffix("-init")
        kind = TRAINED.get(positional or variant, positional or variant)
        if positional and variant != positional:
            kind += f" ({variant})"
        return f"{TRAINED_PREFIX}{kind}" + (", init twin" if init else "")
    name, weights = MODELS.get(slug, (slug, None))
    return f"{name} ({weights})" if weights else name


def dataset_name(slug: str, labels: Mapping[str, str] | None = None) -> str:
    """A dataset's display name: ``labels[slug]``, else the table's, else ``slug``."""
    return (labels or {}).get(slug) or DATASETS.get(slug, slug)


def variant_name(name: str) -> str:
    """A forward-pass variant's words: each atom's (:data:`VARIANT_ATOMS`; ``plant_stream<k>``:
    "stream plant, dose k"), joined by " + "; "causal (as trained)" alone, "causal" in a
    composition."""
    atoms = name.split("+")
    words = []
    for a in atoms:
        if a.startswith("plant_stream") and a[len("plant_stream") :].isdigit():
            words.append(f"stream plant, dose {a[len('plant_stream') :]}")
        elif a == "causal" and len(atoms) > 1:
            words.append("causal")
        else:
            words.append(VARIANT_ATOMS.get(a, a))
    return " + ".join(words)


def named(slug: str, names: Mapping[str, str] | None) -> str:
    """``names[slug]`` (the display names a figure rule is given), else ``slug``."""
    return (names or {}).get(slug, slug)


def pair_name(pair: str, names: Mapping[str, str] | None) -> tuple[str, str]:
    """(model, dataset) display names of a ``"model/dataset"`` label."""
    model, _, dataset = pair.partition("/")
    return named(model, names), named(dataset, names)


def common_part(values: Iterable[str]) -> str | None:
    """The one value of ``values`` where they all agree, else None."""
    distinct = list(dict.fromkeys(values))
    return distinct[0] if len(distinct) == 1 else None


def setting_name(attrs: Mapping) -> str:
    """A simulation setting's words from its store's attrs: α, norm, scaling, RoPE and mask
    ("α = 0.5, LayerNorm, QKᵀ/√d, RoPE θ=10000, bidirectional")."""
    scaling = attrs.get("scaling", "none")
    parts = [
        f"α = {float(attrs.get('alpha', float('nan'))):g}",
        "L2" if attrs.get("norm", "l2") == "l2" else "LayerNorm",
        {"none": "QKᵀ", "sqrt_d": "QKᵀ/√d", "d": "QKᵀ/d"}.get(scaling, str(scaling)),
        f"RoPE θ={float(attrs.get('rope_theta', 10000.0)):g}" if attrs.get("rope") else "no PE",
        "causal" if attrs.get("causal", True) else "bidirectional",
    ]
    if not attrs.get("residual", True):
        parts.append("no residual")
    return ", ".join(parts)
