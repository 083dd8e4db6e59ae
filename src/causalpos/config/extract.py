"""The ``extract:`` section: shards, and what one extraction job computes (variants, reducers and
their kwargs), the union of what paper 1, paper 2 and the comparison read. Pure."""

from __future__ import annotations

import math

import causalpos.paths as paths
from causalpos.capture.settings import ExtractSettings
from causalpos.config.common import ConfigError, Section, canonical, names_pattern
from causalpos.models.variants import parse_variant


class ExtractSection(Section):
    """Shards, extraction variants and reducers."""

    def n_shards(self, dataset: str) -> int:
        spec = self.dataset_spec(dataset)
        return math.ceil(spec["n_sequences"] / self.config["extract"]["shard_size"])

    def shard_bounds(self, dataset: str, shard: str | int) -> list[int]:
        """``[first, end)`` sequence indices of shard ``shard`` (the ``{shard}`` wildcard) of ``dataset``."""
        size = self.config["extract"]["shard_size"]
        total = self.dataset_spec(dataset)["n_sequences"]
        k = int(shard)
        if k >= self.n_shards(dataset):
            raise ConfigError(f"shard {k} beyond the {self.n_shards(dataset)} shards of {dataset}")
        return [k * size, min((k + 1) * size, total)]

    def shard_count_pattern(self, *, one: bool) -> str:
        """The ``{dataset}`` wildcard constraint of the datasets of one shard (``one``: rule
        ``extract_scores`` writes their final stores) or of several (``merge_scores`` merges
        their shards)."""
        return names_pattern(
            sorted(d for d in self.config["datasets"] if (self.n_shards(d) == 1) == one)
        )

    def score_shards(self, model: str, dataset: str) -> list[str]:
        """Shard directories rule ``merge_scores`` reads for (model, dataset) of several shards:
        one ``extract_scores_shard`` job per shard writes every variant of the pair into
        ``shard-NNNN/{variant}.zarr``."""
        if not self.extraction_variants(model, dataset):
            raise ConfigError(f"no stage asks for scores of model {model!r} on dataset {dataset!r}")
        return [paths.score_shard(model, dataset, k) for k in range(self.n_shards(dataset))]

    def map_triples(self) -> set[tuple[str, str, str]]:
        """(model, dataset, variant) whose score maps a stage reads: paper 1's models (diagonal
        normalization, the index) and the trained-vs-init comparison (its causal maps)."""
        out = set(self.paper1_triples())
        sec = self.compare_section()
        if sec:
            d = sec["dataset"]
            out |= {(f"trained-{v}", d, "causal") for v in self.train_variants()}
            out |= {(f"trained-{v}-init", d, "causal") for v in self.compare_twin_variants()}
        return out

    def extraction_variants(self, model: str, dataset: str) -> list[str]:
        """Every variant some stage reads for (model, dataset), in a fixed order (causal first)."""
        seen = {v for m, d, v in self.map_triples() if (m, d) == (model, dataset)}
        seen |= set(self.leakage_pairs().get((model, dataset), ()))
        seen |= set(self.position0_conditions(model, dataset))
        order = {"causal": 0, "bidirectional": 1}
        return sorted(seen, key=lambda v: (order.get(v, 2), v))

    def extraction_params(self, model: str, dataset: str) -> dict:
        """What one extraction job computes: variant -> {reducers, leakage (reducer kwargs)}, and
        ``plant`` ({layer, scale}: ``leakage.plant``) for a planted variant, ``stream`` ({layer,
        dose, profile}: ``leakage.plant_stream``) for a stream-planted one."""
        variants = self.extraction_variants(model, dataset)
        if not variants:
            raise ConfigError(f"no stage asks for scores of model {model!r} on dataset {dataset!r}")
        out = {
            v: {
                "reducers": self.reducers_for(model, dataset, v),
                "leakage": self.leakage_reducer_params(model, dataset, v),
            }
            for v in variants
        }
        for v in variants:  # a planted variant's layer and scale: a changed plant reruns the job
            if parse_variant(v).plant is not None:
                out[v]["plant"] = self.leakage_plant()
            if parse_variant(v).stream:  # a stream dose's layer, size and profile: likewise
                out[v]["stream"] = self.stream_dose_spec(v)
        return canonical(out)

    def reducers_for(self, model: str, dataset: str, variant: str) -> list[str]:
        """Reducers of one variant's extraction: the maps (moments, group means) where a stage
        reads them (:meth:`map_triples`); paper 2's per-sequence metrics where an experiment
        names the variant. Nothing else is computed or stored."""
        names = []
        if (model, dataset, variant) in self.map_triples():
            names += ["moments", "groups"]
        if self.leakage_wants(model, dataset, variant):
            names += ["leakage", "sink"]
        if variant in self.position0_conditions(model, dataset):
            names += ["position0"]
        return names

    def leakage_wants(self, model: str, dataset: str, variant: str) -> bool:
        """Whether a paper-2 experiment names this (model, dataset, variant)."""
        return variant in self.leakage_pairs().get((model, dataset), ())

    def leakage_reducer_params(self, model: str, dataset: str, variant: str) -> dict:
        """LeakageReducer kwargs of an extraction job ({} where paper 2 does not want it)."""
        if self.leakage_wants(model, dataset, variant):
            return self.leakage_reducer_kwargs(variant, model, dataset)
        return {}

    def extract_settings(self, model: str) -> dict:
        """Rule ``extract_scores``' :class:`~causalpos.capture.settings.ExtractSettings`: the
        model's dtype, and ``extract.memory_fraction`` only where it sizes the batch
        (``batch_size: auto``; else None: the batch size never changes the scores' values)."""
        extract = self.values(ExtractSettings)
        fraction = extract.memory_fraction if extract.batch_size == "auto" else None
        return self.settings(
            ExtractSettings, dtype=self.model_dtype(model), memory_fraction=fraction
        )
