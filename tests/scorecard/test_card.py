"""The scorecard over the pipeline's tables (causalpos.scorecard.card): a missing, empty or
incomplete table makes its rows "not run", each table is read once."""

from __future__ import annotations

import pandas as pd

from causalpos import scorecard as S


def test_missing_tables_are_not_run_rather_than_dropped():
    card = S.build_scorecard({})
    assert set(card["verdict"]) == {S.NOT_RUN}
    assert {"paper 1", "paper 2"} == set(card["paper"])
    assert set(card["section"]) == set(S.SECTIONS) and list(card.columns)[0] == "section"
    assert (card["reading"] != "").all()  # every row names its reading
    for label in ("Table 9", "Fig. 5", "claim 1", "claim 7", "§4.1"):
        assert card["target"].str.contains(label, regex=False).any(), label
    assert (card["note"].str.len() > 0).all()  # every "not run" says why
    assert (card["falsified_if"].str.len() > 0).all()


def test_empty_or_header_only_tables_are_not_run(tmp_path):
    (tmp_path / "empty.csv").write_text("")
    (tmp_path / "header.csv").write_text("model,dataset,intervention,bos_window,effect\n")
    card = S.build_scorecard(
        {"bos_effects": tmp_path / "empty.csv", "decomposition": tmp_path / "header.csv"}
    )
    rows = card[card["target"].isin(["Table 9", "claim 4", "claim 10"])]
    assert len(rows) == 3 and (rows["verdict"] == S.NOT_RUN).all()


def test_each_input_table_is_read_once_and_a_table_lacking_columns_gives_not_run(
    tmp_path, monkeypatch
):
    from causalpos.scorecard.rows import SOURCES

    T = S.load_targets()["targets"]  # a declarative target names its table there
    assert {i.key for f in S.FAMILIES for i in f.inputs_for(T)} == set(SOURCES)
    paths = {}
    for key in SOURCES:  # a table with none of the columns any family needs (theory: empty)
        paths[key] = tmp_path / f"{key}.csv"
        paths[key].write_text("" if key == "theory" else "unrelated\n1\n")
    reads = []
    read_csv = pd.read_csv
    monkeypatch.setattr(pd, "read_csv", lambda p, *a, **k: reads.append(p) or read_csv(p, *a, **k))
    card = S.build_scorecard(paths)
    assert sorted(reads) == sorted(paths.values())  # llm_index.csv feeds four families
    assert len(card) == len(S.build_scorecard({}))
    assert (card["verdict"] == S.NOT_RUN).all()
    # each row names the table it came from (or none: unscored rows, the exact computation)
    assert set(card["source"]) - set(SOURCES.values()) <= {
        "",
        "exact computation (causalpos.paper1.theory.monotonicity_violations)",
    }
