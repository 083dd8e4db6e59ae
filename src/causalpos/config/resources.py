"""What the model jobs ask of a node: ``mem_mb``, ``disk_mb`` (and ``gpu_mb``) of ``prepare_model``,
``extract_scores``, ``merge_scores``, ``diagonal_normalize`` and ``leakage``, from each model's
shape (:meth:`~causalpos.config.shapes.ShapesSection.model_shape_fields`; the arithmetic:
:mod:`causalpos.models.footprint`). A model whose shape is unknown before it is prepared (a hub id
without an architecture file, a gguf file) gets the fallback requests below."""

from __future__ import annotations

from causalpos.capture.settings import ExtractSettings
from causalpos.config.common import Section
from causalpos.models.footprint import (
    ExtractJob,
    Shape,
    extract_request,
    leakage_request,
    merge_request,
    normalize_request,
    parameter_count,
    prepare_request,
    shape_of,
    variant_store_bytes,
)
from causalpos.settings import FULL_PRECISION, Scheduling

#: The dtype a hub checkpoint's safetensors hold (every model of the papers: bf16).
HUB_DTYPE = "bfloat16"

#: Requests of a model whose shape is unknown before it is prepared: a 14 B model in bf16 on
#: disk, and a host big enough for a 3 B model's paper-1 extraction on a GPU.
FALLBACK_PREPARE = {"mem_mb": 16000, "disk_mb": 32000}
FALLBACK_EXTRACT_MB = 32000
FALLBACK_STORE_MB = 8000


class ResourcesSection(Section):
    """Memory and disk requests of the model jobs, from the models' shapes."""

    def model_footprint(self, model: str) -> tuple[Shape, int, str] | None:
        """``(shape, parameter count, dtype of the prepared weights)`` of ``model``, or None
        where its shape is unknown before it is prepared. A random stand-in is saved in the
        config's ``dtype``, a hub checkpoint in its own (:data:`HUB_DTYPE`), a model trained
        here in float32 (its master weights)."""
        fields = self.model_shape_fields(model)
        if fields is None:
            return None
        try:
            shape = shape_of(fields)
        except ValueError:
            return None
        if model.startswith("trained-"):
            dtype = FULL_PRECISION
        elif self.model_spec(model)["source"] == "random_init":
            dtype = self.model_dtype(model)
        else:
            dtype = HUB_DTYPE
        return shape, parameter_count(shape), dtype

    def prepare_resources(self, model: str) -> dict[str, int]:
        """``mem_mb`` and ``disk_mb`` of ``prepare_model`` for ``model``
        (:func:`causalpos.models.footprint.prepare_request`)."""
        found = self.model_footprint(model)
        if found is None:
            return dict(FALLBACK_PREPARE)
        _shape, n, dtype = found
        builds = self.model_spec(model)["source"] == "random_init"
        return prepare_request(n, dtype, builds=builds)

    def extract_resources(self, model: str, dataset: str) -> dict[str, int]:
        """Host ``mem_mb`` (and on a GPU ``gpu_mb``) of one extraction job of ``model`` on
        ``dataset``, its largest shard (:func:`causalpos.models.footprint.extract_request`):
        the model's weights in the config's ``dtype``, every variant's reducers, and where the
        dataset is one shard the in-memory merge of its stores (rule ``extract_scores``)."""
        found = self.model_footprint(model)
        if found is None:
            return {"mem_mb": FALLBACK_EXTRACT_MB}
        shape, n, _stored = found
        ds = self.dataset_spec(dataset)
        params = self.extraction_params(model, dataset)
        variants = {v: p["reducers"] for v, p in params.items()}
        mean_maps = all(p["leakage"].get("mean_maps", True) for p in params.values())
        extract = self.values(ExtractSettings)
        device = self.values(Scheduling).device
        devices = {"cpu": ["cpu"], "cuda": ["cuda"]}.get(device, ["cpu", "cuda"])
        requests = [
            extract_request(
                shape,
                n,
                self.model_dtype(model),
                ExtractJob(
                    ds["seq_len"],
                    variants,
                    n_groups=min(extract.n_groups, ds["n_sequences"]),
                    n_sequences=min(self.config["extract"]["shard_size"], ds["n_sequences"]),
                    batch_size=extract.batch_size,
                    device=device,
                    mean_maps=mean_maps,
                    merges=self.n_shards(dataset) == 1,
                ),
            )
            for device in devices  # `auto`: whichever it finds, the larger host request
        ]
        out = max(requests, key=lambda r: r["mem_mb"])
        return {**out, **{k: r[k] for r in requests for k in r if k == "gpu_mb"}}

    def merge_resources(self, model: str, dataset: str, variant: str) -> dict[str, int]:
        """``mem_mb`` of ``merge_scores`` of one variant's shards
        (:func:`causalpos.models.footprint.merge_request`)."""
        found = self.model_footprint(model)
        if found is None:
            return {"mem_mb": FALLBACK_STORE_MB}
        ds = self.dataset_spec(dataset)
        names = self.reducers_for(model, dataset, variant)
        groups = min(self.values(ExtractSettings).n_groups, ds["n_sequences"])
        return merge_request(variant_store_bytes(found[0], ds["seq_len"], names, n_groups=groups))

    def normalize_resources(self, model: str, dataset: str) -> dict[str, int]:
        """``mem_mb`` of ``diagonal_normalize`` (:func:`causalpos.models.footprint.normalize_request`)."""
        found = self.model_footprint(model)
        if found is None:
            return {"mem_mb": FALLBACK_STORE_MB}
        return normalize_request(found[0], self.dataset_spec(dataset)["seq_len"])

    def leakage_resources(self, model: str, dataset: str) -> dict[str, int]:
        """``mem_mb`` of the ``leakage`` rule (:func:`causalpos.models.footprint.leakage_request`)."""
        found = self.model_footprint(model)
        if found is None:
            return {"mem_mb": FALLBACK_STORE_MB}
        n = len(self.leakage_variants(model, dataset))
        return leakage_request(found[0], self.dataset_spec(dataset)["seq_len"], n)
