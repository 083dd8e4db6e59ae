"""The ``leakage.plant`` and ``leakage.plant_stream`` keys: the known terms planted variants add to
one layer's scores or to the residual stream, checked against the models' layers. Pure."""

from __future__ import annotations

from causalpos.config.common import ConfigError, Section
from causalpos.models.variants import parse_variant


class PlantSection(Section):
    """The planted variants' terms (paper 2's positive controls and dose series)."""

    def leakage_plant(self) -> dict:
        """``leakage.plant`` ({layer, scale}): the term a planted variant (``plant_query``) adds to
        one layer's scores, b_i = scale · log(1 + i) (:func:`causalpos.models.variants.plant_term`);
        layer negative counts from the last."""
        sec = self.config["leakage"].get("plant") or {}
        layer, scale = _integer("leakage.plant.layer", sec.get("layer", -1)), sec.get("scale")
        if isinstance(scale, bool) or not isinstance(scale, (int, float)) or not scale > 0:
            raise ConfigError(
                f"leakage.plant.scale must be a number > 0 (the planted term's size in logit "
                f"units), got {scale!r}"
            )
        return {"layer": layer, "scale": float(scale)}

    def planted_models(self) -> list[str]:
        """Models some experiment runs a planted variant on."""
        return sorted(
            {
                m
                for (m, _), variants in self.leakage_pairs().items()
                if any(parse_variant(v).plant is not None for v in variants)
            }
        )

    def check_plant(self) -> None:
        """``leakage.plant.layer`` within the layers of every planted model whose layer count is
        known at config time (:meth:`model_layers`); a ConfigError naming the key otherwise."""
        models = self.planted_models()
        if not models:
            return
        layer = self.leakage_plant()["layer"]
        hint = ", or -1..-{n} counted from the last"
        self._check_layer("leakage.plant", layer, models, "planted variants", hint)

    def leakage_plant_stream(self) -> dict:
        """``leakage.plant_stream`` ({layer, doses, profile, margin}): the dose series planted in
        the residual stream (``plant_stream<k>`` runs the k-th dose:
        :mod:`causalpos.capture.stream`); layer negative counts from the last."""
        sec = self.config["leakage"]["plant_stream"]
        layer, doses = _integer("leakage.plant_stream.layer", sec["layer"]), list(sec["doses"])
        bad = [d for d in doses if isinstance(d, bool) or not isinstance(d, (int, float)) or d <= 0]
        if bad or not doses or sorted(doses) != doses or len(set(doses)) != len(doses):
            raise ConfigError(
                f"leakage.plant_stream.doses must be increasing numbers > 0 (dose 0 is the run "
                f"without a plant_stream atom), got {doses!r}"
            )
        return {"layer": layer, "doses": [float(d) for d in doses], "profile": str(sec["profile"])}

    def stream_dose_spec(self, variant: str) -> dict:
        """The extraction params of a ``plant_stream<k>`` variant: {layer, dose, profile}."""
        k = parse_variant(variant).stream
        sec = self.leakage_plant_stream()
        if not 1 <= k <= len(sec["doses"]):
            raise ConfigError(
                f"variant {variant!r} plants dose {k} of leakage.plant_stream.doses, which has "
                f"{len(sec['doses'])}: add doses or use plant_stream1..plant_stream"
                f"{len(sec['doses'])}"
            )
        return {"layer": sec["layer"], "dose": sec["doses"][k - 1], "profile": sec["profile"]}

    def check_plant_stream(self) -> None:
        """Every ``plant_stream<k>`` variant's dose configured, and ``leakage.plant_stream.layer``
        within the layers of every model that runs one, where its layer count is known at config
        time (:meth:`model_layers`); a ConfigError naming the key otherwise."""
        planted = {
            (m, v)
            for (m, _), variants in self.leakage_pairs().items()
            for v in variants
            if parse_variant(v).stream
        }
        if not planted:
            return
        for _, v in sorted(planted):
            self.stream_dose_spec(v)
        layer, models = self.leakage_plant_stream()["layer"], sorted({m for m, _ in planted})
        hint = " (a lower one, so that the term propagates)"
        self._check_layer("leakage.plant_stream", layer, models, "plant_stream variants", hint)

    def _check_layer(self, key: str, layer: int, models: list[str], what: str, hint: str) -> None:
        """``<key>.layer`` within the layers of each of ``models`` where known at config time, else
        a ConfigError ending in ``hint`` (``{n}``: the layers)."""
        for m in models:
            n = self.model_layers(m)
            if n is not None and not -n <= layer < n:
                raise ConfigError(
                    f"{key}.layer = {layer} is outside the {n} layers of model {m!r} ({what} in "
                    f"leakage.experiments): give a layer in 0..{n - 1}" + hint.format(n=n)
                )


def _integer(key: str, value):
    """``value`` if it is an integer (not a bool), else a ConfigError naming ``key``."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(f"{key} must be an integer, got {value!r}")
    return value
