"""Config-time checks of what a job would otherwise find late, run by
:meth:`causalpos.config.checks.ChecksSection.check` before any job, each error naming the key or
the file: corpus keys, a random_init model's ``config:`` keys, local model directories and GGUF
files, prepared random twins, sequence lengths against memory, ``pypi_gguf`` packages, token ids,
claim 3's factor variants, caps (warnings) and ``device: cuda`` without a GPU. What each refuses
and why: docs/configuration.md ("Checks before any job starts")."""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

from causalpos.capture.settings import ExtractSettings
from causalpos.config.common import ConfigError
from causalpos.training.settings import TokenizerSettings, TrainCorpus

#: Environment variable: the memory (GB) one job may use, where the jobs run on other machines
#: than the one starting Snakemake (a cluster); default: this machine's physical memory.
JOB_MEMORY_ENV = "CAUSALPOS_JOB_MEMORY_GB"
#: Float64 (heads, T, T) arrays one layer's score statistics hold at least (the moments' two
#: sums and the map of the batch: causalpos.models.footprint.reducer_state_bytes).
MAPS_PER_LAYER = 3


def check_corpora(cfg) -> None:
    """Every corpus spec against the keys its type takes, before any job."""
    from causalpos.data import CorpusError, validate_corpus

    corpora = {
        f"datasets.{d}.corpus": cfg.dataset_spec(d)["corpus"] for d in cfg.config["datasets"]
    }
    if cfg.config["train"]["enabled"]:
        corpora["train.corpus"] = cfg.values(TrainCorpus).corpus
    for key, corpus in corpora.items():
        try:
            validate_corpus(dict(corpus))
        except CorpusError as exc:
            raise ConfigError(f"{key}: {exc}") from None


def _model_type(cfg, model: str, seen: frozenset = frozenset()) -> str | None:
    """The transformers ``model_type`` of a configured model where known before any job."""
    from causalpos.config.disk import _local_model_config
    from causalpos.models.architectures import ARCHITECTURES, ModelSpecError, read_architecture_file

    if model.startswith("trained-"):
        return "llama"
    if model in seen or model not in cfg.config["models"]:
        return None
    spec = cfg.model_spec(model)
    if spec["source"] != "random_init":
        return (_local_model_config(spec) or {}).get("model_type")
    if spec.get("architecture"):
        return ARCHITECTURES.get(spec["architecture"])
    if spec.get("config_file"):
        try:
            return read_architecture_file(spec["config_file"]).get("model_type")
        except ModelSpecError:
            return None  # the context check names the key
    if spec.get("like"):
        return _model_type(cfg, spec["like"], seen | {model})
    return None


def check_model_configs(cfg) -> None:
    """Every ``config:`` key of a ``random_init`` model against its architecture's config class."""
    from causalpos.models.config_keys import unknown_config_keys

    for model in cfg.configured_models():
        spec = cfg.model_spec(model)
        overrides = (spec.get("config") or {}) if spec["source"] == "random_init" else {}
        model_type = _model_type(cfg, model) if overrides else None
        problems = unknown_config_keys(model_type, overrides) if model_type else []
        if problems:
            raise ConfigError(
                f"models.{model}.config: {'; '.join(problems)}. transformers would keep such a "
                "key as a plain attribute and build the model without it. Fix: use the config "
                f"class's own key names (those of a {model_type!r} config.json)"
            )


def check_model_sources(cfg) -> None:
    """Local model directories and GGUF files, as far as they can be read before any job."""
    from causalpos.models.dir_checks import local_dir_problem
    from causalpos.models.gguf_check import gguf_problem

    for model in cfg.configured_models():
        spec = cfg.model_spec(model)
        source = spec["source"]
        if source == "local" or (
            source == "hf" and Path(str(spec.get("id"))).expanduser().is_dir()
        ):
            key = "path" if source == "local" else "id"
            problem = local_dir_problem(Path(str(spec.get(key))).expanduser())
        elif source == "gguf":
            key, path = "path", Path(str(spec.get("path"))).expanduser()
            problem = gguf_problem(path) if path.is_file() else f"{path} is not a file"
        else:
            continue
        if problem:
            raise ConfigError(f"models.{model}.{key}: {problem}")


