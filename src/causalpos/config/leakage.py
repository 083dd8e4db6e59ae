"""The ``leakage:`` section (paper 2): experiments and their (model, dataset) pairs, each extracted
and summarized once over the union of its experiments' variants; the summary's and reducers'
settings, position 0, the tables and figures. Pure."""

from __future__ import annotations

from itertools import product

import causalpos.catalogue as catalogue
import causalpos.paths as paths
from causalpos.config.common import ConfigError, Section, canonical, check_variant
from causalpos.models.variants import DECOMPOSITION_CONDITIONS
from causalpos.paper2.settings import (
    LeakageReducerSettings,
    LeakageSettings,
    MaterialitySettings,
    Position0Settings,
    keeps_mean_maps,
    too_short_windows,
)
from causalpos.settings import config_params

#: ``leakage.materiality`` thresholds -> the reading of the negative controls whose margin
#: (``leakage.controls.margin``) must be at most half of each, None for claim3_ntk (share points:
#: no control reads in that unit).
MATERIALITY_READINGS = {
    "claim1_logit": "logit",
    "claim2_component": "logattn",
    "claim3_ntk": None,
    "claim3_order": "logattn",
    "claim6_headline": "logit",
}


def _check_reducer(fit: str, red: dict, where: str, windows) -> None:
    """``fit`` among the fits of reducer ``red`` (named ``where``) and each ``(key, windows)``'s
    windows among its windows, else a ConfigError naming the key."""
    if fit not in red["fits"]:
        raise ConfigError(f"leakage.fit {fit!r} is not among {where}.fits {red['fits']}")
    for key, wins in windows:
        missing = [w for w in wins if w not in red["windows"]]
        if missing:
            raise ConfigError(f"{key}: {missing} not among {where}.windows {red['windows']}")


