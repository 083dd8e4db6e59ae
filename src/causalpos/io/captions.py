"""Per-item captions for ``snakemake --report``. One job draws every figure of a family and has no
wildcards, so a shared caption cannot say which model a figure is of: each item gets a caption
file of its own, the template (``workflow/report/<name>.rst``, Jinja, the item's names as
``item``) rendered with its names, which Snakemake then renders as every caption."""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Mapping
from pathlib import Path

from causalpos.io.atomic import replace_text

_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]+")


def render_caption(template: str, names: Mapping[str, str]) -> str:
    """``template`` (Jinja text) rendered with ``item`` = ``names``; a name the template uses
    that ``names`` lacks is an error (jinja2's StrictUndefined), never an empty string."""
    from jinja2 import Environment, StrictUndefined

    env = Environment(
        trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=True, undefined=StrictUndefined
    )
    return env.from_string(template).render(item=dict(names))


def item_caption(
    template: str | os.PathLike,
    names: Mapping[str, str],
    out_dir: str | os.PathLike,
    item: str,
    *,
    write: bool = True,
) -> str:
    """The absolute path of item ``item``'s caption, ``out_dir/<template stem>.<item>.<hash>.rst``:
    ``template`` rendered with ``names``, written (renamed into place, only where its text
    changed) unless ``write`` is False (a cluster job's Snakemake, which builds no report)."""
    template = Path(template)
    tag = hashlib.sha1(item.encode()).hexdigest()[:8]  # items differing in a "/" stay apart
    path = Path(out_dir) / f"{template.stem}.{_UNSAFE.sub('_', item)}.{tag}.rst"
    if write:
        text = render_caption(template.read_text(), names)
        if not path.is_file() or path.read_text() != text:
            replace_text(path, text)
    return str(path.resolve())
