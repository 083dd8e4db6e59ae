"""What the config's runs let the scorecard decide, said before any job: a decomposition without the
ring run, paper 2 on document openings (both: warnings of rows that will read "not run"), and a
random-init twin whose weights are its model's by construction (refused). Pure."""

from __future__ import annotations

from causalpos.config.common import ConfigError, Section
from causalpos.models.variants import DECOMPOSITION_CONDITIONS
from causalpos.paper2.labels import ring_twin

#: The prompts paper 2's claims 1 and 2 and its negative controls need (the data store's
#: ``mode``; the scorecard's ``causalpos.scorecard.rows.openings``).
CHUNKS = "chunks"


def missing_rings(variants: list[str]) -> dict[str, str]:
    """The ring runs a (model, dataset) with ``variants`` lacks for the decompositions it runs,
    each with the bidirectional run that asks for it: for each condition
    (:data:`DECOMPOSITION_CONDITIONS`) whose causal run and paper 2's bidirectional ablation are
    both there, its causal run's :func:`~causalpos.paper2.labels.ring_twin` where absent."""
    have = set(variants)
    return {
        ring_twin(c): b
        for c, b in DECOMPOSITION_CONDITIONS.values()
        if c in have and b in have and ring_twin(c) not in have
    }


class ClaimsSection(Section):
    """Config-time notes on what the scorecard can decide from the configured runs."""

    def decomposition_warnings(self) -> list[str]:
        """One warning per experiment that decomposes a (model, dataset) without the ring run of
        a condition it runs bidirectionally (:func:`missing_rings` of the pair's variants, the
        union over its experiments): those components read "not run" in the scorecard."""
        pairs = self.leakage_pairs()
        out = []
        for name, exp in self.leakage_experiments().items():
            missing: dict[str, dict[str, list[str]]] = {}
            for d in exp["datasets"]:
                for m in exp["models"]:
                    for ring, b in missing_rings(pairs[(m, d)]).items():
                        if b in exp["variants"]:
                            missing.setdefault(ring, {}).setdefault(d, []).append(m)
            for ring, by in missing.items():
                where = "; ".join(f"{', '.join(ms)} on {d}" for d, ms in by.items())
                out.append(
                    f"leakage.experiments.{name}: variants {exp['variants']} decompose "
                    f"{where} without the {ring!r} run, the ablation paper 2's "
                    "decomposition reads its residual-stream component on (no mask at all, "
                    "cyclic RoPE offsets); claim 2's components and its causal-mask row, "
                    "claims 3, 4's artefact-free share, 10 and Table 6 on them will read "
                    f"'not run: {ring}'. Fix: add {ring!r} to leakage.experiments.{name}.variants"
                )
        return out

    def openings_warnings(self) -> list[str]:
        """One warning per dataset that a paper-2 experiment runs whose prompts are not chunks
        at random offsets (``mode`` other than ``chunks``): their content depends on position,
        so claims 1 and 2 and the negative controls read "not run" in the scorecard."""
        users: dict[str, list[str]] = {}
        for name, exp in self.leakage_experiments().items():
            for d in exp["datasets"]:
                if self.dataset_spec(d)["mode"] != CHUNKS:
                    users.setdefault(d, []).append(name)
        return [
            f"datasets.{d}: mode {self.dataset_spec(d)['mode']!r} (document openings) in paper "
            f"2's leakage.experiments {', '.join(names)}: the content of document openings "
            "depends on position, so the expected map reads the data's own position and a "
            "position-free run is no negative control there; claims 1 and 2 and the negative "
            "controls will read 'not run' (the other paper-2 rows are measured). Fix: give "
            f"those experiments a dataset with mode: {CHUNKS} (chunks at random offsets)"
            for d, names in users.items()
        ]

    def claims_warnings(self) -> list[str]:
        """Every warning of this section: the decompositions' and the openings'."""
        return self.decomposition_warnings() + self.openings_warnings()

    def same_weights_as(self, name: str) -> str | None:
        """The model whose weights ``name``'s are by construction, or None: a ``random_init``
        model ``like:`` another ``random_init`` model with the same seed, dtype, rope and
        tokenizer, whose ``config:`` changes none of that model's config (:meth:`model_shape_fields`).
        A ``like:`` of a model from files cannot be known here (``prepare_model`` refuses it)."""
        spec = self.model_spec(name)
        like = spec.get("like")
        if spec["source"] != "random_init" or not like or like.startswith("trained-"):
            return None
        base = self.model_spec(like)
        if base["source"] != "random_init":
            return None
        same = (
            int(spec.get("seed", 0)) == int(base.get("seed", 0))
            and self.model_dtype(name) == self.model_dtype(like)
            and spec.get("rope", "rope") == base.get("rope", "rope")
            and self.tokenizer_of(name) == self.tokenizer_of(like)
        )
        overrides = spec.get("config") or {}
        if same and overrides:
            fields = self.model_shape_fields(like)
            same = fields is not None and all(
                k in fields and fields[k] == v for k, v in overrides.items()
            )
        return like if same else None

    def check_twins(self) -> None:
        """A ConfigError for every random-init model whose weights are another model's by
        construction (:meth:`same_weights_as`)."""
        errors = []
        for name in self.configured_models():
            like = self.same_weights_as(name)
            if like is None:
                continue
            seed = int(self.model_spec(name).get("seed", 0))
            errors.append(
                f"models.{name}: random_init like: {like!r} with seed {seed}, and {like!r} is "
                f"itself random_init with seed {seed}, its config copied unchanged (and the "
                "same dtype, rope and tokenizer): their weights are the same, bit for bit, so "
                "every table and the scorecard would hold "
                f"one model under two names (one judged, one measured as its twin). Fix: give "
                f"models.{name} another seed (e.g. seed: {seed + 1}), or drop it and name "
                f"{like!r} where its random twin was meant"
            )
        if errors:
            raise ConfigError("\n".join(errors))
