"""Forward-pass variants (the ``{variant}`` wildcard): names, compositions, parsing and seeded
draws.

Torch-free, so config resolution can validate variant names without importing a model stack.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from itertools import product
from typing import Any

import numpy as np

#: The dose series planted in the residual stream (paper2.md §2, Controls): ``plant_stream<k>``
#: is the k-th dose of ``leakage.plant_stream.doses`` (:mod:`causalpos.capture.stream`);
#: dose 0 is the run without the atom.
MAX_STREAM_DOSES = 4
STREAM_ATOMS = tuple(f"plant_stream{k}" for k in range(1, MAX_STREAM_DOSES + 1))

#: Each atom -> the fields of :class:`Variant` it sets (the rest keep their defaults).
_ATOMS: dict[str, dict[str, Any]] = {
    "causal": {},
    "bidirectional": {"causal": False},
    "identity_rope": {"rope": "identity"},
    "scrambled_rope": {"rope": "scrambled"},
    **{f"bos_replace_{k}": {"bos_replace": k} for k in ("mean", "zeros", "token", "gaussian")},
    **{
        f"bos_replace_all_{k}": {"bos_replace": k, "per_prompt": True}
        for k in ("token", "gaussian")
    },
    "layer_bidirectional": {"unmasked_scores": True},
    "plant_query": {"plant": "query"},
    "ring": {"causal": False, "ring": True},
    "no_window": {"window": False},
    "global_base": {"global_base": True},
    **{atom: {"stream": k} for k, atom in enumerate(STREAM_ATOMS, 1)},
}
VARIANTS = tuple(_ATOMS)

#: The forward pass whose position-0 states, and value vectors at key 0, paper 2's content
#: probes read (extraction keeps the value vectors for it alone; rule ``position0`` probes it).
POSITION0_PROBE_CONDITION = "causal"

#: The parts of the forward pass a variant changes, in the canonical order of a composition:
#: rotary embedding, position-0 input, residual stream (a planted position term), attention
#: scores (a planted term), attention mask. ``causal`` is the model as trained (no part changed)
#: and composes with nothing.
PARTS = ("rotary", "position 0", "stream", "scores", "mask")
SEPARATOR = "+"


def _part(atom: str) -> str:
    if atom in ("identity_rope", "scrambled_rope", "global_base"):
        return "rotary"
    if atom.startswith("bos_replace_"):
        return "position 0"
    if atom in STREAM_ATOMS:
        return "stream"
    if atom.startswith("plant_"):
        return "scores"
    return "mask"


@dataclass(frozen=True)
class Variant:
    """A forward-pass variant: mask, rotary embedding and position-0 input."""

    name: str
    causal: bool = True
    rope: str = "rope"  # "rope" | "identity" | "scrambled"
    bos_replace: str | None = None  # "mean" | "zeros" | "token" | "gaussian"
    per_prompt: bool = False  # "replace all": a different replacement per prompt
    unmasked_scores: bool = False  # causal forward pass; each layer's maps read without its mask
    plant: str | None = None  # "query": a known query-position term added to one layer's scores
    ring: bool = False  # no mask at all, RoPE offsets taken cyclically (i − j mod T)
    # k of plant_stream<k>: the k-th dose of a position term in the stream (0: none)
    stream: int = 0
    window: bool = True  # False (no_window): every sliding layer gets the full causal mask
    global_base: bool = False  # sliding layers rotated with the global layers' RoPE base

    @property
    def atoms(self) -> tuple[str, ...]:
        """The atoms (names in :data:`VARIANTS`) the variant composes, in canonical order."""
        return tuple(self.name.split(SEPARATOR))


def parse_variant(name: str) -> Variant:
    """Parse a variant name: an atom of :data:`VARIANTS` or a composition of atoms.

    What each atom does: docs/configuration.md and the modules that apply it
    (:mod:`causalpos.capture.ring`, :mod:`causalpos.capture.stream`, :func:`plant_term`,
    :mod:`causalpos.models.forward`); the plants' layer, scale and doses come from the config
    (``leakage.plant``, ``leakage.plant_stream``), not the name. Compositions join at most one
    atom per part with ``+`` in the canonical order of :data:`PARTS`, e.g.
    ``identity_rope+plant_stream2+bidirectional``: one spelling per run (the name is a file
    name), any other a ``ValueError`` that says what to write.
    """
    if not isinstance(name, str) or not name:
        raise ValueError(f"variant name must be a non-empty string, got {name!r}")
    atoms = name.split(SEPARATOR)
    if len(atoms) == 1:
        if name not in _ATOMS:
            raise ValueError(f"variant {name!r} unknown; allowed: {list(VARIANTS)}")
        return Variant(name, **_ATOMS[name])
    for atom in atoms:
        if atom not in VARIANTS:
            raise ValueError(
                f"variant {name!r}: {atom!r} is not a variant; compose atoms of {list(VARIANTS)} "
                f"with {SEPARATOR!r}"
            )
    if "causal" in atoms:
        rest = SEPARATOR.join(a for a in atoms if a != "causal") or "causal"
        raise ValueError(
            f"variant {name!r}: 'causal' (the model as trained) composes with nothing; "
            f"write {rest!r}"
        )
    if dup := sorted({a for a in atoms if atoms.count(a) > 1}):
        raise ValueError(f"variant {name!r} repeats {dup}")
    for part in PARTS:
        same = [a for a in atoms if _part(a) == part]
        if len(same) > 1:
            raise ValueError(
                f"variant {name!r} conflicts: {same} both change the {part}; a composition takes "
                f"at most one atom per part ({', '.join(PARTS)})"
            )
    canonical = sorted(atoms, key=lambda a: PARTS.index(_part(a)))
    if atoms != canonical:
        raise ValueError(
            f"variant {name!r}: write compositions in the canonical order {', '.join(PARTS)}: "
            f"{SEPARATOR.join(canonical)!r}"
        )
    # each atom changes one part, so their fields never collide
    return Variant(name, **{k: v for atom in atoms for k, v in _ATOMS[atom].items()})


def compose(*atoms: str) -> str:
    """The canonical name of the composition of ``atoms`` (any order; ``causal`` drops out)."""
    parts = [a for a in atoms if a != "causal"]
    for atom in parts:
        if atom not in VARIANTS:
            raise ValueError(f"{atom!r} is not a variant atom; allowed: {list(VARIANTS)}")
    parts.sort(key=lambda a: PARTS.index(_part(a)))
    name = SEPARATOR.join(parts) or "causal"
    return parse_variant(name).name  # rejects repeats and conflicts


def variant_names() -> list[str]:
    """Every valid variant name: the atoms (:data:`VARIANTS`, in order), then every composition."""
    per_part = [[None, *(a for a in VARIANTS if a != "causal" and _part(a) == p)] for p in PARTS]
    out = list(VARIANTS)
    for choice in product(*per_part):
        atoms = [a for a in choice if a is not None]
        if len(atoms) >= 2:
            out.append(SEPARATOR.join(atoms))
    return out


def bidirectional_twin(name: str) -> str:
    """``name`` run bidirectionally (same rotary and position-0 input, no causal mask)."""
    return compose(*parse_variant(name).atoms, "bidirectional")


def without_plant(name: str) -> str:
    """``name`` without its planted term: the unplanted twin of a positive control."""
    return compose(*(a for a in parse_variant(name).atoms if _part(a) != "scores"))


def same_pass(a: str, b: str, windows_mask: bool) -> bool:
    """Whether variants ``a`` and ``b`` (different names) run the same forward pass, from their
    meaning alone: they differ only in ``ring`` against ``bidirectional``, with identity RoPE (the
    ring's cyclic offsets change nothing), on a model none of whose windows masks a pair at the
    run's length (``windows_mask`` False; else the bidirectional pass keeps the window and the
    ring drops it)."""
    va, vb = parse_variant(a), parse_variant(b)
    if a == b or windows_mask or va.ring == vb.ring or "identity" != va.rope:
        return False
    unmasked = all(not v.causal and not v.unmasked_scores for v in (va, vb))
    return unmasked and replace(va, name="", ring=False) == replace(vb, name="", ring=False)


def without_stream(name: str) -> str:
    """``name`` without its residual-stream plant: dose 0 of a dose series."""
    return compose(*(a for a in parse_variant(name).atoms if _part(a) != "stream"))


def without_bos_replacement(name: str) -> str:
    """``name`` without its position-0 replacement: the baseline of a BOS intervention."""
    return compose(*(a for a in parse_variant(name).atoms if _part(a) != "position 0"))


#: Paper 2 §3's decomposition under each RoPE condition (their Table 6): condition -> (causal
#: run, bidirectional run of the same weights and rotary embedding).
DECOMPOSITION_CONDITIONS: dict[str, tuple[str, str]] = {
    cond: (run, bidirectional_twin(run))
    for cond, run in (
        ("rope", "causal"),
        ("identity_rope", "identity_rope"),
        ("scrambled_rope", "scrambled_rope"),
    )
}


def _rng(seed: int, seq_id: int | None, stream: int) -> np.random.Generator:
    # Keyed by the global sequence id, so a sequence gets the same draw in any shard or batch;
    # seq_id None: one draw shared by all sequences. ``stream`` separates the uses.
    entropy = [int(seed), stream] if seq_id is None else [int(seed), stream, int(seq_id)]
    return np.random.default_rng(entropy)


def scrambled_position_ids(seq_ids: np.ndarray, seq_len: int, seed: int) -> np.ndarray:
    """``(batch, position)`` int64: a seeded permutation of ``0..seq_len-1`` per sequence."""
    return np.stack([_rng(seed, s, 1).permutation(seq_len) for s in seq_ids]).astype(np.int64)


#: The planted term's shape g (``plant_query``): b_i = a·g(i) on query position i.
PLANT_PROFILE = "log(1+i)"


def plant_term(seq_len: int, scale: float) -> np.ndarray:
    """The planted query term b (float64, (seq_len,)): b_i = ``scale`` · log(1 + i).

    Why this shape: it decays with position as absolute-position effects do, is 0 at i = 0 and
    smooth, so no offset profile absorbs it (a query term is in the span of the offsets only
    where it is constant on the measured rows). Fixed, so the size of the plant is one number.
    """
    if seq_len < 1:
        raise ValueError(f"plant_term: seq_len must be >= 1, got {seq_len}")
    if not np.isfinite(scale):
        raise ValueError(f"plant_term: scale must be finite, got {scale}")
    return float(scale) * np.log1p(np.arange(seq_len, dtype=np.float64))


def plant_layer(layer: int, n_layers: int, key: str = "leakage.plant.layer") -> int:
    """The planted layer as an index in ``0..n_layers-1`` (negative ``layer`` counts from the end,
    -1 the last); a ``ValueError`` naming ``key`` where it is outside the model's layers."""
    if not isinstance(layer, (int, np.integer)) or isinstance(layer, bool):
        raise ValueError(f"{key} must be an integer, got {layer!r}")
    if not -n_layers <= layer < n_layers:
        raise ValueError(
            f"{key} = {layer} is outside the model's {n_layers} layers: give a layer in "
            f"0..{n_layers - 1}, or -1..-{n_layers} counted from the last"
        )
    return int(layer) % n_layers


