"""Snakemake entry point of rule ``length_generalization``: per-position loss of the trained variants beyond their context."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(snakemake.scriptdir).resolve().parents[1] / "src"))

from causalpos.io.runlog import collector_off_until_logged, logged  # noqa: E402

collector_off_until_logged()  # the stage's imports without collections
from causalpos.stages.lengthgen import LengthGenSettings, length_generalization  # noqa: E402

with logged(snakemake.log[0], snakemake.threads, exit_when_done=True):
    p = snakemake.params
    length_generalization(
        dict(zip(p.variants, snakemake.input)),
        snakemake.output.store,
        snakemake.output.table,
        p.corpus,
        # sequences per forward pass change no number: the untracked `run` param
        LengthGenSettings.from_params({**p.settings, "batch_size": p.run.lengthgen_batch_size}),
        device=p.run.device,
        dtype=p.dtype,
        attrs={"code_fingerprint": p.code},
    )
