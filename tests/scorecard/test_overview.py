"""The README's plain-language overview of a scorecard (causalpos.scorecard.overview), on a
synthetic scorecard: what came out per paper, on which models, the main numbers with their
intervals, what stays undecided."""

from __future__ import annotations

import re
from pathlib import Path

import pandas as pd
import pytest

from causalpos import scorecard as S
from causalpos.scorecard.overview import (
    OVERVIEW_BEGIN,
    OVERVIEW_END,
    readme_overview,
    update_overview,
)

README = Path(__file__).resolve().parents[2] / "README.md"

#: (section, target, measured, verdict) of a scorecard like the default run's.
ROWS = [
    ("paper 1", "Fig. 1 S(3,2)", "0.15082", "differs"),
    ("paper 1", "§4.1 nearby keys score higher (layers 3-4)", "layer 3: 223 of 1225", "differs"),
    (
        "paper 1",
        "Fig. 5 (smollm2-135m, kjv-first256)",
        "L1 0.0431 [0.03, 0.06]; layers >= 2: 29",
        "reproduced",
    ),
    (
        "paper 1",
        "Fig. 5 (gemma3-270m, kjv-first256)",
        "L1 0.455 [0.429, 0.49]; layers >= 2",
        "differs",
    ),
    ("paper 1", "Fig. 5 (smollm2-135m-random, kjv-first256)", "L1 0.01 [0, 0.02]", "measured"),
    (
        "paper 1",
        "Fig. 5 first keys (smollm2-135m, kjv-first256)",
        "keys 1..4: L2 -0.243 [-0.382, -0.104] (logit units); all",
        "differs",
    ),
    ("paper 1", "Fig. 2 (l2_a000)", "L1 0 [0, 0.0075]", "inconclusive"),
    ("paper 1", "Fig. 2 (l2_a020)", "L1 0 [0, 0.0074]", "inconclusive"),
    (
        "paper 2",
        "claim 1 (smollm2-135m, kjv-chunks128)",
        "0.00902 [0.006, 0.012]; negative control in the model's units",
        "reproduced",
    ),
    (
        "paper 2",
        "claim 1 (smollm2-135m-random, kjv-chunks128)",
        "0.0001 [-0.001, 0.001]",
        "measured",
    ),
    (
        "paper 2",
        "claim 2 (gemma3-270m, kjv-chunks640-bos)",
        "residual 0.0001 [-0.0012, 0.0034]; causal mask 0.3 [0.2, 0.4]",
        "inconclusive",
    ),
    (
        "paper 2",
        "claim 2 (per layer kind) (gemma3-270m, kjv-chunks640-bos, sliding512: 15 layers)",
        "residual stream 0.1 [0, 0.2]",
        "inconclusive",
    ),
    (
        "checks",
        "claim 2, causal-mask component (gemma3-270m, kjv-chunks640-bos)",
        "causal mask 0.3 [0.2, 0.4]",
        "holds",
    ),
    (
        "paper 2",
        "claim 4 (smollm2-135m, kjv-chunks128-bos)",
        "0.63 [0.54, 0.71] (landmark counted, ablation log-attention); artefact-free 0.91",
        "reproduced",
    ),
    (
        "paper 2",
        "claim 4, mechanism mapping (smollm2-135m, kjv-chunks128-bos)",
        "0.42 [0.36, 0.5] (landmark counted); landmark modelled 0.54 [0.44, 0.67]",
        "measured",
    ),
    (
        "paper 2",
        "claim 4 (gemma3-270m, kjv-chunks640-bos)",
        "landmark counted: ablation mapping 0.91 [0.52, 1.2]; paper 2's own reading -190",
        "measured",
    ),
    (
        "paper 2",
        "claim 4 (smollm2-135m-random, kjv-chunks128)",
        "landmark counted: ablation mapping 1 [1, 1]; mechanism mapping 1 [1, 1]",
        "measured",
    ),
    (
        "paper 2",
        "Table 9, headline (smollm2-135m, mean, sink_heads, early32)",
        "0.038 [-0.28, 0.29]",
        "differs",
    ),
    (
        "paper 2",
        "Table 9, headline (smollm2-135m, mean, causal_total, early32)",
        "-0.77 [-4.07, 3.13]",
        "inconclusive",
    ),
    (
        "paper 2",
        "Table 9, headline (smollm2-135m, all_token, causal_total, early32)",
        "0.9 [-2, 3]",
        "inconclusive",
    ),
    ("paper 2", "claim 3 (NTK)", "", "not run"),
    (
        "controls",
        "negative control (smollm2-135m, kjv-chunks128, identity_rope+ring, logit)",
        "0 [-1, 1]",
        "passed",
    ),
]


def _card() -> pd.DataFrame:
    return pd.DataFrame(
        [
            {"section": s, "paper": "paper 2" if s in ("checks", "controls") else s}
            | {"target": t, "claim": "c", "paper_value": "p", "measured": m, "verdict": v}
            | {"falsified_if": "x", "note": ""}
            for s, t, m, v in ROWS
        ]
    )