def job_memory() -> tuple[int | None, str]:
    """``(bytes, where)``: the memory one job may use, and where that figure comes from."""
    value = os.environ.get(JOB_MEMORY_ENV)
    if value:
        try:
            return int(float(value) * 1e9), f"{JOB_MEMORY_ENV}={value}"
        except ValueError:
            raise ConfigError(f"{JOB_MEMORY_ENV}={value!r}: give a number of GB") from None
    try:
        import psutil

        return int(psutil.virtual_memory().total), "the memory of this machine"
    except (ImportError, OSError):
        return None, ""


def check_seq_len_memory(cfg) -> None:
    """A ``seq_len`` whose float64 score statistics of one layer alone exceed the memory a job
    may use (:func:`job_memory`): refused naming the key (heads from the model's known shape,
    else 1: a bound every model meets)."""
    limit, where = job_memory()
    if limit is None:
        return
    runs = [(m, f"datasets.{d}", cfg.dataset_spec(d)["seq_len"]) for m, d in cfg.leakage_pairs()]
    runs += [(m, f"datasets.{d}", cfg.dataset_spec(d)["seq_len"]) for m, d, _ in cfg.map_triples()]
    runs += cfg.gram_seq_lens()
    for model, key, seq_len in sorted(set(runs), key=lambda r: (-r[2], r)):
        fields = cfg.model_shape_fields(model) or {}
        heads = int(fields.get("num_attention_heads") or 1)
        need = MAPS_PER_LAYER * heads * seq_len * seq_len * 8
        if need > limit:
            raise ConfigError(
                f"{key}.seq_len: {seq_len}; the score statistics of one layer of model {model!r} "
                f"({MAPS_PER_LAYER} float64 maps of {heads} head(s) x {seq_len} x {seq_len}) "
                f"need {need / 2**30:,.1f} GiB, more than {where} ({limit / 2**30:,.1f} GiB): "
                "they grow with seq_len² x heads, not with the batch. Fix: lower seq_len (the "
                f"papers use up to 1,024); where the jobs run on machines with more memory, set "
                f"{JOB_MEMORY_ENV} to the memory a job may use"
            )


def check_pypi_packages(cfg) -> None:
    """Every ``pypi_gguf`` model's ``package`` (or ``parts``) as ``prepare_model`` would check it,
    before any job: a string pip could read as an option, a URL or a marker is refused here."""
    from causalpos.models.architectures import ModelSpecError
    from causalpos.models.wheels import check_requirement, parts_of

    for model in cfg.configured_models():
        spec = cfg.model_spec(model)
        if spec["source"] != "pypi_gguf":
            continue
        key = f"models.{model}.parts" if "parts" in spec else f"models.{model}.package"
        try:
            if "parts" in spec:
                parts_of(model, dict(spec))
            elif "package" in spec:  # absent: the default package (prepare_model's)
                check_requirement(model, dict(spec), spec["package"])
        except ModelSpecError as exc:
            raise ConfigError(f"{key}: {exc}") from None


def tokenizer_ids(cfg, model: str) -> tuple[int, str] | None:
    """``(n, what)``: how many ids the tokenizer of ``model``'s prompts has (``0 .. n-1``) and
    where that comes from: a local directory's ``tokenizer.json`` (the spec's own, then the
    prepared copy), or the size the tokenizer trained here is trained to (at most). None: not
    known before the job."""
    from causalpos.config.disk import _model_path, _tokenizer_size

    tok = cfg.tokenizer_of(model)
    if tok == cfg.train_tokenizer_key():
        n = int(cfg.values(TokenizerSettings).vocab_size)
        return n, f"the tokenizer trained here (train.tokenizer.vocab_size: {n})"
    user = _model_path(cfg.model_spec(tok))
    dirs = [Path(user).expanduser()] if user else []
    for d in dirs + [Path(cfg.model_dir(tok))]:
        n = _tokenizer_size(d)
        if n is not None:
            return n, f"the tokenizer of model {tok!r} ({d}: {n} ids)"
    return None


def _model_vocab(cfg, model: str, seen: frozenset = frozenset()) -> int | None:
    """A configured model's ``vocab_size`` (its embedding's rows) where known before any job: a
    ``random_init`` model's ``config: {vocab_size}``, its ``config_file``'s, that of the model it
    is ``like``; a local or published ``config.json``'s. None where it is not known yet, or where
    ``prepare_model`` sizes it to its tokenizer (``architecture`` without ``vocab_size``)."""
    if model in seen or model not in cfg.config["models"]:
        return None  # the models trained here: sized by their tokenizer's training
    spec = cfg.model_spec(model)
    overrides = (spec.get("config") or {}) if spec["source"] == "random_init" else {}
    if "vocab_size" in overrides:
        vocab = overrides["vocab_size"]
    elif spec["source"] == "random_init" and not spec.get("config_file"):
        return _model_vocab(cfg, spec["like"], seen | {model}) if spec.get("like") else None
    else:
        vocab = (cfg.model_shape_fields(model) or {}).get("vocab_size")
    return vocab if isinstance(vocab, int) and not isinstance(vocab, bool) else None


