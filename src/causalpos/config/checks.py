"""Config-time checks (the Snakefile runs :meth:`ChecksSection.check` before any job): the target
lists, what local corpora can supply and sequence lengths against the models' contexts. Reads the
disk: corpora (through the reader ``Resolved`` is given, else
:func:`causalpos.data.local_document_sizes`) and local model directories' ``config.json``."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from causalpos.config.common import ConfigError, Section, canonical, check_path_name
from causalpos.config.disk import (
    MAX_PREFIX_TOKENS,
    _files_of,
    _local_model_config,
    _model_path,
    _tokenizer_bos,
    _tokenizer_size,
    capacity_bound,
)
from causalpos.config.strict import check_strict
from causalpos.models.context import ContextError, check_seq_len
from causalpos.paper2.settings import Position0Settings
from causalpos.settings import config_value
from causalpos.training.settings import (
    ComparisonFigureSettings,
    LengthGenSettings,
    LossByPositionSettings,
)


class ChecksSection(Section):
    """Checks of the config against corpora and model contexts."""

    # Set by Resolved.__init__: the corpus reader (document sizes in UTF-8 bytes, None where not
    # cheap to know; None: causalpos.data.local_document_sizes) and the sizes read, per spec.
    _document_sizes: Callable[[dict], list[int] | None] | None
    _sizes: dict[str, list[int] | None]
    # Set by Resolved.__init__: files -> {file: sha256} (None: computed, uncached).
    _content_sha256: Callable[[list[str]], dict[str, str]] | None

    def corpus_sizes(self, corpus: dict) -> list[int] | None:
        """Document sizes of a corpus (UTF-8 bytes), read once per corpus spec; None: unknown."""
        key = json.dumps(corpus, sort_keys=True, default=str)
        if key not in self._sizes:
            reader = self._document_sizes
            if reader is None:
                from causalpos.data import local_document_sizes as reader
            self._sizes[key] = reader(dict(corpus))
        return self._sizes[key]

    def check_capacity(self, key: str, draw: dict) -> None:
        """ConfigError (naming ``key``) when the local corpus of ``draw`` (a dataset spec's keys)
        cannot give its ``n_sequences`` of ``seq_len`` tokens with any tokenizer
        (:func:`capacity_bound`); hub corpora are skipped."""
        corpus, seq_len, n_sequences, mode = (
            draw[k] for k in ("corpus", "seq_len", "n_sequences", "mode")
        )
        if corpus.get("type") == "random_tokens":
            return
        try:
            sizes = self.corpus_sizes(corpus)
        except ValueError as exc:  # causalpos.data.CorpusError: a missing or unreadable file
            raise ConfigError(f"{key}.corpus: {exc}") from None
        if sizes is None:
            return
        bound = capacity_bound(sizes, seq_len, mode)
        if bound is None or bound >= n_sequences:
            return
        need = seq_len - MAX_PREFIX_TOKENS
        if mode == "first":
            what = (
                f"mode 'first' needs {n_sequences} documents of at least {seq_len} tokens; the "
                f"corpus has {len(sizes)} documents, of which at most {bound} can hold them (a "
                f"token spans at least one byte: documents of >= {need - 1} bytes)"
            )
            todo = "lower n_sequences or seq_len, use mode 'chunks', or a larger corpus"
        else:
            what = (
                f"mode 'chunks' needs {n_sequences} chunks of {seq_len} tokens; the corpus "
                f"({len(sizes)} documents, {sum(sizes)} bytes) gives at most {bound} (a token "
                "spans at least one byte)"
            )
            todo = "lower n_sequences or seq_len, or use a larger corpus"
        raise ConfigError(
            f"{key}: n_sequences={n_sequences}, seq_len={seq_len}: {what}. Corpus "
            f"{canonical(corpus)}. Fix: {todo}"
        )

    def model_source_files(self, name: str) -> list[str]:
        """The user's files a model is prepared from (rule inputs of ``prepare_model``): a
        ``gguf`` file, or every file of a ``local`` / ``hf`` local directory. Snakemake's mtime
        check reruns a newer file; :meth:`model_source_sha256` (a param) any other content."""
        spec = self.model_spec(name)
        path = spec.get("path") if spec["source"] == "gguf" else _model_path(spec)
        if not path or (spec["source"] == "hf" and not Path(path).expanduser().is_dir()):
            return []
        return _files_of(Path(path).expanduser())

    def content_sha256(self, key: str, files: list[str]) -> dict[str, str]:
        """``{file: sha256}`` of the user's files a job reads (a rule param: a changed content
        reruns the job whatever the file's mtime), from the reader ``Resolved`` is given, else
        :func:`causalpos.io.fingerprint.cached_sha256` uncached."""
        if not files:
            return {}
        if self._content_sha256 is None:
            from causalpos.io.fingerprint import cached_sha256

            self._content_sha256 = cached_sha256(None)
        try:
            return self._content_sha256(files)
        except OSError as exc:
            raise ConfigError(
                f"{key}: cannot read {exc.filename or exc} ({exc.strerror or exc}); the file "
                "must exist and be readable when the pipeline starts"
            ) from None

    def model_source_sha256(self, name: str) -> dict[str, str]:
        """Content of the user's files model ``name`` is prepared from (``prepare_model``'s
        ``sources`` param): :meth:`model_source_files` and a ``config_file``."""
        spec = self.model_spec(name)
        files = ([spec["config_file"]] if spec.get("config_file") else []) + (
            self.model_source_files(name)
        )
        return self.content_sha256(f"models.{name}", files)

    def corpus_sha256(self, dataset: str) -> dict[str, str]:
        """Content of a dataset's local corpus files (``sample_sequences``' ``sources`` param)."""
        return self.content_sha256(f"datasets.{dataset}.corpus", self.corpus_source_files(dataset))

    def corpus_source_files(self, dataset: str) -> list[str]:
        """The local files of a dataset's ``text``/``jsonl`` corpus (inputs of ``sample_sequences``)."""
        from causalpos.data import corpus_files

        return corpus_files(dict(self.dataset_spec(dataset)["corpus"]))

    def check_bos(self) -> None:
        """A dataset with ``prepend_bos: true`` runs only models whose tokenizer defines a BOS
        token (checked where the tokenizer is on disk now: a prepared model, or a local one)."""
        for dataset in self.config["datasets"]:
            if self.dataset_spec(dataset).get("prepend_bos") is not True:
                continue
            for model in self.dataset_models(dataset):
                dirs = [Path(self.tokenizer_dir(model))]
                tok = self.tokenizer_of(model)
                if tok != self.train_tokenizer_key():  # the trained one has a BOS
                    user = _model_path(self.model_spec(tok))
                    if user:
                        dirs.append(Path(user).expanduser())
                for d in dirs:
                    known, bos = _tokenizer_bos(d)
                    if known and bos is None:
                        raise ConfigError(
                            f"datasets.{dataset}.prepend_bos: true, but the tokenizer of model "
                            f"{model!r} ({d}) defines no BOS token. Fix: name the token to put "
                            "at position 0 (a string from its vocabulary) or give its id"
                        )
                    if known:
                        break

    def check_names(self) -> None:
        """Every config name that becomes a path component is a plain name (:func:`check_path_name`)."""
        for key in ("simulate.settings", "models", "datasets", "train.variants"):
            for name in config_value(self.config, key, None) or {}:
                check_path_name(f"{key}: name {name!r}", name)
        if config_value(self.config, "train.tokenizer", None):
            self.train_tokenizer_dir()
        for name in config_value(self.config, "leakage.experiments", None) or {}:
            check_path_name(f"leakage.experiments: name {name!r}", name)

    def statistics_datasets(self) -> set[str]:
        """Datasets whose scores feed statistics over sequences (paper 1's index, paper 2's fits,
        the comparison): each needs at least two sequences (a spread, a permutation, a fold)."""
        out = {d for _, d, _ in self.paper1_triples()} | {d for _, d in self.leakage_pairs()}
        sec = self.compare_section()
        return out | {sec["dataset"]} if sec else out

    def check_datasets(self) -> None:
        """Every dataset under ``datasets:`` and the held-out draws of the models trained here
        against what their local corpora can supply (:meth:`check_capacity`); datasets that feed
        statistics have at least two sequences."""
        from causalpos.distinct import MIN_DISTINCT  # sampling refuses fewer distinct ones

        stats = self.statistics_datasets()
        for name in self.config["datasets"]:
            spec = self.dataset_spec(name)
            if name in stats and spec["n_sequences"] < MIN_DISTINCT:
                raise ConfigError(
                    f"datasets.{name}.n_sequences: {spec['n_sequences']}; the statistics over "
                    "sequences (paper 1's index and bootstrap, paper 2's fits and permutations) "
                    f"need at least {MIN_DISTINCT}. Fix: set n_sequences >= {MIN_DISTINCT}"
                )
            self.check_capacity(f"datasets.{name}", spec)
        if not self.train_variants():
            return
        heldout = self.train_heldout_corpus()
        gram = self.config["train"]["gram"]
        if any(not self.gram_dataset(m) for m in self.gram_models()):
            self.check_capacity("train.gram", {**gram, "corpus": heldout, "mode": "first"})
        lengthgen = self.values(LengthGenSettings)
        context = max(self.train_variant(v)["context"] for v in self.train_variants())
        seq_len = int(round(lengthgen.length_factor * context))
        draw = {"seq_len": seq_len, "n_sequences": lengthgen.n_sequences, "mode": "chunks"}
        self.check_capacity("train.lengthgen", {**draw, "corpus": heldout})

    def check_ranges(self) -> None:
        """Settings whose valid range depends on other settings (the schema checks each alone):
        ``train.compare.map_layer`` against the trained models' layers, ``train.lengthgen.smooth``
        against the positions of its curve, ``leakage.position0.n_folds`` against the prompts of
        every dataset the probes run on."""
        variants = self.train_variants()
        compare = self.compare_section()
        if compare and variants:
            layers = min(self.train_variant(v)["layers"] for v in variants)
            layer = self.values(ComparisonFigureSettings).map_layer
            if not -layers <= layer < layers:
                raise ConfigError(
                    f"train.compare.map_layer: {layer}; the models trained here have {layers} "
                    f"layers, so it must lie in {-layers} .. {layers - 1} (0-indexed; -1 = the "
                    "last). Fix: set map_layer in that range"
                )
        if variants:
            factor = self.values(LengthGenSettings).length_factor
            smooth = self.values(LossByPositionSettings).smooth
            context = max(self.train_variant(v)["context"] for v in variants)
            positions = int(round(factor * context)) - 1
            if smooth > positions:
                raise ConfigError(
                    f"train.lengthgen.smooth: {smooth}; the loss-by-position curve "
                    f"has {positions} positions (length_factor {factor} x "
                    f"context {context}, less the first token), so a moving average can span at "
                    f"most {positions}. Fix: set smooth between 1 and {positions}"
                )
        n_folds = self.values(Position0Settings).n_folds
        for dataset in sorted({d for _, d in self.leakage_pairs()}):
            n = self.dataset_spec(dataset)["n_sequences"]
            if n_folds > n:
                raise ConfigError(
                    f"leakage.position0.n_folds: {n_folds}; dataset {dataset!r} has "
                    f"{n} prompts, and a stratified {n_folds}-fold probe needs at least "
                    f"{n_folds} prompts of each label class (the probe would be skipped). Fix: "
                    f"set n_folds between 2 and {n} or raise datasets.{dataset}.n_sequences"
                )

    def check_vocabularies(self) -> None:
        """A local model directory whose tokenizer has more ids than its ``config.json``'s
        ``vocab_size`` (the embedding's rows) is refused before any job (extraction would index
        past the embedding)."""
        for model in self.configured_models():
            spec = self.model_spec(model)
            cfg = _local_model_config(spec)
            if cfg is None or not isinstance(cfg.get("vocab_size"), int):
                continue
            path = _model_path(spec)
            ids = _tokenizer_size(Path(path).expanduser())
            if ids is not None and ids > cfg["vocab_size"]:
                raise ConfigError(
                    f"models.{model}: the tokenizer in {path} has {ids} ids (up to {ids - 1}), "
                    f"its config.json a vocab_size of {cfg['vocab_size']} (the embedding's "
                    "rows): a prompt with a larger id would index past the embedding. Fix: give "
                    "the directory the tokenizer the model was trained with (the tokenizer files "
                    "of its own repository)"
                )

    def model_seq_lens(self) -> list[tuple[str, str, int]]:
        """``(model, what, seq_len)`` of every sequence length a configured job runs a model at
        (lengthgen excluded: it runs past the context on purpose)."""
        pairs = {(m, d) for m, d, _ in self.paper1_triples()} | set(self.leakage_pairs())
        pairs |= {(m, d) for m, d, _ in self.map_triples()}  # and the comparison's
        out = [(m, f"datasets.{d}", self.dataset_spec(d)["seq_len"]) for m, d in sorted(pairs)]
        return out + self.gram_seq_lens()

    def gram_seq_lens(self) -> list[tuple[str, str, int]]:
        """``(model, key, seq_len)`` of every Gram-panel draw: its dataset's or ``train.gram``'s."""
        out = []
        for m in self.gram_models():
            d = self.gram_dataset(m)
            if d:
                out.append((m, f"datasets.{d}", self.dataset_spec(d)["seq_len"]))
            else:
                out.append((m, "train.gram", self.config["train"]["gram"]["seq_len"]))
        return out

    def check_contexts(self) -> list[str]:
        """Warnings for models run past their context (RoPE, NoPE); a ConfigError where a model
        with learned absolute positions would be (:func:`causalpos.models.context.check_seq_len`)."""
        warnings = []
        for model, what, seq_len in self.model_seq_lens():
            known = self.model_context(model)
            if known is None:
                continue
            try:
                msg = check_seq_len(*known, seq_len, f"{what}.seq_len with model {model!r}")
            except ContextError as exc:
                raise ConfigError(str(exc)) from None
            if msg:
                warnings.append(msg)
        return warnings

    def check(self) -> list[str]:
        """Every config-time check (the target lists: each resolver method checks what it reads);
        returns warnings, raises one ConfigError listing every error."""
        errors: list[str] = []
        warnings: list[str] = []
        strict = lambda: check_strict(self)  # corpus keys, models, token ids, seq_len memory
        for step in (
            self.check_names,
            self.all_targets,
            self.check_datasets,
            self.check_bos,
            self.check_ranges,
            self.check_vocabularies,
            self.check_contexts,
            self.check_plant,
            self.check_plant_stream,
            self.check_figure_labels,
            self.leakage_materiality,
            self.check_twins,
            self.claims_warnings,  # what the scorecard will read "not run" (config/claims.py)
            strict,
        ):
            try:
                out = step()
            except ConfigError as exc:
                errors.append(str(exc))
                continue
            if step in (self.check_contexts, self.claims_warnings, strict):  # the steps that warn
                warnings += out
        if errors:
            raise ConfigError("\n".join(dict.fromkeys(errors)))  # each error once
        return warnings