def test_the_overview_says_per_paper_what_came_out_with_the_main_numbers():
    text = readme_overview(_card())
    assert text.startswith(OVERVIEW_BEGIN + "\n") and text.endswith(OVERVIEW_END + "\n")
    p1, p2, source = text.splitlines()[1:-1]
    assert p1 == (
        "**Paper 1** (the causal mask alone makes attention scores depend on absolute position): "
        "of its 7 tests, 1 came out as the paper says, 4 differ and 2 stay undecided. Its main "
        "numbers, with their intervals: Fig. 5 (smollm2-135m, kjv-first256): L1 0.0431 [0.03, "
        "0.06] (as the paper says); Fig. 5 (gemma3-270m, kjv-first256): L1 0.455 [0.429, 0.49] "
        "(differs); Fig. 5 first keys (smollm2-135m, kjv-first256): keys 1..4: L2 -0.243 "
        "[-0.382, -0.104] (differs). Undecided: Fig. 2 (2 rows)."
    )
    assert p2 == (
        "**Paper 2** (RoPE decoders carry absolute position, through the causal mask and the "
        "residual stream): of its 7 tests, 2 came out as the paper says, 1 differ and 4 stay "
        "undecided. Its main numbers, with their intervals: claim 1 (smollm2-135m, "
        "kjv-chunks128): 0.00902 [0.006, 0.012] (as the paper says); claim 2 (gemma3-270m, "
        "kjv-chunks640-bos; the mask-free route, ablation mapping): residual 0.0001 [-0.0012, "
        "0.0034] (undecided); claim 4 (smollm2-135m, kjv-chunks128-bos; causal mask = direct + "
        "indirect routes): 0.63 [0.54, 0.71], mechanism mapping 0.42 [0.36, 0.5] (as the paper "
        "says); claim 4 (gemma3-270m, kjv-chunks640-bos; causal mask = direct + indirect "
        "routes): landmark counted: ablation mapping 0.91 [0.52, 1.2] (measured, not judged). "
        "Undecided: claim 2, claim 2 (per layer kind), Table 9, headline (2 rows)."
    )
    # claim 4 is reported where measured (the paper gives no share at these scales), but not a
    # random-init twin's (its claim 1 is measured, not judged)
    # a check, a control, a baseline (measured) and a row not run are no test of a claim
    assert "causal-mask component" not in text and "smollm2-135m-random" not in text
    assert "negative control" not in text and "NTK" not in text
    assert source.startswith("Every number above is a cell of `results/report/scorecard.csv`")


def test_the_overview_counts_what_the_digest_counts():
    """Both blocks are made from one scorecard: the overview's tests per paper add up to the
    digest's tests of the papers' claims."""
    card = _card()
    overview, digest = readme_overview(card), S.readme_summary(card)
    tests = [int(n) for n in re.findall(r"of its (\d+) tests", overview)]
    total = int(re.search(r"The papers' claims: (\d+) tests", digest).group(1))
    assert sum(tests) == total == 14


def test_a_paper_with_no_test_says_so():
    card = _card()
    card = card[card["section"] != "paper 1"]
    p1 = readme_overview(card).splitlines()[1]
    assert p1.endswith("absolute position): no test of its claims ran in this run.")


def test_update_rewrites_both_blocks_of_a_readme_and_names_a_missing_one(tmp_path, capsys):
    from causalpos.cli import main

    csv = tmp_path / "scorecard.csv"
    _card().to_csv(csv, index=False)
    readme = tmp_path / "README.md"
    readme.write_text(
        f"# x\n{OVERVIEW_BEGIN}\nold overview\n{OVERVIEW_END}\n\nmid\n"
        f"{S.SUMMARY_BEGIN}\nold digest\n{S.SUMMARY_END}\nend\n"
    )
    assert main(["summary", str(csv), "--update", str(readme)]) == 0
    new = readme.read_text()
    assert "old overview" not in new and "old digest" not in new
    assert "**Paper 2** (RoPE decoders" in new and "The papers' claims: 14 tests" in new
    assert new.startswith("# x\n" + OVERVIEW_BEGIN) and new.endswith(S.SUMMARY_END + "\nend\n")
    same = readme_overview(_card(), source=str(csv))
    assert update_overview(new, same) == new  # the same scorecard: unchanged
    with pytest.raises(ValueError, match="no overview block"):
        update_overview("# none\n", readme_overview(_card()))
    # a README with the digest's block only: the digest is written, the missing block named
    readme.write_text(f"# y\n{S.SUMMARY_BEGIN}\nold\n{S.SUMMARY_END}\n")
    assert main(["summary", str(csv), "--update", str(readme)]) == 0
    assert "The papers' claims: 14 tests" in readme.read_text()
    assert "digest written; the README has no overview block" in capsys.readouterr().err


def test_the_readme_opens_what_was_reproduced_with_the_overview_block():
    """The README's "What was reproduced" starts with the overview block, before the digest;
    its text is the generator's (a paragraph per paper) or, until the default run's scorecard
    fills it, the line that says how it is filled."""
    text = README.read_text()
    section = text.split("## What was reproduced\n", 1)[1]
    assert section.lstrip().startswith(OVERVIEW_BEGIN)
    i, j = section.index(OVERVIEW_BEGIN), section.index(OVERVIEW_END)
    assert j < section.index(S.SUMMARY_BEGIN)
    lines = section[i:j].splitlines()[1:]
    if lines == [PLACEHOLDER]:
        return
    assert lines[0].startswith("**Paper 1** (") and lines[1].startswith("**Paper 2** (")
    assert lines[2].startswith("Every number above is a cell of `results/report/scorecard.csv`")


#: The overview's text until the default run's scorecard fills it.
PLACEHOLDER = (
    "*(A plain-language overview per paper, generated from the default run's scorecard by "
    "`causalpos summary --update README.md`.)*"
)