def check_token_ids(cfg) -> None:
    """An integer ``prepend_bos`` outside a tokenizer its dataset is encoded with, and a
    ``random_init`` model with fewer embedding rows than its tokenizer has ids, are refused before
    any job (``sample_sequences`` and ``prepare_model`` would refuse them later), where the
    tokenizer's size is known (:func:`tokenizer_ids`)."""
    for dataset in cfg.config["datasets"]:
        bos = cfg.dataset_spec(dataset).get("prepend_bos")
        if not isinstance(bos, int) or isinstance(bos, bool):
            continue
        for model in cfg.dataset_models(dataset):
            known = tokenizer_ids(cfg, model)
            if known and bos >= known[0]:
                raise ConfigError(
                    f"datasets.{dataset}.prepend_bos: id {bos} is outside the vocabulary of "
                    f"model {model!r}: {known[1]} has ids 0..{known[0] - 1}. Fix: give an id below "
                    f"{known[0]}, the token itself (a string of its vocabulary), or true (its BOS)"
                )
    for model in cfg.configured_models():
        spec = cfg.model_spec(model)
        if spec["source"] != "random_init" or not (spec.get("tokenizer") or spec.get("like")):
            continue
        vocab = _model_vocab(cfg, model)
        known = tokenizer_ids(cfg, model) if vocab is not None else None
        if known and vocab < known[0]:
            raise ConfigError(
                f"models.{model}: vocab_size {vocab} (the embedding's rows), but {known[1]} has "
                f"{known[0]} ids: a prompt with an id of {vocab} or more would index past the "
                f"embedding. Fix: set `config: {{vocab_size: {known[0]}}}` or more, or drop "
                "`vocab_size` with `architecture:` (the model then takes its tokenizer's size)"
            )


def named_caps(cfg) -> list[str]:
    """Warnings for settings a run applies otherwise than written: ``extract.n_groups`` above a
    dataset's sequences, and a paper-2 query window keeping every query row (``early<K>`` with
    K >= seq_len). Not errors: both are set once for datasets of every size."""
    from causalpos.paper2.settings import query_window

    out = []
    n_groups = cfg.values(ExtractSettings).n_groups
    for dataset in sorted({d for _, d, _ in cfg.map_triples()}):
        n = cfg.dataset_spec(dataset)["n_sequences"]
        if n_groups > n:
            out.append(
                f"extract.n_groups: {n_groups} exceeds datasets.{dataset}.n_sequences ({n}): "
                f"its group means use {n} groups (one sequence each). Set n_groups <= {n} to "
                "say so"
            )
    seen = set()
    for model, dataset in sorted(cfg.leakage_pairs()):
        try:
            windows = cfg.pair_reducer(model, dataset)["windows"]
        except ConfigError:
            continue  # the target lists' check names it
        T = int(cfg.dataset_spec(dataset)["seq_len"])
        for w in windows:
            if w != "all" and (w, dataset) not in seen and query_window(w, T) == (1, T):
                seen.add((w, dataset))
                out.append(
                    f"leakage.reducer.windows: {w!r} keeps every query row of dataset "
                    f"{dataset!r} (seq_len {T}), the rows of 'all': its results repeat those of "
                    f"'all'. Use a window shorter than the sequences (e.g. early{T // 2}) or drop it"
                )
    return out


def cuda_unavailable(device: str) -> str | None:
    """Why ``device: cuda`` cannot run in this process: its torch sees no CUDA device, or there
    is no torch to ask; None where it can, or where the device is not ``cuda``. Imports torch
    only for ``cuda`` (the rest of ``causalpos.config`` never does)."""
    if device != "cuda":
        return None
    try:
        import torch
    except ImportError as exc:
        return f"this Snakemake process cannot import torch ({exc})"
    if torch.cuda.is_available():
        return None
    return f"torch {torch.__version__} here sees no CUDA device"


