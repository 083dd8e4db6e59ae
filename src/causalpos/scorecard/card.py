"""The reproduction scorecard: every row family of both papers, in order, over the pipeline's
tables (:func:`build_scorecard`). Each input table is read once; a family whose table is absent,
empty or lacks one of the family's required columns gets None for it, and its rows read "not
run" with the reason."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path

import pandas as pd

import causalpos.scorecard.paper1 as paper1
import causalpos.scorecard.paper2 as paper2
import causalpos.scorecard.paper2_claim4 as paper2_claim4
import causalpos.scorecard.paper2_doses as paper2_doses
import causalpos.scorecard.paper2_headline as paper2_headline
import causalpos.scorecard.paper2_position0 as paper2_position0
from causalpos.scorecard.engine import columns, declared_rows, join_columns
from causalpos.scorecard.engine_groups import group_columns, grouped_rows
from causalpos.scorecard.materiality import Materiality
from causalpos.scorecard.rows import (
    EXPECTED_MAP,
    MEASURED,
    NOT_RUN,
    PER_PROMPT,
    PathLike,
    Row,
    check_sections,
    field_text,
    load_targets,
)
from causalpos.verdicts import TESTED


@dataclass(frozen=True)
class Input:
    """A table a row family reads: its key in ``paths`` (a key of :data:`rows.SOURCES`) and the
    columns the family needs, space-separated (a table without them reaches it as None)."""

    key: str
    columns: str = ""


#: Note of a row whose quantity fails its own negative control: measured, not scored.
UNSCORED = (
    "not scored: the per-prompt reading fails its negative control (0.46 on a run with no "
    "positional input), so no verdict rests on it; its rule says {verdict}"
)


class Family:
    """A row family: ``build(*tables, targets) -> rows``, one table per input, in order.
    ``reading``: the quantity its rows' verdicts use, where a row does not name its own.
    ``scored=False``: the family's quantity fails its negative control; its rows are reported as
    measured, the verdict its rule would give kept in the note (:data:`UNSCORED`)."""

    def __init__(
        self,
        build: Callable[..., list[Row]],
        *inputs: Input,
        reading: str = "",
        scored: bool = True,
    ):
        self.build = build
        self.inputs = inputs
        self.reading = reading
        self.scored = scored

    def rows(self, tables, T: Mapping) -> list[Row]:
        out = self.build(*tables, T)
        for r in out:
            r.reading = r.reading or self.reading
            r.section = r.section or r.paper
            if not self.scored and r.reading == PER_PROMPT and r.verdict in TESTED:
                note = UNSCORED.format(verdict=r.verdict)
                r.note = f"{note}; {r.note}" if r.note else note
                r.verdict = MEASURED
        return out

    def inputs_for(self, T: Mapping) -> tuple[Input, ...]:
        """The tables the family reads (under the targets ``T``)."""
        return self.inputs

    def __repr__(self) -> str:
        return f"Family({self.build.__name__}, {', '.join(i.key for i in self.inputs)})"


class Declared(Family):
    """The rows of a declarative target (:mod:`causalpos.scorecard.engine`): its table, columns
    and rule come from its entry in the targets; ``kw`` as :class:`Family` (``reading``,
    ``scored``)."""

    def __init__(self, name: str, **kw):
        super().__init__(self._rows, **kw)
        self.name = name

    def _rows(self, table, raw, *rest) -> list[Row]:
        """Over groups of rows (``each``) or row by row; ``rest``: a join's table, the targets."""
        t = rest[-1][self.name]
        return grouped_rows(table, t) if "each" in t else declared_rows(table, t, raw, *rest[:-1])

    def inputs_for(self, T: Mapping) -> tuple[Input, ...]:
        """Its table with the columns it needs, and as read (which says whether a table that
        reaches it as None is absent or lacks a column); a ``join`` with a ``table``: that
        table with the columns the join reads."""
        t = T[self.name]
        need = group_columns(t) if "each" in t else columns(t)
        own = (Input(t["table"], need), Input(t["table"]))
        if other := (t.get("join") or {}).get("table"):
            return (*own, Input(other, join_columns(t)))
        return own

    def __repr__(self) -> str:
        return f"Declared({self.name})"


def unscored_rows(T: Mapping) -> list[Row]:
    """The targets.yaml ``unscored`` entries: claims this pipeline does not measure, and why."""
    return [
        Row(
            u["paper"],
            u["label"],
            field_text(u, "claim"),
            field_text(u, "paper_value"),
            "",
            NOT_RUN,
            field_text(u, "falsified_if"),
            field_text(u, "why"),
            "",
            "not measured",
        )
        for u in T.get("unscored", [])
    ]


_P0 = "model dataset condition std"
_SHARE = "model dataset condition window target share_causal_mask"
_SINKS = "model dataset tau variant n_sink_heads"
POSITION0 = "position-0 states"
INDEX = "non-relative index of the mean maps"