#: claim 3's factor atoms (paper2.md §3): the window removed, the global RoPE base on the sliding
#: layers. Each is the intervention of one factor; the same weights and prompts.
FACTOR_ATOMS = ("no_window", "global_base")

#: transformers' layer types of a sliding-window and of a global layer.
SLIDING_TYPE, GLOBAL_TYPE = "sliding_attention", "full_attention"

#: Gemma 3's bases where its ``config.json`` names none (transformers' Gemma3TextConfig defaults).
_GEMMA3_BASES = {SLIDING_TYPE: 10_000.0, GLOBAL_TYPE: 1_000_000.0}


def rope_bases(config: Any) -> dict[str, float] | None:
    """Layer type -> its RoPE base (``rope_theta``) for a model whose sliding and global layers
    have a base each (a transformers config or a ``config.json`` dict): transformers'
    ``rope_parameters`` keyed by layer type, or the older ``rope_theta`` (global) and
    ``rope_local_base_freq`` (sliding), Gemma 3's defaults where its config names neither;
    None for a model with one base for every layer."""
    get = config.get if isinstance(config, Mapping) else lambda k, d=None: getattr(config, k, d)
    params = get("rope_parameters")
    if isinstance(params, Mapping) and SLIDING_TYPE in params and GLOBAL_TYPE in params:
        out = {t: params[t].get("rope_theta") for t in (SLIDING_TYPE, GLOBAL_TYPE)}
        if all(isinstance(v, (int, float)) for v in out.values()):
            return {t: float(v) for t, v in out.items()}
        return None
    if get("rope_local_base_freq") is not None:
        theta = get("rope_theta", _GEMMA3_BASES[GLOBAL_TYPE])
        return {SLIDING_TYPE: float(get("rope_local_base_freq")), GLOBAL_TYPE: float(theta)}
    if get("model_type") in ("gemma3", "gemma3_text"):
        return dict(_GEMMA3_BASES)
    return None


