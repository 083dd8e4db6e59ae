"""Paper 1's settings, declared once (standard library only).

:class:`SimulationSettings` is everything that determines one simulation's numbers; a rule hands
its job a flat mapping of its fields. Each field names its config key and takes its default from
the schema, as :mod:`causalpos.settings` describes.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

from causalpos.settings import from_params, setting, shared

#: Layer normalisations and logit scalings of the parameter-free decoder.
NORMS = ("l2", "layernorm")
SCALINGS = ("none", "sqrt_d", "d")


@dataclass(frozen=True)
class SimulationSettings:
    """One setting of the parameter-free decoder simulation (paper 1 §2, §4)."""

    alpha: float = setting(key="simulate.settings.*.alpha", doc="input mix α")
    norm: str = setting("l2", "simulate.settings.*.norm", f"layer norm: one of {', '.join(NORMS)}")
    scaling: str = setting(
        "none", "simulate.settings.*.scaling", f"logit scale: one of {', '.join(SCALINGS)}"
    )
    rope: bool = setting(False, "simulate.settings.*.rope", "rotary position on queries and keys")
    causal: bool = setting(
        True, "simulate.settings.*.causal", "the causal mask (False: an encoder)"
    )
    residual: bool = setting(True, "simulate.settings.*.residual", "X <- P Y + X (False: P Y)")
    n_samples: int = setting(100000, "simulate.n_samples", "independent sequences")
    seq_len: int = setting(50, "simulate.seq_len", "positions per sequence")
    dim: int = setting(64, "simulate.dim", "vector dimension (even with RoPE)")
    n_layers: int = setting(4, "simulate.n_layers", "layers")
    n_groups: int = setting(20, "simulate.n_groups", "disjoint groups of sequences (CIs)")
    rope_theta: float = setting(10000.0, "simulate.rope_theta", "rotary base θ")
    seed: int = shared("seed", "the inputs' seed")

    from_params = classmethod(from_params)

    def check(self) -> None:
        """Raise on a value no simulation can use (the message names the key and what to do)."""
        for name, allowed in (("norm", NORMS), ("scaling", SCALINGS)):
            if getattr(self, name) not in allowed:
                raise ValueError(f"simulate: {name}={getattr(self, name)!r}; allowed: {allowed}")
        if not 0.0 <= float(self.alpha) <= 1.0:
            raise ValueError(f"alpha must lie in [0, 1]; got {float(self.alpha)}")
        for name in ("n_samples", "seq_len", "dim", "n_layers", "n_groups", "seed"):
            v, lo = getattr(self, name), 0 if name == "seed" else 1
            if not (hasattr(v, "__index__") and not isinstance(v, bool)) or v < lo:
                raise ValueError(f"simulate: {name} must be an integer >= {lo}; got {v!r}")
        if self.n_groups > self.n_samples:
            raise ValueError(
                f"simulate: n_groups={self.n_groups} exceeds n_samples={self.n_samples}; "
                "lower n_groups"
            )
        if self.rope and self.dim % 2:
            raise ValueError(f"simulate: RoPE needs an even dim; got dim={self.dim}")


@dataclass(frozen=True)
class BootstrapSettings:
    """The bootstrap of paper 1's statistics jobs (rules ``aggregate_sim_stats``,
    ``compare_trained``: the stage functions take these fields as keyword arguments)."""

    confidence: float = shared("stats.confidence", "every interval's confidence level")
    n_boot: int = shared("stats.n_bootstrap", "bootstrap replicates over groups")
    seed: int = shared("seed", "the bootstrap's seed")


@dataclass(frozen=True)
class IndexSettings(BootstrapSettings):
    """The intervals of paper 1's non-relativeness index of a model's maps (rule
    ``aggregate_llm_stats``: :func:`causalpos.paper1.tables.llm_index_table` takes these fields
    as keyword arguments)."""

    first_keys: int = setting(4, "paper1_llm.first_keys", "keys 1..first_keys: the first-keys band")


@dataclass(frozen=True)
class TheorySettings:
    """The closed forms' check against the simulations (rule ``theory_check``)."""

    n_positions: int = setting(50, "theory.n_positions", "positions of the closed-form table")


@dataclass(frozen=True)
class Fig5Settings:
    """Fig. 5 of the pretrained models (rule ``plot_llm_fig5``)."""

    n_layers: int = setting(4, "paper1_llm.fig5_layers", "layers drawn per row (the first ones)")


#: The keys a setting of ``simulate.settings`` may set beside ``alpha``, with their defaults.
SETTING_KEYS: dict[str, Any] = {
    f.name: f.default
    for f in fields(SimulationSettings)
    if (f.metadata["config"] or "").startswith("simulate.settings.") and f.name != "alpha"
}
