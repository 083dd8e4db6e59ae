"""Snakemake entry point of rule ``plot_train_comparison``: the trained variants vs their twins, figures."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(snakemake.scriptdir).resolve().parents[1] / "src"))

from causalpos.io.runlog import collector_off_until_logged, logged  # noqa: E402

collector_off_until_logged()  # the stage's imports without collections
from causalpos.stages.plot_training import plot_train_comparison  # noqa: E402

with logged(snakemake.log[0], snakemake.threads, exit_when_done=True):
    p = snakemake.params
    plot_train_comparison(
        {"index": snakemake.input.index, "comparison": snakemake.input.comparison},
        {k: list(p.stores[k]) for k in ("trained", "init")},
        {k: list(v) for k, v in snakemake.output.items()},
        variants=list(p.variants),
        twins=list(p.twins),
        map_layer=p.map_layer,
        names=dict(p.names),
        dataset=p.dataset,
    )