def factor_refusal(name: str, config: Any) -> str | None:
    """Why variant ``name`` cannot run on a model of ``config`` (its transformers config or
    ``config.json`` fields), or None: ``no_window`` needs sliding-window layers; ``global_base``
    needs sliding and global layers with two different RoPE bases. Other variants: None."""
    from causalpos.models.layer_kinds import GLOBAL, config_kinds

    atoms = set(parse_variant(name).atoms) & set(FACTOR_ATOMS)
    if not atoms:
        return None
    try:
        kinds = config_kinds(config)
    except (ValueError, TypeError, KeyError) as exc:
        return f"its layer kinds cannot be read ({exc})"
    if all(k == GLOBAL for k in kinds):
        return (
            f"{sorted(atoms)} change(s) the sliding-window layers, and the model has none (every "
            "layer is global): run it on a model with sliding-window layers (Gemma 3) or drop it"
        )
    if "global_base" in atoms:
        if GLOBAL not in kinds:
            return (
                "global_base gives the sliding layers the global layers' RoPE base, and the model "
                "has no global layer: drop global_base for this model"
            )
        bases = rope_bases(config)
        if bases is None or bases[SLIDING_TYPE] == bases[GLOBAL_TYPE]:
            return (
                "global_base gives the sliding layers the global layers' RoPE base, and the "
                f"model's layers share one base ({bases}): there is no second base to swap in; "
                "drop global_base for this model"
            )
    return None
