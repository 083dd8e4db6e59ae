"""The provenance record (:mod:`causalpos.io.provenance`) the config expects of every store and
table it writes, and their check on disk before any job (:func:`check_existing_stores`: Snakemake
reruns on changed params only where this checkout has a record of them; docs/troubleshooting.md).

A store's ``params`` are the resolved settings its content depends on, its inputs' included, less
code fingerprints and settings that never change a result (batch size, device, memory fraction):
two runs whose records of a path agree compute the same store. A table's are its rule's params
(``settings``) and the params sha256 of its ``inputs`` (``TargetsSection.table_jobs``). Torch-free;
reads only the stores' root metadata and the tables' records."""

from __future__ import annotations

import json
import os
import secrets
from collections.abc import Iterable
from pathlib import Path

import causalpos.paths as paths
from causalpos.capture.settings import ExtractSettings
from causalpos.config.common import ConfigError
from causalpos.config.existing import TABLE_KIND, model_dir_problems, refusal, store_problems
from causalpos.io.integrity import display_path
from causalpos.io.provenance import INPUTS_KEY, make_record, params_sha256
from causalpos.io.runconfig import forcing as forcing  # re-exported: what a command line rebuilds
from causalpos.paper2.settings import Position0Settings, StrataSettings
from causalpos.settings import Common
from causalpos.training.settings import LengthGenSettings, TokenizerSettings, TrainCorpus


class _Identities:
    """The settings a model, tokenizer or data store is made from, computed once per name."""

    def __init__(self, cfg):
        self.cfg, self.seed = cfg, cfg.values(Common).seed
        self._models: dict[str, dict] = {}
        self._data: dict[tuple[str, str], dict] = {}

    def tokenizer(self, key: str) -> dict:
        cfg = self.cfg
        if key == cfg.train_tokenizer_key():
            tok = cfg.values(TokenizerSettings)
            trained = {"vocab_size": tok.vocab_size, "min_frequency": tok.min_frequency}
            return {"trained_tokenizer": trained, **self.train_corpus(), "seed": self.seed}
        return self.model(key)

    def train_corpus(self) -> dict:
        """The training corpus and its held-out books (the trained tokenizer's and models')."""
        heldout = list(self.cfg.values(TrainCorpus).heldout)
        return {"corpus": self.cfg.value("train.corpus"), "heldout": heldout}

    def model(self, name: str) -> dict:
        if name not in self._models:
            self._models[name] = self._model(name)
        return self._models[name]

    def _model(self, name: str) -> dict:
        cfg = self.cfg
        if name.startswith("trained-"):
            variant = name.removeprefix("trained-").removesuffix("-init")
            trained = {
                "trained": cfg.train_variant_params(variant),
                **self.train_corpus(),
                "tokenizer": self.tokenizer(cfg.train_tokenizer_key()),
            }
            return {"init_twin_of": trained} if name.endswith("-init") else trained
        spec = cfg.model_spec(name)
        out = {"spec": cfg.model_spec_params(name), "sources": cfg.model_source_sha256(name)}
        if spec["source"] == "random_init":
            out["dtype"] = cfg.prepare_dtype(name)
            if spec.get("like"):  # its config (and tokenizer) come from that model
                out["like"] = self.model(spec["like"])
            ref = spec.get("tokenizer")
            if ref in cfg.configured_models() or str(ref).startswith("trained-"):
                out["tokenizer"] = self.tokenizer(cfg.tokenizer_of(ref))
        return out

    def data(self, dataset: str, tokenizer: str) -> dict:
        key = (dataset, tokenizer)
        if key not in self._data:
            cfg = self.cfg
            out = {
                "dataset": cfg.dataset_spec_params(dataset),
                "corpus_sha256": cfg.corpus_sha256(dataset),
                "tokenizer": self.tokenizer(tokenizer),
                "seed": self.seed,
            }
            if cfg.document_peers(dataset, tokenizer):  # one document set for every tokenizer
                peers = {cfg.tokenizer_of(m) for m in cfg.dataset_models(dataset)} - {tokenizer}
                out["peers"] = {p: params_sha256(self.tokenizer(p)) for p in sorted(peers)}
            self._data[key] = out
        return self._data[key]

    def extraction(self, model: str, dataset: str) -> dict:
        """What every score store of (model, dataset) shares: the model, the data, the settings."""
        cfg = self.cfg
        tokenizer = cfg.tokenizer_of(model)
        return {
            "model": self.model(model),
            "data": self.data(dataset, tokenizer),
            "extract": {
                "n_groups": cfg.values(ExtractSettings).n_groups,
                "dtype": cfg.model_dtype(model),
                "seed": self.seed,
            },
        }


