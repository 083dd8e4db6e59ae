"""The project's SLURM profile against a real (one-node) SLURM: jobs of configs/smoke.yaml re-run
through ``--workflow-profile profiles/slurm`` in a copy of the local smoke run (tests/conftest.py),
one SLURM run shared by every test here.

The jobs re-run are a chosen subset of the smoke run: one job of every rule kind, each rule that
runs on a compute node submitted at least once, chosen so that re-running them re-runs nothing
else (a forced job re-runs every job downstream of it that its targets need). Their outputs are
compared with the local run's. During the run a training job is cancelled by SLURM (``scancel``)
once it has written a checkpoint: Snakemake resubmits it (profiles/slurm: ``retries``) and the new
job resumes from the checkpoint, and its model equals the uninterrupted local run's. Then: a
second invocation has nothing to do, a job over its memory request is killed with a message
naming the rule and the resource, and requests no node can satisfy stop the run before any
submission.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from causalpos.cli import main as causalpos_main
from causalpos.io.store import open_dataset
from tests.wfutil import SMOKE, planned_jobs, rule_counts, snakemake

pytestmark = pytest.mark.slow

#: The profile as a user runs it; the first status check after 2 s instead of the plugin's 40 s,
#: and one round of checks a second instead of every 10 s (tiny jobs: the waits would dominate),
#: held there (the cluster fixture's environment: tests/snakemake_server.py,
#: steady_status_checks) rather than lengthened by the plugin while no job ends.
SLURM = (
    "--workflow-profile",
    "profiles/slurm",
    "--slurm-init-seconds-before-status-checks",
    "2",
    "--seconds-between-status-checks",
    "1",
)
#: The job cancelled during the run: trained-nope's training, once it has a checkpoint.
KILLED_RULE, KILLED_WILDCARDS = "train_model", "nope"
#: What the command line of that job's training process holds (its rule's script).
KILLED_SCRIPT = b"train_model.py"

#: Forced (``-f``) in one SLURM invocation: one job of every rule of the smoke run but the
#: three below and the two roots, with what re-running them re-runs (the model tiny-random's
#: chain from its preparation to paper 1's and paper 2's tables, trained-nope's from its
#: training to its Gram table and the length generalization, one simulation setting). The
#: rule(s) each target's job is listed as a comment.
TARGETS = (
    "resources/models/tiny-random",  # prepare_model
    "results/scores/tiny-random/kjv-first24",  # extract_scores_shard x2, merge_scores
    "results/normalized/tiny-random/kjv-first24/causal.zarr",  # diagonal_normalize
    "results/stats/llm_index.csv",  # aggregate_llm_stats
    "results/figures/llm_fig5.png",  # plot_llm_fig5
    "results/figures/llm_appE_tiny-random_kjv-first24_causal.png",  # plot_llm_appendix
    "results/leakage/tiny-random/kjv-first24.zarr",  # leakage
    "results/position0/tiny-random/kjv-first24.zarr",  # position0
    "results/stats/paper2_tables.md",  # aggregate_leakage
    "results/figures/paper2_heads_tiny-random_kjv-first24.png",  # plot_paper2_heads
    "results/figures/paper2_layers_smoke.png",  # plot_paper2_layers
    "results/figures/paper2_shares_smoke.png",  # plot_paper2_shares
    "results/figures/paper2_position0_smoke.png",  # plot_paper2_position0
    "results/sim/l2_a000.zarr",  # simulate
    "results/sim/theory.csv",  # theory_check
    "results/stats/simulation_index.csv",  # aggregate_sim_stats
    "results/figures/sim_fig2.png",  # plot_simulation
    "results/figures/fig1_theory.png",  # plot_fig1
    "resources/models/trained-nope",  # train_model (cancelled and resumed)
    "resources/models/trained-nope-init",  # init_twin
    "results/gram/trained-nope.zarr",  # gram_panels
    "results/stats/gram_nearby.csv",  # gram_table
    "results/stats/train_lengthgen.csv",  # length_generalization
    "results/figures/train_fig3_trained-nope.png",  # plot_gram_figures
    "results/figures/train_loss_curves.png",  # plot_loss_curves
    "results/figures/train_loss_by_position.png",  # plot_loss_by_position
)
#: Light rules whose inputs include extraction of every trained model: re-run alone (their
#: inputs as the local run left them), before the targets, so that nothing else re-runs.
LIGHT_ALONE = ("compare_trained",)  # with it: plot_train_comparison, scorecard
#: The roots of the smoke run (every job depends on one of them): re-run last, alone.
ROOTS = (
    "resources/tokenizers/smoke-bpe",  # train_tokenizer
    "results/data/kjv-first24/tokenizer-smoke-bpe.zarr",  # sample_sequences
)


@dataclass
class SlurmRun:
    work: Path
    local: Path  # the local smoke run the SLURM run's outputs are compared with
    started: float  # time.time() before the first invocation
    light: subprocess.CompletedProcess  # LIGHT_ALONE re-run
    proc: subprocess.CompletedProcess  # TARGETS re-run
    again: subprocess.CompletedProcess  # TARGETS once more: nothing to do
    roots: subprocess.CompletedProcess  # ROOTS re-run
    wall_s: float
    killed_jobid: str | None
    jobs: dict[str, tuple[str, str, int]]  # SLURM job id -> (comment, state, CPUs)

    @property
    def out(self) -> str:
        """What the three re-running invocations printed."""
        return "".join(p.stdout + p.stderr for p in (self.light, self.proc, self.roots))


def _cancel_after_checkpoint(cluster, work: Path, stop: threading.Event, out: list) -> None:
    """scancel the training job of trained-nope once its first checkpoint is complete, with the
    job frozen at the moment the checkpoint is seen.

    Its job id is looked up while it starts, then its training process (the one that writes the
    checkpoints and, once trained, deletes them; found by its script's name) while it imports
    torch and tokenizes (seconds). From then on, every millisecond, that process is stopped
    (SIGSTOP) before the checkpoint directory is looked at, and continued (SIGCONT) if no
    checkpoint is there yet. A checkpoint seen is seen by a stopped process: it cannot go on to
    its last steps, its save and the deletion of its checkpoints (a few tenths of a second on
    the smoke model, less than ``scancel``'s round trip on a fast machine). The job's other
    processes are stopped too, then ``scancel`` ends them (SIGCONT, SIGTERM)."""
    ckpts = work / "resources" / "models" / f"trained-{KILLED_WILDCARDS}.checkpoints"
    comment = f"rule_{KILLED_RULE}_wildcards_{KILLED_WILDCARDS}"
    jobid = None
    while jobid is None and not stop.is_set():
        for line in cluster.squeue("--format", "%i|%k|%T").splitlines():
            job, com, state = line.split("|")
            if com == comment and state == "RUNNING":
                jobid = job
        time.sleep(0.1)
    trainer = []
    while not trainer and not stop.is_set():
        trainer = [pid for pid in _job_processes(jobid) if KILLED_SCRIPT in _cmdline(pid)]
        time.sleep(0.05)
    while not stop.is_set():
        _signal(trainer, signal.SIGSTOP)
        if any(ckpts.glob("step-*/trainer_state.pt")):
            _signal(_job_processes(jobid), signal.SIGSTOP)
            subprocess.run(["scancel", jobid], env=cluster.env(), check=True)
            out.append(jobid)
            return
        _signal(trainer, signal.SIGCONT)
        time.sleep(0.001)


def _cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:  # ended meanwhile
        return b""


def _signal(pids: list[int], sig: int) -> None:
    for pid in pids:
        try:
            os.kill(pid, sig)
        except ProcessLookupError:  # ended meanwhile
            pass


def _job_processes(jobid: str) -> list[int]:
    """The processes of SLURM job ``jobid`` on this one-node cluster: those whose environment
    holds its ``SLURM_JOB_ID`` (the batch script and what it starts; not Slurm's daemons)."""
    want = f"SLURM_JOB_ID={jobid}".encode()
    pids = []
    for env in Path("/proc").glob("[0-9]*/environ"):
        try:
            if want in env.read_bytes().split(b"\0"):
                pids.append(int(env.parent.name))
        except OSError:  # ended meanwhile, or not ours to read
            continue
    return pids


@pytest.fixture(scope="module")
def slurm_run(slurm_cluster, smoke_pipeline, tmp_path_factory) -> SlurmRun:
    # a copy of the finished local run (timestamps and .snakemake records kept): the local
    # copy stays as it is, for the comparisons
    work = tmp_path_factory.mktemp("slurm_pipeline") / "pipeline"
    shutil.copytree(smoke_pipeline, work, symlinks=True)
    started = time.time()
    t0 = time.monotonic()
    light = snakemake(work, *SLURM, "--configfile", SMOKE, "--forcerun", *LIGHT_ALONE)
    stop, killed = threading.Event(), []
    killer = threading.Thread(
        target=_cancel_after_checkpoint, args=(slurm_cluster, work, stop, killed), daemon=True
    )
    killer.start()
    proc = snakemake(work, *TARGETS, "-f", *SLURM, "--configfile", SMOKE, check=False)
    stop.set()
    killer.join()
    again = snakemake(work, *TARGETS, *SLURM, "--configfile", SMOKE, check=False)
    roots = snakemake(work, *ROOTS, "-f", *SLURM, "--configfile", SMOKE, check=False)
    wall = time.monotonic() - t0
    jobs = {}
    for line in slurm_cluster.squeue("--states=all", "--format", "%i|%k|%T|%C").splitlines():
        jobid, comment, state, cpus = line.split("|")
        jobs[jobid] = (comment, state, int(cpus))
    print(f"smoke jobs re-run through SLURM: {wall:.0f} s, {len(jobs)} SLURM jobs")
    return SlurmRun(
        work,
        smoke_pipeline,
        started,
        light,
        proc,
        again,
        roots,
        wall,
        killed[0] if killed else None,
        jobs,
    )


def _rule(comment: str) -> str:
    """The rule (or the group, profiles/slurm: `groups`) of a SLURM job's comment."""
    return re.sub(r"^rule_(\w+?)(_wildcards_.*)?$", r"\1", comment)


def _groups(work: Path) -> dict[str, set[str]]:
    """Group -> its rules, from the profile (`groups: [rule=group, ...]`)."""
    import yaml

    prof = yaml.safe_load((work / "profiles" / "slurm" / "config.yaml").read_text())
    out: dict[str, set[str]] = {}
    for entry in prof.get("groups", []):
        rule, group = entry.split("=")
        out.setdefault(group, set()).add(rule)
    return out


def _group_of(comment: str, groups: dict[str, set[str]]) -> str | None:
    """The group of a group job's comment (the plugin names it `<group>_<rules>`), else None."""
    name = _rule(comment)
    return next((g for g in groups if name == g or name.startswith(f"{g}_")), None)


def _submitted(run: SlurmRun) -> set[str]:
    """The rules that ran on a node: a group job stands for its group's rules."""
    groups = _groups(run.work)
    out: set[str] = set()
    for comment, _, _ in run.jobs.values():
        group = _group_of(comment, groups)
        out |= groups[group] if group else {_rule(comment)}
    return out


#: Keys of a JSON record that describe the run rather than its result: the weights file's size
#: and mtime (causalpos_source.json), training's wall and CPU time (training.json).
VOLATILE = ("weights_stat", "elapsed_s", "cpu_s")


def _assert_same_output(local: Path, slurm: Path) -> None:
    """A store's every variable, a model's weights and records, a tokenizer's files: equal,
    exactly (a JSON record but for :data:`VOLATILE`)."""
    if local.suffix == ".zarr":
        a, b = open_dataset(local), open_dataset(slurm)
        assert sorted(a.variables) == sorted(b.variables), slurm
        for name in a.variables:
            np.testing.assert_array_equal(a[name].values, b[name].values, err_msg=f"{slurm}:{name}")
    elif any(local.glob("*.zarr")):  # a merge job's directory: one store per variant
        names = sorted(p.name for p in local.glob("*.zarr"))
        assert names == sorted(p.name for p in slurm.glob("*.zarr")), slurm
        for name in names:
            _assert_same_output(local / name, slurm / name)
    elif local.is_dir():
        names = sorted(f.name for f in local.iterdir() if f.name != ".snakemake_timestamp")
        assert names == sorted(f.name for f in slurm.iterdir() if f.name != ".snakemake_timestamp")
        for name in names:
            a, b = (local / name).read_bytes(), (slurm / name).read_bytes()
            if name.endswith(".json"):
                a, b = (
                    {k: v for k, v in json.loads(x).items() if k not in VOLATILE} for x in (a, b)
                )
            assert a == b, slurm / name


def test_smoke_jobs_through_slurm_equal_the_local_run(slurm_run):
    for proc in (slurm_run.light, slurm_run.proc, slurm_run.roots):
        out = proc.stdout + proc.stderr
        assert proc.returncode == 0, out[-6000:]
        assert "steps (100%) done" in out, out[-3000:]
    # every target was written again by this run, and equals the local run's output
    for target in (*TARGETS, *ROOTS):
        path = slurm_run.work / target
        assert path.stat().st_mtime >= slurm_run.started, f"{target} was not re-run"
        _assert_same_output(slurm_run.local / target, path)
    # every table of the two results trees, exactly
    assert (
        causalpos_main(
            ["diff-results", str(slurm_run.local / "results"), str(slurm_run.work / "results")]
        )
        == 0
    )


def test_every_rule_of_the_smoke_run_ran_once_at_least(slurm_run):
    # the subset covers the smoke run: every rule it has ran here, on a node or locally
    smoke_rules = set(rule_counts(planned_jobs(slurm_run.local, "--configfile", SMOKE, "-F")))
    submitted = _submitted(slurm_run)
    ran_here = set(re.findall(r"^localrule (\w+):", slurm_run.out, re.M)) - {"all"}
    assert len(smoke_rules) >= 30 and smoke_rules == submitted | ran_here, sorted(
        smoke_rules - submitted - ran_here
    )


def test_extraction_threads_follow_the_node(slurm_run, slurm_cluster):
    # the rule asks 4 host threads on a cluster, capped at the node's CPUs (2 here): a
    # 4-CPU request on a 2-CPU node would pend forever (reason PartitionConfig)
    extract = [cpus for com, _, cpus in slurm_run.jobs.values() if "rule_extract_scores" in com]
    assert len(extract) >= 2
    assert set(extract) == {min(4, slurm_cluster.cpus)}
    # the other rules ask one; a group job (profiles/slurm: groups) at most the node's CPUs, its
    # jobs running side by side up to that many
    groups = _groups(slurm_run.work)
    single = {c for c, _, _ in slurm_run.jobs.values() if _group_of(c, groups) is None}
    others = {
        cpus for com, _, cpus in slurm_run.jobs.values() if com in single and "extract" not in com
    }
    assert others == {1}
    grouped = [cpus for com, _, cpus in slurm_run.jobs.values() if com not in single]
    assert grouped and all(1 <= c <= slurm_cluster.cpus for c in grouped), grouped


def test_light_rules_run_on_the_submitting_host(slurm_run):
    import yaml

    schema = (slurm_run.work / "workflow" / "schemas" / "config.schema.yaml").read_text()
    light = set(yaml.safe_load(schema)["properties"]["local_rules"]["default"])
    submitted = _submitted(slurm_run)
    # "localrule X:" from the submitting Snakemake (a failed job's log, shown by
    # show-failed-logs, has its own "localrule" lines: the job step runs its job locally)
    ran_here = set(re.findall(r"^localrule (\w+):", slurm_run.out, re.M))
    # no light rule was submitted, every one ran here (the targets have them all), the rest
    # was submitted
    assert not light & submitted
    assert light <= ran_here, sorted(light - ran_here)
    assert {"extract_scores_shard", "merge_scores", "leakage", "train_model"} <= submitted


def test_cancelled_job_is_retried_and_resumes_from_its_checkpoint(slurm_run):
    assert slurm_run.killed_jobid is not None, (
        "the training job ended before its checkpoint was seen"
    )
    comment = f"rule_{KILLED_RULE}_wildcards_{KILLED_WILDCARDS}"
    attempts = sorted(
        (int(j), state) for j, (com, state, _) in slurm_run.jobs.items() if com == comment
    )
    # the cancelled job, then one more that completed
    assert attempts[0] == (int(slurm_run.killed_jobid), "CANCELLED")
    assert attempts[-1][1] == "COMPLETED" and len(attempts) == 2
    out = slurm_run.proc.stdout + slurm_run.proc.stderr
    assert f"SLURM-job '{slurm_run.killed_jobid}' failed, SLURM status is: 'CANCELLED'" in out
    log = (slurm_run.work / "logs" / KILLED_RULE / f"{KILLED_WILDCARDS}.log").read_text()
    assert re.search(r"resuming nope from \S+step-0*(\d+) \(step \1\)", log), log[-3000:]


def test_second_invocation_has_nothing_to_do(slurm_run):
    # the same targets again, right after the run (before the roots re-ran)
    out = slurm_run.again.stdout + slurm_run.again.stderr
    assert slurm_run.again.returncode == 0 and "Nothing to be done" in out, out[-3000:]


def test_job_over_its_memory_request_fails_naming_rule_and_resource(slurm_run):
    # theory_check holds ~100 MB (Python, numpy, xarray); 50 MB is killed by SLURM's poll
    proc = snakemake(
        slurm_run.work,
        "results/sim/theory.csv",  # before the options that take several values
        *SLURM,
        "--configfile",
        SMOKE,
        "--forcerun",
        "theory_check",
        "--set-resources",
        "theory_check:mem_mb=50",
        "--retries",
        "0",
        check=False,
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0
    assert re.search(r"causalpos: rule theory_check .*memory.*mem_mb=50", out), out[-4000:]


def test_unschedulable_requests_stop_before_any_submission(slurm_run, slurm_cluster):
    for override in (
        ("--set-threads", "theory_check=64"),
        ("--set-resources", f"theory_check:mem_mb={slurm_cluster.mem_mb + 1}"),
        ("--set-resources", "theory_check:gpu=1"),
    ):
        proc = snakemake(
            slurm_run.work,
            "results/sim/theory.csv",
            *SLURM,
            "--configfile",
            SMOKE,
            "--forcerun",
            "theory_check",
            *override,
            check=False,
        )
        out = proc.stdout + proc.stderr
        assert proc.returncode != 0 and "has been submitted" not in out
        assert "causalpos: rule theory_check asks" in out and "SLURM would never start" in out


def test_the_profile_flag_alone_is_refused_with_the_fix(slurm_run):
    proc = snakemake(
        slurm_run.work, "--profile", "profiles/slurm", "--configfile", SMOKE, check=False
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0 and "--workflow-profile profiles/slurm" in out