#: Every row family, in the scorecard's row order.
FAMILIES: tuple[Family, ...] = (
    # paper 1
    Family(paper1.theory_rows, Input("theory"), reading="closed form"),
    Family(
        paper1.simulation_rows, Input("sim_index", "setting layer index ci_lo ci_hi"), reading=INDEX
    ),
    Family(
        paper1.llm_rows, Input("llm_index", "model dataset layer index ci_lo ci_hi"), reading=INDEX
    ),
    Declared("trained_vs_init"),
    Declared("llm_layer1_share"),
    Declared("llm_first_keys"),
    Declared("fig3_nearby"),
    Declared("trained_vs_init_share"),
    Declared("llm_vs_random_share"),
    # paper 2: the headline (expected-map) reading, its controls, the per-prompt rows
    Declared("claim1_logit"),
    Family(
        paper2_headline.claim1_twin_rows,
        Input("headline", "model dataset variant window target leakage leakage_lo position_free"),
        Input("twin_contrast", "model dataset twin difference difference_lo paired pairing"),
    ),
    Family(
        paper2_headline.control_rows,
        Input("controls", "model dataset variant target negative negative_lo planted"),
    ),
    Family(
        paper2_doses.dose_series_rows,
        Input(
            "plant_doses",
            "model dataset series variant dose layer target leakage_lo leakage_hi step_lo step_hi "
            "margin dose0_is_control",
        ),
    ),
    Family(paper2.claim10_rows, Input("decomposition_headline", _SHARE)),
    Family(
        paper2_claim4.claim4_rows,
        Input("decomposition_headline", _SHARE),
        Input(
            "decomposition_components",
            "model dataset condition landmark window share_causal_mask_paper share_causal_mask "
            "share_artefact share_causal_mask_ablation share_causal_mask_mechanism "
            "mask_free_status",
        ),
        Input("scale_contrast", "model model_b dataset condition window target difference"),
    ),
    Family(
        paper2_headline.claim2_rows,
        Input(
            "decomposition_headline",
            "model dataset condition window target residual_stream_lo causal_mask_lo",
        ),
    ),
    Family(paper2.headline_controls_rows, Input("decomposition_headline", _SHARE)),
    Declared("additivity"),
    Declared("additivity_ablation"),
    Family(
        paper2_position0.bos_rows,
        Input("bos_effects", "model dataset intervention bos_window effect effect_lo"),
        Input("position0", _P0),
        Input("sink_heads", _SINKS),
        reading=PER_PROMPT,
        scored=False,
    ),
    Family(
        paper2_position0.bos_headline_rows,
        Input("bos_headline", "model dataset replacement bos_reading window effect effect_lo"),
        Input("position0", _P0),
        Input("sink_heads", _SINKS),
    ),
    Declared("claim7_position0", reading=POSITION0),
    Family(
        paper2.claim3_rows,
        Input("decomposition_headline", "model dataset condition window target"),
        Input("depth_trend", "model dataset variant trend"),
        reading=EXPECTED_MAP,
        scored=False,  # its sliding-window rows (per-prompt depth trend)
    ),
    Declared("claim2_kinds"),
    Declared("claim3_kinds"),
    Declared("claim3_window"),
    Declared("claim3_base"),
    Family(
        paper2.claim3_order_rows,
        Input(
            "decomposition_headline",
            "model dataset condition window target residual_stream residual_stream_lo residual_stream_hi",
        ),
    ),
    Declared("claim6_headline"),
    Declared("claim6_linear", reading=PER_PROMPT, scored=False),
    Declared("claim8_content", reading=POSITION0),
    Declared("sink_heads", reading="attention to key 0"),
    # both papers: the claims no table measures
    Family(unscored_rows),
)


def read_table(path: PathLike) -> pd.DataFrame | None:
    """The table at ``path``; None when absent or empty (e.g. a config with no BOS experiment)."""
    if path is None or not Path(path).is_file():
        return None
    try:
        df = pd.read_csv(path)
    except pd.errors.EmptyDataError:
        return None
    return None if df.empty else df


def with_columns(df: pd.DataFrame | None, columns: str) -> pd.DataFrame | None:
    """``df`` if it has every one of the space-separated ``columns``, else None (its rows read
    "not run")."""
    return df if df is not None and set(columns.split()) <= set(df.columns) else None


def build_scorecard(
    paths: Mapping[str, PathLike],
    extra: Callable[[Mapping[str, PathLike]], list[Row]] | None = None,
    targets: PathLike | Mapping = None,
    materiality: Materiality | Mapping | None = None,
) -> pd.DataFrame:
    """The scorecard from the pipeline's tables.

    ``paths``: the inputs of :data:`FAMILIES` (keys of :data:`rows.SOURCES`; missing or None:
    their rows read "not run") and optionally ``targets`` (the targets YAML, overridden by
    ``targets``; default the packaged file). ``extra`` adds rows built from ``paths``.
    ``materiality``: paper 2's thresholds (config ``leakage.materiality``; None: the defaults).
    The first column is the row's section; a verdict its section does not allow is a ValueError.
    """
    spec = load_targets(targets if targets is not None else paths.get("targets"))
    if not isinstance(materiality, Materiality):
        materiality = Materiality.from_params(materiality)
    T = materiality.apply(dict(spec["targets"]))
    T["paper_models"] = spec.get("paper_models", {})
    keys = {i.key for f in FAMILIES for i in f.inputs_for(T)}
    tables = {key: read_table(paths.get(key)) for key in sorted(keys)}
    rows: list[Row] = []
    for family in FAMILIES:
        inputs = family.inputs_for(T)
        rows += family.rows([with_columns(tables[i.key], i.columns) for i in inputs], T)
    if extra is not None:
        rows += extra(paths)
    for r in rows:
        r.section = r.section or r.paper
    card = pd.DataFrame([asdict(r) for r in rows])
    card = card[["section", *(c for c in card.columns if c != "section")]]
    check_sections(card)
    return card
