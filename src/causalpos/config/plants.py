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
        layer, scale = sec.get("layer", -1), sec.get("scale")
        if isinstance(layer, bool) or not isinstance(layer, int):
            raise ConfigError(f"leakage.plant.layer must be an integer, got {layer!r}")
        if isinstance(scale, bool) or not isinstance(scale, (int, float)) or not scale > 0:
            raise ConfigError(
                f"leakage.plant.scale must be a number > 0 (the planted term's size in logit "
                f"units), got {scale!r}"
            )
        return {"layer": int(layer), "scale": float(scale)}

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
        for m in models:
            n = self.model_layers(m)
            if n is not None and not -n <= layer < n:
                raise ConfigError(
                    f"leakage.plant.layer = {layer} is outside the {n} layers of model {m!r} "
                    f"(planted variants in leakage.experiments): give a layer in 0..{n - 1}, "
                    f"or -1..-{n} counted from the last"
                )

    def leakage_plant_stream(self) -> dict:
        """``leakage.plant_stream`` ({layer, doses, profile, margin}): the dose series planted in
        the residual stream (``plant_stream<k>`` runs the k-th dose:
        :mod:`causalpos.capture.stream`); layer negative counts from the last."""
        sec = self.config["leakage"]["plant_stream"]
        layer, doses = sec["layer"], list(sec["doses"])
        if isinstance(layer, bool) or not isinstance(layer, int):
            raise ConfigError(f"leakage.plant_stream.layer must be an integer, got {layer!r}")
        bad = [d for d in doses if isinstance(d, bool) or not isinstance(d, (int, float)) or d <= 0]
        if bad or not doses or sorted(doses) != doses or len(set(doses)) != len(doses):
            raise ConfigError(
                f"leakage.plant_stream.doses must be increasing numbers > 0 (dose 0 is the run "
                f"without a plant_stream atom), got {doses!r}"
            )
        return {
            "layer": int(layer),
            "doses": [float(d) for d in doses],
            "profile": str(sec["profile"]),
        }

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
        layer = self.leakage_plant_stream()["layer"]
        for m in sorted({m for m, _ in planted}):
            n = self.model_layers(m)
            if n is not None and not -n <= layer < n:
                raise ConfigError(
                    f"leakage.plant_stream.layer = {layer} is outside the {n} layers of model "
                    f"{m!r} (plant_stream variants in leakage.experiments): give a layer in "
                    f"0..{n - 1} (a lower one, so that the term propagates)"
                )
