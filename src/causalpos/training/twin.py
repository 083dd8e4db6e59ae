"""The untrained twin of a model trained here: the exact weights its training started from."""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

log = logging.getLogger("causalpos.training.twin")


#: ``trained-rope`` -> ``trained-rope-init``.
INIT_SUFFIX = "-init"


def prepare_init_twin(trained_dir: str | os.PathLike, out_dir: str | os.PathLike) -> Path:
    """Write the weights ``trained_dir`` was trained *from* as an HF-format model directory.

    Rebuilds the initial model from the trained model's ``config.json`` and the seed in its
    ``training.json`` and saves it, atomically, with the trained model's tokenizer and a
    ``causalpos_source.json`` naming the trained model.
    """
    from transformers import AutoConfig

    from causalpos.io.atomic import atomic_dir
    from causalpos.io.integrity import display_path
    from causalpos.models.load import SOURCE_FILE, weights_manifest
    from causalpos.training.architecture import build_model
    from causalpos.training.checkpoints import save_model_dir
    from causalpos.training.trainlog import TRAINING_JSON

    trained_dir, out_dir = Path(trained_dir), Path(out_dir)
    summary_path = trained_dir / TRAINING_JSON
    if not summary_path.is_file():
        raise FileNotFoundError(
            f"prepare_init_twin: {trained_dir} has no {TRAINING_JSON}; "
            "expected a directory written by causalpos.training.loop.run_training"
        )
    summary = json.loads(summary_path.read_text())
    seed = int(summary["settings"]["seed"])
    config = AutoConfig.from_pretrained(trained_dir, trust_remote_code=False)
    model = build_model(config, seed=seed)
    with atomic_dir(out_dir) as tmp:
        save_model_dir(model, trained_dir, tmp)
        record = {
            "name": out_dir.name,
            "source": "init_twin",
            "of": trained_dir.name,
            # relative to the pipeline directory: no clone's location in a result
            "path": display_path(trained_dir.resolve()),
            "seed": seed,
            "variant": summary.get("variant"),
            "sha256": weights_manifest(tmp),
        }
        (tmp / SOURCE_FILE).write_text(json.dumps(record, indent=2) + "\n")
    log.info("wrote the initial weights of %s (seed %d) to %s", trained_dir.name, seed, out_dir)
    return out_dir