def cuda_refusal(problem: str, jobs: Iterable[str] = ()) -> str:
    """The message of a run on this machine with ``device: cuda`` where :func:`cuda_unavailable`
    found ``problem`` (``jobs``: the rules of the run that would use the device)."""
    names = sorted(set(jobs))
    used = f" (jobs of this run would use it: {', '.join(names)})" if names else ""
    return (
        f"device: cuda, but {problem}{used}: the jobs running models would fail. Fix: set "
        "`device: cpu` (or `auto`: cuda where torch sees it, else cpu), or run where torch sees a "
        "GPU (the CUDA build of torch); a run submitted to a cluster (--executor, e.g. "
        "--workflow-profile profiles/slurm) is not checked here"
    )


def _weights_record(directory: Path) -> dict | None:
    """The weights' sha256 a prepared model directory records (its ``causalpos_source.json``),
    None where it has none."""
    import json

    from causalpos.io.integrity import MODEL_RECORD

    try:
        record = json.loads((directory / MODEL_RECORD).read_text())
    except (OSError, ValueError):
        return None
    sha = record.get("sha256") if isinstance(record, dict) else None
    return sha if isinstance(sha, dict) and sha else None


def check_prepared_twins(cfg) -> None:
    """A ``random_init`` model ``like:`` another whose prepared directory holds that model's
    weights bit for bit (every recorded sha256 equal): refused before any job reads them (the
    config cannot show it for a model from files; a twin identical by construction:
    :meth:`causalpos.config.claims.ClaimsSection.check_twins`)."""
    errors = []
    for name in cfg.configured_models():
        spec = cfg.model_spec(name)
        like = spec.get("like")
        if spec["source"] != "random_init" or like not in cfg.config["models"]:
            continue
        mine = _weights_record(Path(cfg.model_dir(name)))
        if mine is None or mine != _weights_record(Path(cfg.model_dir(like))):
            continue
        seed = int(spec.get("seed", 0))
        errors.append(
            f"models.{name}: random_init like: {like!r}, prepared in {cfg.model_dir(name)}, holds "
            f"the weights of {like!r} bit for bit (every weights file's sha256 equal: "
            f"{sorted(mine)}): {like!r} was itself initialised from seed {seed} of this "
            f"architecture, so the twin is that model under another name. Fix: give "
            f"models.{name} another seed (e.g. seed: {seed + 1}); prepare_model then rebuilds it"
        )
    if errors:
        raise ConfigError("\n".join(errors))


def check_factor_variants(cfg) -> None:
    """claim 3's factor variants (``no_window``, ``global_base``) only on models that have the
    factor, where the model's ``config.json`` fields are known before any job
    (:meth:`ChecksSection.model_shape_fields`; a downloaded model is checked by its extraction job)."""
    from causalpos.models.variants import FACTOR_ATOMS, factor_refusal

    problems = []
    for name, exp in cfg.leakage_experiments().items():
        for model in exp["models"]:
            fields = None
            for variant in exp["variants"]:
                if not set(variant.split("+")) & set(FACTOR_ATOMS):
                    continue
                fields = cfg.model_shape_fields(model) if fields is None else fields
                why = factor_refusal(variant, fields) if fields else None
                if why:
                    problems.append(
                        f"leakage.experiments.{name}.variants: {variant!r} on model "
                        f"{model!r}: {why} (or move the model to an experiment without it)"
                    )
    if problems:
        raise ConfigError("\n".join(problems))


def check_scorecard_targets(cfg=None, source=None) -> None:
    """The scorecard's targets (``source``, default the packaged ``causalpos/targets.yaml``) load
    (:func:`causalpos.scorecard.targets.check_targets`), else a ConfigError at the dry run naming
    the target. ``cfg``: unused (every config reads the same targets)."""
    from causalpos.scorecard.rows import load_targets

    try:
        load_targets(source)
    except ValueError as exc:
        where = source or "src/causalpos/targets.yaml"
        raise ConfigError(f"{exc} (the scorecard's targets, {where})") from None


def check_strict(cfg) -> list[str]:
    """Every check of this module; one :class:`ConfigError` listing each one's error, else the
    warnings of :func:`named_caps`."""
    errors = []
    for step in (
        check_corpora,
        check_model_configs,
        check_model_sources,
        check_pypi_packages,
        check_token_ids,
        check_seq_len_memory,
        check_prepared_twins,
        check_factor_variants,
        check_scorecard_targets,
    ):
        try:
            step(cfg)
        except ConfigError as exc:
            errors.append(str(exc))
    if errors:
        raise ConfigError("\n".join(errors))
    return named_caps(cfg)