def expected_records(cfg) -> dict[str, dict]:
    """``{path: record}`` of every store and table the config ``cfg`` (a Resolved) writes."""
    ids = _Identities(cfg)
    common = cfg.values(Common)
    seed = common.seed
    out: dict[str, dict] = {}

    def add(pattern: str, kind: str, params: dict, **fields: str) -> None:
        path = pattern.format(**fields)
        out[path] = make_record(path, kind, fields, params)

    for setting in cfg.sim_settings():
        add(paths.SIM_STORE, "sim", {"setting": cfg.sim_setting_params(setting), "seed": seed},
            setting=setting)  # fmt: skip
    triples = cfg.map_triples()
    extracted = sorted({(m, d) for m, d, _ in triples} | set(cfg.leakage_pairs()))
    extraction = {(m, d): cfg.extraction_params(m, d) for m, d in extracted}
    for (m, d), variants in extraction.items():
        tokenizer = cfg.tokenizer_of(m)
        add(paths.DATA_STORE, "data", ids.data(d, tokenizer), dataset=d, tokenizer=tokenizer)
        shared = ids.extraction(m, d)
        for v, entry in variants.items():
            scores = {**shared, "variant": {"name": v, **entry}}
            add(paths.SCORE_STORE, "scores", scores, model=m, dataset=d, variant=v)
            if (m, d, v) in triples:
                add(paths.NORMALIZED_STORE, "normalized", scores, model=m, dataset=d, variant=v)
    pairs = cfg.leakage_pairs()
    position0_settings = cfg.position0_params() if pairs else None
    conditions = list(cfg.values(Position0Settings).conditions) if pairs else []
    for (m, d), leakage_variants in pairs.items():
        shared = ids.extraction(m, d)
        variants = extraction[(m, d)]
        summary = {
            **shared,
            "variants": {v: variants[v] for v in leakage_variants},
            "summary": cfg.leakage_summary_params(m),
            "model_attrs": cfg.model_attrs(m),
            "strata": cfg.values(StrataSettings).strata,
        }
        add(paths.LEAKAGE_STORE, "leakage", summary, model=m, dataset=d)
        position0 = {
            **shared,
            "conditions": {c: variants[c] for c in conditions},  # Resolved.position0_conditions
            "position0": position0_settings,
        }
        add(paths.POSITION0_STORE, "position0", position0, model=m, dataset=d)
    for m in cfg.gram_models():
        draw = cfg.gram_draw(m)
        gram = {"model": ids.model(m), "draw": draw, "seed": seed, "dtype": common.dtype}
        dataset = cfg.gram_dataset(m)
        if dataset:
            tokenizer = cfg.tokenizer_of(m)
            gram["data"] = ids.data(dataset, tokenizer)
            add(paths.DATA_STORE, "data", gram["data"], dataset=dataset, tokenizer=tokenizer)
        add(paths.GRAM_STORE, "gram", gram, model=m)
    if cfg.train_variants():  # none where train.enabled is false
        lengthgen = cfg.values(LengthGenSettings)
        add(paths.LENGTHGEN_STORE, "lengthgen", {
            "models": {v: ids.model(f"trained-{v}") for v in cfg.train_variants()},
            "corpus": cfg.train_heldout_corpus(),
            "lengthgen": {"length_factor": lengthgen.length_factor,
                          "n_sequences": lengthgen.n_sequences},
            "stats": {"n_bootstrap": common.n_bootstrap, "confidence": common.confidence},
            "seed": seed,
            "dtype": common.dtype,
        })  # fmt: skip
    for rule, job in cfg.table_jobs().items():  # inputs before their readers
        inputs = {p: (out.get(p) or {}).get("params_sha256") for p in job["inputs"]}
        params = {"settings": job["settings"], INPUTS_KEY: inputs}
        for path in (p for p in job["outputs"] if not p.endswith(".zarr")):
            record = make_record(path, TABLE_KIND, {"table": Path(path).name}, params)
            out[path] = {**record, "rule": rule, "outputs": job["outputs"]}
    return out