class LeakageSection(Section):
    """Paper 2's experiments, settings, stores and targets."""

    def leakage_experiments(self) -> dict[str, dict]:
        """Experiment name -> {models, datasets, variants}, every name checked against the config."""
        out = {}
        for name, exp in self.config.get("leakage", {}).get("experiments", {}).items():
            variants = list(exp.get("variants") or ["causal", "bidirectional"])
            for v in variants:
                check_variant(f"leakage.experiments.{name}.variants", v)
            if "causal" not in variants:
                raise ConfigError(
                    f"leakage.experiments.{name}.variants must include 'causal' (the baseline of the "
                    f"decomposition and BOS effects, and the run whose sink heads are probed); got {variants}"
                )
            out[name] = {
                "models": [self.check_model(m) for m in exp["models"]],
                "datasets": [self.dataset_spec(d) and d for d in exp["datasets"]],
                "variants": variants,
                "reducer": dict(exp.get("reducer") or {}),
            }
        return out

    def pair_reducer(self, model: str, dataset: str) -> dict:
        """``leakage.reducer`` for one (model, dataset): updated by the ``reducer`` of the
        experiments naming the pair (they must agree), its fit, window and expected-map windows
        checked against its own fits and windows."""
        sec = self.values(LeakageSettings)
        red, by = dict(self.settings(LeakageReducerSettings)), {}
        for name, exp in self.leakage_experiments().items():
            if model not in exp["models"] or dataset not in exp["datasets"] or not exp["reducer"]:
                continue
            for key, value in exp["reducer"].items():
                if key in by and by[key][1] != value:
                    raise ConfigError(
                        f"leakage.experiments.{by[key][0]}.reducer.{key} and "
                        f"leakage.experiments.{name}.reducer.{key} differ for ({model}, {dataset}): "
                        "a pair is extracted once, so its experiments must agree"
                    )
                by[key] = (name, value)
                red[key] = value
        where = (
            "leakage.reducer"
            if not by
            else f"the reducer of ({model}, {dataset}) (leakage.experiments.*.reducer)"
        )
        windows = (("window", [sec.window]), ("expected_stats", red["expected_stats"]))
        _check_reducer(sec.fit, red, where, windows)
        T = int(self.dataset_spec(dataset)["seq_len"])
        for w, rows in too_short_windows(red["windows"], T):
            raise ConfigError(
                f"{where}.windows: {w!r} keeps {rows} query row(s) of dataset "
                f"{dataset!r} (seq_len {T}), too few for a fit: drop it for this pair (a "
                "reducer of the experiment's own) or lengthen the sequences"
            )
        return red

    def leakage_pairs(self) -> dict[tuple[str, str], list[str]]:
        """(model, dataset) -> the union of its experiments' variants (causal first, then bidirectional)."""
        pairs: dict[tuple[str, str], list[str]] = {}
        for exp in self.leakage_experiments().values():
            for m, d in product(exp["models"], exp["datasets"]):
                seen = pairs.setdefault((m, d), [])
                seen += [v for v in exp["variants"] if v not in seen]
        order = {"causal": 0, "bidirectional": 1}
        return {k: sorted(v, key=lambda x: order.get(x, 2)) for k, v in pairs.items()}

    def leakage_variants(self, model: str, dataset: str) -> list[str]:
        pairs = self.leakage_pairs()
        if (model, dataset) not in pairs:
            raise ConfigError(
                f"no leakage experiment names model {model!r} with dataset {dataset!r}; "
                f"configured pairs: {sorted(pairs)}"
            )
        return pairs[(model, dataset)]

    def check_leakage(self) -> None:
        """The summary's settings cross-checked against the reducer's fits and windows: a
        ConfigError naming the key and the allowed values otherwise."""
        sec = self.values(LeakageSettings)
        red = self.settings(LeakageReducerSettings)
        for v in sec.perm_variants or ():
            check_variant("leakage.permutation_variants", v)
        windows = (
            ("leakage.window", [sec.window]),
            ("leakage.bos_windows", list(sec.bos_windows)),
            ("leakage.reducer.expected_stats", red["expected_stats"]),
        )
        _check_reducer(sec.fit, red, "leakage.reducer", windows)

    def leakage_reducer_kwargs(
        self, variant: str, model: str | None = None, dataset: str | None = None
    ) -> dict:
        """LeakageReducer keyword arguments of an extraction job (sorted: compared as text).

        The prompt-mean maps (2 x layers x heads x T^2 float64, ~280 MB for SmolLM2 at T = 256)
        are summed for the variants the permutation test reads, and for every variant when the
        headline estimator runs (``reducer.expected_stats``: its denominator reads them).
        """
        self.check_leakage()
        sec = self.values(LeakageSettings)
        own = self.settings(LeakageReducerSettings)
        kwargs = dict(own if model is None else self.pair_reducer(model, dataset))
        kwargs["mean_maps"] = keeps_mean_maps(
            kwargs["mean_maps"],
            sec.n_perm,
            sec.perm_variants,
            kwargs.get("expected_stats") or (),
            variant,
        )
        return canonical(kwargs)

    def leakage_summary_params(self, model: str | None = None) -> dict:
        """The leakage summary's params of ``model``'s pairs (None: the section's own values):
        the negative controls' margins δ are the model's (:meth:`control_margins`), and so is
        the dose series' dose-0 margin (the run without a plant, read on logits: δ on logits)."""
        self.check_leakage()
        margin = self.control_margins(model)
        return self.settings(
            LeakageSettings,
            control_margin_logit=margin["logit"],
            control_margin_logattn=margin["logattn"],
        )

    def _per_model(self, model: str | None, key: str) -> dict:
        """``leakage.per_model.<model>.<key>`` (empty for None or a model without one)."""
        if model is None:
            return {}
        entry = (self.config["leakage"].get("per_model") or {}).get(model) or {}
        return dict(entry.get(key) or {})

    def control_margins(self, model: str | None = None) -> dict:
        """reading -> the negative controls' margin δ on ``model``: ``leakage.controls.margin``
        with ``leakage.per_model.<model>.margin`` over it (None: the section's own)."""
        margin = self.values(LeakageSettings).control_margins()
        return canonical({**margin, **self._per_model(model, "margin")})

    def materiality_of(self, model: str | None = None) -> dict:
        """claim -> the materiality threshold on ``model``: ``leakage.materiality`` with
        ``leakage.per_model.<model>.materiality`` over it (None: the section's own)."""
        out = config_params(self.values(MaterialitySettings))
        return canonical({**out, **self._per_model(model, "materiality")})

    def per_model_models(self) -> list[str]:
        """The models named in ``leakage.per_model``, each one an experiment runs (else a
        ConfigError)."""
        named = list(self.config["leakage"].get("per_model") or {})
        run = sorted({m for m, _ in self.leakage_pairs()})
        unknown = [m for m in named if m not in run]
        if unknown:
            raise ConfigError(
                f"leakage.per_model names {unknown}, which no experiment of leakage.experiments "
                f"runs; allowed: {run} (remove the entry or add the model to an experiment)"
            )
        return named

    def leakage_materiality(self) -> dict:
        """``leakage.materiality`` (the scorecard rule's params): the section's thresholds, and
        under ``per_model`` each model's own. On every model each reading's margin δ must be at
        most half the smallest threshold judged on that reading (:data:`MATERIALITY_READINGS`): a
        passing control may read up to δ, so an effect at the threshold stays at least twice it."""
        models = self.per_model_models()
        for model in [None, *sorted({m for m, _ in self.leakage_pairs()})]:
            self._check_half_threshold(model)
        out = self.materiality_of(None)
        by_model = {m: self.materiality_of(m) for m in models}
        return canonical({**out, "per_model": by_model}) if by_model else out

    def _check_half_threshold(self, model: str | None) -> None:
        margin, thr = self.control_margins(model), self.materiality_of(model)
        where = "" if model is None else f" on model {model!r}"

        def key(entry: str, name: str, section: str) -> str:  # the key setting it on this model
            own = name in self._per_model(model, entry)
            return f"leakage.per_model.{model}.{entry}" if own else section

        for reading in sorted({r for r in MATERIALITY_READINGS.values() if r is not None}):
            claims = [c for c, r in MATERIALITY_READINGS.items() if r == reading]
            smallest = min(claims, key=lambda c: thr[c])
            if margin[reading] > thr[smallest] / 2:
                mkey = key("margin", reading, "leakage.controls.margin")
                tkey = key("materiality", smallest, "leakage.materiality")
                raise ConfigError(
                    f"{mkey}.{reading} = {margin[reading]} is more than half of "
                    f"{tkey}.{smallest} = {thr[smallest]}{where} (the smallest threshold judged "
                    f"on {reading}): a negative control passes while reading up to its margin, "
                    f"and a claim at its threshold must be at least twice that. Fix: lower the "
                    f"margin to at most {thr[smallest] / 2:g} or raise the threshold to at "
                    f"least {2 * margin[reading]:g}"
                    + (f" (leakage.per_model.{model} sets either for this model)" if model else "")
                )

    def model_attrs(self, model: str) -> dict:
        """What a model is, for the leakage tables: ``positional``, the ``train.variants`` type of a
        model trained here or its init twin (else empty); ``init_of``, the model an init twin or a
        ``random_init`` model ``like:`` another would have been trained into (else empty)."""
        if model.startswith("trained-"):
            variant = model.removeprefix("trained-").removesuffix("-init")
            positional = (
                self.train_variant(variant)["variant"] if variant in self.train_variants() else ""
            )
            init_of = f"trained-{variant}" if model.endswith("-init") else ""
            return {"positional": positional, "init_of": init_of}
        spec = self.model_spec(model)
        like = spec.get("like") if spec["source"] == "random_init" else None
        return {"positional": "", "init_of": str(like or "")}

    def position0_conditions(self, model: str, dataset: str) -> list[str]:
        """Forward passes whose position-0 states extraction reads for (model, dataset): the
        ``leakage.position0`` conditions of every pair a paper-2 experiment names."""
        if (model, dataset) not in self.leakage_pairs():
            return []
        return list(self.values(Position0Settings).conditions)

    def position0_inputs(self, model: str, dataset: str) -> list[str]:
        """The merged stores, one per position-0 condition, that rule ``position0`` reads."""
        return [
            paths.SCORE_STORE.format(model=model, dataset=dataset, variant=c)
            for c in self.position0_conditions(model, dataset)
        ]

    def position0_params(self) -> dict:
        """Rule ``position0``'s :class:`~causalpos.paper2.settings.Position0Settings` but the
        seed (the rule's ``seed``, which its stores record with the extraction's)."""
        for c in self.values(Position0Settings).conditions:
            check_variant("leakage.position0.conditions", c)
        return {k: v for k, v in self.settings(Position0Settings).items() if k != "seed"}

    @staticmethod
    def leakage_label(pair: tuple[str, str]) -> str:
        return f"{pair[0]}/{pair[1]}"

    def leakage_summary_stores(self) -> list[str]:
        return [paths.LEAKAGE_STORE.format(model=m, dataset=d) for m, d in self.leakage_pairs()]

    def leakage_summary_costs(self) -> dict[str, str]:
        """``{summary_cost/<model>/<dataset>: cost record}`` of every leakage summary job: the
        scorecard's power notes price a larger summary from its CPU time and peak memory, as
        the job recorded them (:func:`causalpos.scorecard.paper2_kinds.read_summary_costs`)."""
        return {
            f"summary_cost/{m}/{d}": paths.LEAKAGE_COST.format(model=m, dataset=d)
            for m, d in self.leakage_pairs()
        }

    def position0_stores(self) -> list[str]:
        return [paths.POSITION0_STORE.format(model=m, dataset=d) for m, d in self.leakage_pairs()]

    def leakage_pair_labels(self) -> list[str]:
        return [self.leakage_label(p) for p in self.leakage_pairs()]

    def leakage_experiment(self, name: str) -> list[tuple[str, str]]:
        """The (model, dataset) pairs of experiment ``name``."""
        exps = self.leakage_experiments()
        if name not in exps:
            raise ConfigError(
                f"leakage.experiments has no experiment {name!r}; defined: {sorted(exps)}"
            )
        exp = exps[name]
        return list(product(exp["models"], exp["datasets"]))

    def experiment_summary_stores(self, name: str) -> list[str]:
        return [
            paths.LEAKAGE_STORE.format(model=m, dataset=d) for m, d in self.leakage_experiment(name)
        ]

    def experiment_position0_stores(self, name: str) -> list[str]:
        return [
            paths.POSITION0_STORE.format(model=m, dataset=d)
            for m, d in self.leakage_experiment(name)
        ]

    def experiment_labels(self, name: str) -> list[str]:
        return [self.leakage_label(p) for p in self.leakage_experiment(name)]

    def experiment_has_decomposition(self, name: str) -> bool:
        pairs = self.leakage_pairs()
        # a decomposition needs some condition's causal and bidirectional runs
        return any(
            set(runs) <= set(pairs[p])
            for p in self.leakage_experiment(name)
            for runs in DECOMPOSITION_CONDITIONS.values()
        )

    def leakage_targets(self) -> list[str]:
        """Everything paper 2 builds for the configured experiments (nothing when there are none)."""
        exps = self.leakage_experiments()
        if not exps:
            return []
        self.check_leakage()
        targets = []
        for m, d in self.leakage_pairs():
            targets += [
                paths.LEAKAGE_STORE.format(model=m, dataset=d),
                paths.POSITION0_STORE.format(model=m, dataset=d),
            ]
            targets += self.figure_paths(paths.PAPER2_HEADS_FIGURE.format(model=m, dataset=d))
        targets += catalogue.paper2_table_paths()
        for name in exps:
            targets += self.figure_paths(paths.PAPER2_LAYERS_FIGURE.format(experiment=name))
            targets += self.figure_paths(paths.PAPER2_CLAIM1_FIGURE.format(experiment=name))
            targets += self.figure_paths(paths.PAPER2_POSITION0_FIGURE.format(experiment=name))
            if self.experiment_has_decomposition(name):
                targets += self.figure_paths(paths.PAPER2_SHARES_FIGURE.format(experiment=name))
                targets += self.figure_paths(paths.PAPER2_ROUTES_FIGURE.format(experiment=name))
        return targets
