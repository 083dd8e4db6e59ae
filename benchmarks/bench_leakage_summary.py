"""Peak memory and CPU time of one leakage summary (rule ``leakage``) on the first n prompts of a
finished run's score stores, for several n: how the summary grows with the prompts.

    python benchmarks/bench_leakage_summary.py MODEL DATASET [--prompts 32 64 128]
        [--root .] [--configfile config.yaml configs/decide.yaml]

Each n runs in its own process (its peak resident memory is its own), on the stores of
``results/scores/<MODEL>/<DATASET>/`` under ``--root`` with the rule's settings under the given
config files (the run's own): :func:`causalpos.stages.leakage.summarize_leakage` of every
variant the config summarizes there, cut to their first n prompts, stratified as the rule is.
Prints one row per n (CPU-s, peak RSS in GiB, their ratios to the smallest n's) and the
yardstick; nothing is written. The scorecard's power notes scale a summary's measured CPU time
and memory by (n′/n)², an upper bound: these rows say how loose.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "src"))
sys.path.insert(0, str(HERE))


def summary_cost(root: Path, configfiles: list[str], model: str, dataset: str, n: int) -> dict:
    """CPU-s and peak RSS (MiB) of the summary of the first ``n`` prompts, in this process."""
    from causalpos.config.resolved import Resolved
    from causalpos.config.yamlfile import load_config
    from causalpos.io.store import open_dataset
    from causalpos.paper2.settings import LeakageSettings, StrataSettings
    from causalpos.stages.leakage import LEAKAGE_VARIABLES, summarize_leakage

    cfg = Resolved(load_config(configfiles, pipeline=root))
    variants = cfg.leakage_variants(model, dataset)
    if not variants:
        raise SystemExit(f"the config summarizes no variant of {model} on {dataset}")
    scores = root / "results" / "scores" / model / dataset
    opened = {
        v: open_dataset(scores / f"{v}.zarr", variables=LEAKAGE_VARIABLES).isel(
            sequence=slice(0, n)
        )
        for v in variants
    }
    have = next(iter(opened.values())).sizes["sequence"]
    if have < n:
        raise SystemExit(f"{scores} holds {have} prompts, fewer than {n}")
    data = open_dataset(root / "results" / "data" / dataset / f"{model}.zarr")
    settings = LeakageSettings.from_params(dict(cfg.leakage_summary_params(model)))
    cpu = time.process_time()
    summarize_leakage(opened, settings, data=data, strata=cfg.values(StrataSettings).strata)
    return {
        "n": n,
        "runs": len(variants),
        "cpu_s": time.process_time() - cpu,
        "rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("model")
    p.add_argument("dataset")
    p.add_argument("--prompts", type=int, nargs="+", default=[32, 64, 128])
    p.add_argument("--root", type=Path, default=Path("."))
    p.add_argument("--configfile", nargs="+", default=["config.yaml"])
    p.add_argument("--one", type=int, help=argparse.SUPPRESS)  # a child: one n, JSON out
    a = p.parse_args(argv)
    if a.one is not None:
        print(json.dumps(summary_cost(a.root.resolve(), a.configfile, a.model, a.dataset, a.one)))
        return 0
    from yardstick import sgemm_gflops

    before = sgemm_gflops()
    rows = []
    for n in sorted(a.prompts):
        cmd = [sys.executable, __file__, a.model, a.dataset, "--one", str(n), "--root", str(a.root)]
        out = subprocess.run(
            [*cmd, "--configfile", *a.configfile], check=True, capture_output=True, text=True
        )
        rows.append(json.loads(out.stdout.strip().splitlines()[-1]))
    after = sgemm_gflops()
    base = rows[0]
    print(f"leakage summary of {a.model} on {a.dataset} ({base['runs']} runs), first n prompts")
    print("| n | CPU-s | × | peak RSS GiB | × | (n/n₀)² |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['n']} | {r['cpu_s']:.1f} | {r['cpu_s'] / base['cpu_s']:.2f} "
            f"| {r['rss_mib'] / 1024:.2f} | {r['rss_mib'] / base['rss_mib']:.2f} "
            f"| {(r['n'] / base['n']) ** 2:.1f} |"
        )
    print(f"yardstick: {before:.1f} / {after:.1f} GFLOP/s (before / after)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
