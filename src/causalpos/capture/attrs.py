"""What a capture's store records of its run (its root attributes): the model and where it came
from, the variant, the shapes, the scaling and soft-capping its layers used, the versions.
"""

from __future__ import annotations

import json
from importlib.metadata import version
from typing import Any

import numpy as np
import torch

from causalpos import __version__
from causalpos.capture.session import CaptureSession
from causalpos.models.variants import Variant


def run_attrs(
    model: torch.nn.Module,
    tokens: np.ndarray,
    seq_ids: np.ndarray,
    v: Variant,
    seed: int,
    session: CaptureSession | None,
) -> dict[str, Any]:
    """The store attrs of one :func:`~causalpos.capture.hook.capture_scores` run (module doc)."""
    config = model.config
    n, t = tokens.shape
    source = getattr(model, "causalpos_source", {}) or {}
    scalings = [session.scaling[i] for i in sorted(session.scaling)] if session else []
    softcaps = [session.softcap[i] for i in sorted(session.softcap)] if session else []
    bos_id = getattr(config, "bos_token_id", None)
    revision = source.get("revision") or source.get("file_sha256") or source.get("sha256")
    return {
        "model": source.get("name", getattr(config, "name_or_path", "")),
        "model_spec": json.dumps(source.get("spec", {}), sort_keys=True),
        "model_revision": json.dumps(revision, sort_keys=True)
        if isinstance(revision, dict)
        else (revision or ""),
        "architecture": config.model_type,
        "dtype": str(next(model.parameters()).dtype).removeprefix("torch."),
        "device": str(next(model.parameters()).device),
        "seq_len": int(t),
        "n_sequences": int(n),
        "variant": v.name,
        "seed": int(seed),
        # "none": no scores were captured (a variant of hidden-state reducers only)
        "scaling": "none" if not scalings else scalings[0] if len(set(scalings)) == 1 else scalings,
        "softcap": "none"
        if all(s is None for s in softcaps)
        else [s if s is not None else "none" for s in softcaps],
        "bos": bool(bos_id is not None and np.all(tokens[:, 0] == bos_id)),
        "n_layers": int(config.num_hidden_layers),
        "n_heads": int(config.num_attention_heads),
        "n_kv_heads": int(getattr(config, "num_key_value_heads", config.num_attention_heads)),
        "score_dtype": "float32",
        "sequence_first": int(seq_ids.min()),
        "sequence_last": int(seq_ids.max()),
        "causalpos_version": __version__,
        "transformers_version": version("transformers"),
        "torch_version": torch.__version__,
    }
