"""Paper 2's materiality thresholds: the size each claim must reach to be reproduced, declared
once per claim in the config (``leakage.materiality``, per model under
``leakage.per_model.<model>.materiality``) and handed over as the scorecard rule's params. A
target names its threshold with ``materiality: <field>`` (:meth:`Materiality.apply`); a row on
one model reads that model's (:func:`for_model`). The defaults are the config schema's
(``tests/scorecard/test_materiality.py`` checks both agree)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from typing import Any

from causalpos.paper2.settings import MaterialitySettings
from causalpos.settings import check_keys


@dataclass(frozen=True)
class Materiality(MaterialitySettings):
    """The materiality threshold of each of paper 2's claims (:class:`MaterialitySettings`), with
    each model's own."""

    #: model -> its own thresholds (``leakage.per_model.<model>.materiality`` over these).
    per_model: Mapping[str, Materiality] = field(default_factory=dict, metadata={"config": None})

    @classmethod
    def from_params(cls, params: Mapping[str, Any] | None) -> Materiality:
        """The thresholds from the scorecard rule's params (None: the defaults), with each
        model's under ``per_model`` (complete, as the config resolves them); a key that is no
        claim's raises, naming the allowed ones."""
        if params is None:
            return cls()
        params = dict(params)
        per_model = params.pop("per_model", None) or {}
        names = {f.name for f in fields(cls) if f.metadata.get("config")}
        for where, p in [("leakage.materiality", params)] + [
            (f"leakage.per_model.{m}.materiality", p) for m, p in per_model.items()
        ]:
            check_keys(cls, p, names, where)
        base = cls(**{k: float(v) for k, v in params.items()})
        models = {
            m: replace(base, **{k: float(v) for k, v in p.items()}) for m, p in per_model.items()
        }
        return replace(base, per_model=models)

    def apply(self, targets: Mapping[str, dict]) -> dict[str, dict]:
        """``targets`` with each entry that names a field (``materiality: <field>``) given that
        threshold (``threshold``) and each model's own where it has one (``thresholds``: model
        -> threshold, read by :func:`for_model`); an entry naming no field of this class is a
        ValueError."""
        names = {f.name for f in fields(self) if f.metadata.get("config")}
        out = dict(targets)
        for key, t in targets.items():
            name = t.get("materiality") if isinstance(t, Mapping) else None
            if name is None:
                continue
            if name not in names:
                raise ValueError(
                    f"targets.yaml {key}: materiality {name!r} is no threshold of "
                    f"leakage.materiality; allowed: {sorted(names)}"
                )
            own = {m: float(getattr(x, name)) for m, x in self.per_model.items()}
            out[key] = {**t, "threshold": float(getattr(self, name)), "thresholds": own}
        return out


def for_model(t: Mapping, *models: str) -> dict:
    """Target ``t`` with the threshold of ``models`` (:meth:`Materiality.apply`'s
    ``thresholds``): a row on one model reads that model's; a row comparing several the largest
    of theirs (no model's claim is judged below its own threshold); ``t`` itself where none has
    its own."""
    own = t.get("thresholds") or {}
    values = [own.get(m, t.get("threshold")) for m in models]
    values = [float(v) for v in values if v is not None]
    if not own or not values:
        return dict(t)
    return {**t, "threshold": max(values)}
