"""Per-item captions for ``snakemake --report`` (causalpos.io.captions), and every caption of
workflow/report/ rendered as the report renders it: no docutils system message in any."""

from __future__ import annotations

import re
import textwrap
from pathlib import Path
from types import SimpleNamespace

import pytest

from causalpos.io.captions import item_caption, render_caption
from tests.wfutil import REPO
from tests.workflow.test_report_categories import _categories

CAPTIONS = sorted((REPO / "workflow" / "report").glob("*.rst"))
#: An item's names as causalpos.config.report gives them (names with '-', '.', '_' and a '/').
NAMES = {
    "figure": "App. E",
    "model": "trained-rope-init",
    "dataset": "kjv-first24",
    "variant": "identity_rope+bidirectional",
    "experiment": "smoke_2.b",
    # a table's (workflow/report/table.rst: causalpos.catalogue's generated caption)
    "holds": "Leakage per run, with its interval",
    "rule": "aggregate_leakage",
}


def _snakemake_render(text: str, config: dict | None = None) -> str:
    """``text`` as Snakemake's report renders a caption (snakemake/report/__init__.py,
    FileRecord.render): the category targets appended, then Jinja with ``snakemake`` (a family
    job's: no wildcards), ``categories`` and ``files``."""
    from jinja2 import Environment

    cats = sorted(c for c in _categories() if "{" not in c)
    links = "\n\n.. _Workflow: javascript:show_panel('workflow')\n"
    links += ".. _Statistics: javascript:show_panel('statistics')\n"
    links += "".join(f".. _{c}: javascript:app.showCategory('{c}')\n" for c in cats)
    job = SimpleNamespace(wildcards=SimpleNamespace(), config=config or {}, params={})
    env = Environment(trim_blocks=True, lstrip_blocks=True)
    return env.from_string(text + links).render(snakemake=job, categories={}, files=[])


def _system_messages(rst: str) -> list[str]:
    """docutils' system messages (warnings and errors) of ``rst``, as text."""
    from docutils import nodes
    from docutils.core import publish_doctree

    tree = publish_doctree(rst, settings_overrides={"report_level": 5, "halt_level": 5})
    return [m.astext() for m in tree.findall(nodes.system_message)]


def test_render_caption_fills_the_items_names_and_refuses_a_missing_one():
    out = render_caption("model ``{{ item.model }}`` on {{ item.dataset }}", NAMES)
    assert out == "model ``trained-rope-init`` on kjv-first24"
    from jinja2 import UndefinedError

    with pytest.raises(UndefinedError, match="model"):
        render_caption("model {{ item.model }}", {"dataset": "d"})


def test_item_caption_writes_one_file_per_item_and_only_when_its_text_changes(tmp_path):
    template = tmp_path / "t.rst"
    template.write_text("of ``{{ item.model }}``\n")
    out = tmp_path / "captions"
    a = Path(item_caption(template, {"model": "m"}, out, "m/d"))
    assert a.is_absolute() and a.read_text() == "of ``m``\n" and a.name.startswith("t.m_d.")
    b = Path(item_caption(template, {"model": "m"}, out, "m_d"))  # the same once '/' is cut
    assert b != a
    mtime = a.stat().st_mtime_ns
    assert Path(item_caption(template, {"model": "m"}, out, "m/d")) == a
    assert a.stat().st_mtime_ns == mtime  # unchanged text: not rewritten
    item_caption(template, {"model": "n"}, out, "m/d")
    assert a.read_text() == "of ``n``\n"
    # a cluster job's Snakemake: the path, nothing written
    assert not Path(
        item_caption(template, {"model": "x"}, tmp_path / "none", "x", write=False)
    ).exists()
    assert not (tmp_path / "none").exists()


@pytest.mark.parametrize("caption", CAPTIONS, ids=lambda p: p.name)
def test_every_caption_renders_without_a_docutils_message(caption):
    """Each caption as the report renders it: an item's template (``item.*``) filled first with
    an item's names, then Snakemake's Jinja and docutils. A caption naming
    ``snakemake.wildcards`` would render empty (no report rule has wildcards: one job draws a
    family's figures), which is how App. E's read "every layer of  on ( forward pass)" with a
    "Definition list ends without a blank line" warning, and Fig. 3's "model ````"."""
    text = caption.read_text()
    assert "snakemake.wildcards" not in text, caption.name
    if "item." in text:
        text = render_caption(text, NAMES)
        used = set(re.findall(r"item\.(\w+)", caption.read_text()))
        for key in used:
            assert NAMES[key] in text, (caption.name, key)
    for config in ({}, {"rehearsal": True}):
        rst = _snakemake_render(text, config)
        assert _system_messages(rst) == [], (caption.name, rst)


def test_the_check_sees_the_messages_the_report_showed():
    """The rendering above reports what the report printed as "System Message: WARNING/2"."""
    broken = textwrap.dedent(
        """\
        Paper 1 **App. E**: every layer of  on
         ( forward pass), raw scores.
        Fig. 3 on model ````.
        """
    )
    messages = _system_messages(_snakemake_render(broken))
    assert any("Definition list ends without a blank line" in m for m in messages), messages
    assert any("Inline literal start-string without end-string" in m for m in messages), messages
