"""The running pipeline's command line as its jobs see it: its ``--configfile`` and ``--config``
arguments, put in every job's environment by ``workflow/rules/common.smk`` (so a store records
the run that wrote it and a rebuild command names them), and what it rebuilds (:func:`forcing`).
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
from collections.abc import Iterable
from pathlib import Path

#: Environment variable naming the config files of the running pipeline (set by the workflow),
#: so a rebuild command names them; unset outside the pipeline.
CONFIGFILES_ENV = "CAUSALPOS_CONFIGFILES"
#: Environment variable holding the running pipeline's ``--config KEY=VALUE`` overrides (set by
#: the workflow; JSON: ``{"args": [as given], "values": {as Snakemake parsed them}}``).
CONFIG_ENV = "CAUSALPOS_CONFIG"


def display_path(path: str | os.PathLike) -> str:
    """``path`` relative to the working directory where it lies below it (as Snakemake names
    its outputs), else as given."""
    p = Path(path)
    if p.is_absolute():
        with contextlib.suppress(ValueError):
            return str(p.relative_to(Path.cwd()))
    return str(p)


def configfiles() -> list[str] | None:
    """The ``--configfile`` arguments of the running pipeline ([] for the default config.yaml),
    from :data:`CONFIGFILES_ENV`; None when unknown (not run from the pipeline)."""
    value = os.environ.get(CONFIGFILES_ENV)
    return None if value is None else [f for f in value.split(os.pathsep) if f]


def _config_env() -> dict:
    try:
        value = json.loads(os.environ.get(CONFIG_ENV) or "{}")
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def config_args() -> list[str]:
    """The ``--config KEY=VALUE`` arguments of the running pipeline, as given (:data:`CONFIG_ENV`;
    [] where there are none or outside the pipeline)."""
    return [str(a) for a in _config_env().get("args") or []]


def config_values() -> dict:
    """The values the running pipeline's ``--config`` arguments set, as Snakemake parsed them
    (top-level keys; {} where there are none or outside the pipeline)."""
    values = _config_env().get("values")
    return dict(values) if isinstance(values, dict) else {}


def config_options(files: list[str] | None, args: list[str] | None = None) -> str:
    """`` --configfile F ... --config KEY=VALUE ...`` of a Snakemake command ('' for the default
    config.yaml without overrides), each word quoted for a shell."""
    out = "".join(f" --configfile {shlex.quote(display_path(f))}" for f in files or [])
    if args:
        out += " --config " + " ".join(shlex.quote(str(a)) for a in args)
    return out


def run_configfiles() -> list[str] | None:
    """:func:`configfiles` relative to the pipeline directory where they lie below it (what a
    store or model directory records of the run that wrote it); None outside the pipeline."""
    files = configfiles()
    return None if files is None else [display_path(f) for f in files]


def forcing(argv: Iterable[str]) -> tuple[set[str], bool]:
    """``(forced, forceall)`` of a Snakemake command line: what ``-R/--forcerun`` names, the
    targets of ``-f/--force`` (every plain word: over-counting only skips a check of a store
    rebuilt anyway) and ``-F/--forceall``; Snakemake hands its DAG settings over only later."""
    argv = list(argv)
    forceall = any(a in ("-F", "--forceall") for a in argv)
    force = any(a in ("-f", "--force") for a in argv)
    forced: set[str] = set()
    taking = False
    for a in argv:
        if a.startswith("--forcerun="):
            forced.update(a.split("=", 1)[1].split(","))
            taking = False
        elif a in ("-R", "--forcerun"):
            taking = True
        elif a.startswith("-"):
            taking = False
        elif taking or force:
            forced.add(a)
    return forced, forceall