def checkout_id(directory: str | os.PathLike, *, create: bool) -> str:
    """This checkout's identity: a random token kept in ``directory`` (``.snakemake/causalpos``),
    created on the first start (``create``: the main Snakemake process); '' where none is kept
    and none can be made (a read-only checkout: its stores then count as another checkout's)."""
    path = Path(directory) / "checkout"
    try:
        token = path.read_text().strip()
        if token:
            return token
    except OSError:
        pass
    if not create:
        return ""
    token = secrets.token_hex(8)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{token}")
        tmp.write_text(token + "\n")
        os.replace(tmp, path)
    except OSError:
        return ""
    return token


def check_existing_stores(
    cfg,
    *,
    checkout: str,
    run_configfiles: list[str],
    forced: Iterable[str] = (),
    forceall: bool = False,
    records: dict[str, dict] | None = None,
    run_config_args: list[str] = (),
) -> None:
    """Before any job: a :class:`ConfigError` listing every existing output that is not what its
    path and the config say (:func:`store_problems`, :func:`model_dir_problems`), with the
    command that rebuilds them."""
    from causalpos.io.atomic import incomplete_outputs

    records = expected_records(cfg) if records is None else records
    found = store_problems(
        records,
        checkout=checkout,
        forced=forced,
        forceall=forceall,
        incomplete=incomplete_outputs("."),
    )
    if not forceall:
        found.update(model_dir_problems(cfg.configured_models(), forced))
    if found:
        raise ConfigError(refusal(found, run_configfiles, run_config_args))


def setup_provenance(
    cfg,
    directory: str | os.PathLike,
    *,
    configfiles: list[str],
    main: bool,
    argv=(),
    config_args: list[str] = (),
) -> None:
    """The workflow's provenance set-up in every Snakemake process: this checkout's identity and
    the table of expected records, named in the environment the jobs inherit; in the main
    process (``main``), the table written and the existing stores and tables checked but for
    those the command line ``argv`` rebuilds. ``configfiles``, ``config_args``: the run's
    ``--configfile`` and ``--config KEY=VALUE`` arguments (named in a refusal's command)."""
    from causalpos.io.atomic import replace_json
    from causalpos.io.provenance import CHECKOUT_ENV, TABLE_ENV

    directory = Path(directory)
    configfiles = [display_path(f) for f in configfiles]
    checkout = checkout_id(directory, create=main)
    os.environ[CHECKOUT_ENV] = checkout
    # named by the config and its files: every Snakemake process of one run (a cluster job's
    # included) finds it, and a run with another config (a dry run beside it) writes its own
    name = params_sha256({"config": cfg.config, "configfiles": list(map(str, configfiles))})
    table = directory / "provenance" / f"{name[:24]}.json"
    os.environ[TABLE_ENV] = os.path.abspath(table)
    if not main:
        return
    records = expected_records(cfg)
    # read back by causalpos.io.provenance.running_table
    run = {"configfiles": list(configfiles), "config_args": list(config_args)}
    replace_json(table, {**run, "records": records})
    forced, forceall = forcing(argv)
    check_existing_stores(
        cfg,
        checkout=checkout,
        run_configfiles=configfiles,
        forced=forced,
        forceall=forceall,
        records=records,
        run_config_args=list(config_args),
    )


def config_expectations(
    configfiles: list[str] | None = None,
    config_values: dict | None = None,
    *,
    pipeline: str = ".",
):
    """``record -> the record its config expects of its path`` for ``causalpos verify``: the
    config of ``configfiles`` ([]: config.yaml) and ``config_values`` (``--config``), else the
    config files and overrides each record names, read from directory ``pipeline`` (each config
    loaded once). :class:`LookupError` / :class:`ConfigError` where a config cannot be read."""
    from causalpos.config.resolved import Resolved
    from causalpos.config.yamlfile import load_config
    from causalpos.io.fingerprint import cached_sha256

    tables: dict[str, dict[str, dict]] = {}

    def expected(record) -> dict | None:
        if configfiles is not None:
            files, values = configfiles, config_values or {}
        else:
            files, values = record.get("configfiles"), record.get("config_values") or {}
        if files is None:
            return None
        key = json.dumps([list(map(str, files)), values], sort_keys=True, default=str)
        if key not in tables:
            cache = Path(pipeline) / ".snakemake" / "causalpos" / "content_sha256.json"
            cfg = Resolved(
                load_config(list(map(str, files)), pipeline=pipeline, overrides=values),
                content_sha256=cached_sha256(cache if cache.parent.is_dir() else None),
            )
            tables[key] = expected_records(cfg)
        return tables[key].get(str(record.get("path")))

    return expected
