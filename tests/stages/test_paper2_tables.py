"""Stage aggregate_leakage (causalpos.stages.paper2_tables): it writes every table the output
catalogue declares for the rule, and refuses outputs that are not those."""

from __future__ import annotations

import pandas as pd
import pytest

import causalpos.stages.paper2_tables as stage
from causalpos.catalogue import PAPER2_RULE, PAPER2_TABLES, rule_tables


def _outputs(tmp_path) -> dict[str, str]:
    return {t.output: str(tmp_path / t.path) for t in rule_tables(PAPER2_RULE)}


def test_it_writes_every_table_of_the_catalogue(tmp_path):
    outputs = _outputs(tmp_path)
    tabs = stage.aggregate_leakage({}, {}, outputs)
    assert set(tabs) == set(PAPER2_TABLES) and set(outputs) == {*PAPER2_TABLES, "markdown"}
    for name in PAPER2_TABLES:
        df = pd.read_csv(outputs[name])
        assert list(df.columns) == list(tabs[name].columns) and df.empty, name
    assert (tmp_path / "results/stats/paper2_tables.md").read_text().startswith("#")
    written = {p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*") if p.is_file()}
    assert written == {t.path for t in rule_tables(PAPER2_RULE)}


@pytest.mark.parametrize("edit", ["drop", "add"])
def test_outputs_other_than_the_catalogues_are_refused_before_anything_is_written(tmp_path, edit):
    outputs = _outputs(tmp_path)
    if edit == "drop":
        del outputs["heads"]
        match = r"missing \['heads'\], undeclared \[\]"
    else:
        outputs["extra"] = str(tmp_path / "results/stats/paper2_extra.csv")
        match = r"missing \[\], undeclared \['extra'\]"
    with pytest.raises(ValueError, match=match):
        stage.aggregate_leakage({}, {}, outputs)
    assert not (tmp_path / "results").exists()
