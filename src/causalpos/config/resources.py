"""What the model jobs ask of a node: ``prepare_model``'s and ``extract_scores``' ``mem_mb`` and
``disk_mb``, from each model's shape (its ``config.json`` fields, read without building the
model: :mod:`causalpos.models.footprint`). Reads the architecture files
(``configs/architectures/*.json``) and local models' ``config.json`` when a request is asked
for; a model whose shape cannot be known before it is prepared (a hub id without an architecture
file, a gguf file) gets the fallback requests below."""

from __future__ import annotations

import json
from pathlib import Path

from causalpos.config.common import Section
from causalpos.models.footprint import (
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

#: The papers' hub checkpoints whose published config.json fields are kept in
#: ``configs/architectures/`` (relative to the workflow directory): their requests are sized
#: before anything is downloaded. The NoPE checkpoint's own config.json is not kept.
HUB_ARCHITECTURES = {
    "meta-llama/Llama-3.1-8B": "configs/architectures/llama-3.1-8b.json",
    "meta-llama/Llama-3.2-1B": "configs/architectures/llama-3.2-1b.json",
    "meta-llama/Llama-3.2-3B": "configs/architectures/llama-3.2-3b.json",
    "mistralai/Mistral-7B-v0.1": "configs/architectures/mistral-7b.json",
    "Qwen/Qwen2.5-7B": "configs/architectures/qwen2.5-7b.json",
    "Qwen/Qwen3-8B": "configs/architectures/qwen3-8b.json",
    "microsoft/phi-4": "configs/architectures/phi-4.json",
}

#: The dtype a hub checkpoint's safetensors hold (every model of the papers: bf16).
HUB_DTYPE = "bfloat16"

#: Requests of a model whose shape is unknown before it is prepared: a 14 B model in bf16 on
#: disk, and a host big enough for a 3 B model's paper-1 extraction on a GPU.
FALLBACK_PREPARE = {"mem_mb": 16000, "disk_mb": 32000}
FALLBACK_EXTRACT_MB = 32000
FALLBACK_STORE_MB = 8000


class ResourcesSection(Section):
    """Memory and disk requests of the model jobs, from the models' shapes."""

    def model_shape_fields(self, model: str) -> dict | None:
        """The ``config.json`` fields that size ``model`` (architecture file, ``like:`` chain with
        ``config:`` overrides, tiny preset, local directory, the training settings), or None."""
        from causalpos.models.architectures import read_architecture_file, tiny_config_kwargs

        if model.startswith("trained-"):
            variant = model.removeprefix("trained-").removesuffix("-init")
            if variant not in self.train_variants():
                return None
            s = self.train_variant(variant)
            return {
                "model_type": "llama",
                "vocab_size": self.config["train"]["tokenizer"]["vocab_size"],
                "hidden_size": s["hidden"],
                "intermediate_size": s["intermediate"],
                "num_hidden_layers": s["layers"],
                "num_attention_heads": s["heads"],
                "num_key_value_heads": s["kv_heads"],
                "tie_word_embeddings": s.get("tie_embeddings", True),
            }
        spec = self.model_spec(model)
        overrides = spec.get("config") or {}
        if spec["source"] == "random_init":
            if spec.get("like"):
                base = self.model_shape_fields(spec["like"])
            elif spec.get("config_file"):
                base = _read_fields(spec["config_file"], read_architecture_file)
            elif spec.get("size", "tiny") == "tiny":
                from causalpos.models.architectures import ARCHITECTURES

                arch = spec.get("architecture")
                if arch not in ARCHITECTURES:
                    return None
                base = {"model_type": ARCHITECTURES[arch], **tiny_config_kwargs(arch)}
            else:
                return None
            return None if base is None else {**base, **overrides}
        if spec["source"] == "hf" and spec.get("id") in HUB_ARCHITECTURES:
            return _read_fields(HUB_ARCHITECTURES[spec["id"]], read_architecture_file)
        if spec["source"] in ("hf", "local"):
            path = spec.get("path") if spec["source"] == "local" else spec.get("id")
            try:
                return json.loads((Path(path).expanduser() / "config.json").read_text())
            except (OSError, ValueError, TypeError):
                return None
        return None

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
            dtype = "float32"
        elif self.model_spec(model)["source"] == "random_init":
            dtype = self.config["dtype"]
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
        """Host ``mem_mb`` (and on a GPU ``gpu_mb``) of one ``extract_scores`` job of ``model`` on
        ``dataset``, its largest shard (:func:`causalpos.models.footprint.extract_request`):
        the model's weights in the config's ``dtype``, every variant's reducers."""
        found = self.model_footprint(model)
        if found is None:
            return {"mem_mb": FALLBACK_EXTRACT_MB}
        shape, n, _stored = found
        ds = self.dataset_spec(dataset)
        params = self.extraction_params(model, dataset)
        variants = {v: p["reducers"] for v, p in params.items()}
        mean_maps = all(p["leakage"].get("mean_maps", True) for p in params.values())
        devices = {"cpu": ["cpu"], "cuda": ["cuda"]}.get(self.config["device"], ["cpu", "cuda"])
        requests = [
            extract_request(
                shape,
                n,
                self.config["dtype"],
                ds["seq_len"],
                variants,
                n_groups=min(self.config["extract"]["n_groups"], ds["n_sequences"]),
                n_sequences=min(self.config["extract"]["shard_size"], ds["n_sequences"]),
                batch_size=self.config["extract"]["batch_size"],
                device=device,
                mean_maps=mean_maps,
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
        groups = min(self.config["extract"]["n_groups"], ds["n_sequences"])
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


def _read_fields(path: str, reader) -> dict | None:
    try:
        return reader(path)
    except ValueError:  # ModelSpecError: the config-time checks name the key
        return None
