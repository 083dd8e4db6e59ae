"""Snakemake entry point of rule ``length_generalization``: per-position loss of the trained variants beyond their context."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(snakemake.scriptdir).resolve().parents[1] / "src"))

from causalpos.io.runlog import logged  # noqa: E402
from causalpos.stages.lengthgen import LengthGenSettings, length_generalization  # noqa: E402

with logged(snakemake.log[0], snakemake.threads, exit_when_done=True):
    p = snakemake.params
    length_generalization(
        dict(zip(p.variants, snakemake.input)),
        snakemake.output.store,
        snakemake.output.table,
        p.corpus,
        LengthGenSettings(
            length_factor=p.length_factor,
            n_sequences=p.n_sequences,
            # sequences per forward pass change no number: not a param (the rule does not rerun)
            batch_size=snakemake.config["train"]["lengthgen"]["batch_size"],
            n_bootstrap=p.n_bootstrap,
            confidence=p.confidence,
            seed=p.seed,
        ),
        device=snakemake.config["device"],
        dtype=p.dtype,
        attrs={"code_fingerprint": p.code},
    )
