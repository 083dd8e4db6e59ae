"""The project's SLURM profile against a real (one-node) SLURM: configs/smoke.yaml end to end
through ``--workflow-profile profiles/slurm``, one SLURM run shared by every test here.

During the run a training job is cancelled by SLURM (``scancel``) once it has written a
checkpoint: Snakemake resubmits it (profiles/slurm: ``retries``) and the new job resumes from the
checkpoint. Then: the tables equal the local smoke run's, a second invocation has nothing to
do, a job over its memory request is killed with a message naming the rule and the resource,
and requests no node can satisfy stop the run before any submission.
"""

from __future__ import annotations

import re
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
from wfutil import SMOKE, copy_pipeline, snakemake

from causalpos.cli import main as causalpos_main

pytestmark = pytest.mark.slow

#: The profile as a user runs it; the first status check after 2 s instead of the plugin's 40 s,
#: and one round of checks a second instead of every 10 s (tiny jobs: the waits would dominate).
SLURM = (
    "--workflow-profile",
    "profiles/slurm",
    "--slurm-init-seconds-before-status-checks",
    "2",
    "--seconds-between-status-checks",
    "1",
)
#: The job cancelled during the run: trained-rope's training, once it has a checkpoint.
KILLED_RULE, KILLED_WILDCARDS = "train_model", "rope"


@dataclass
class SlurmRun:
    work: Path
    proc: subprocess.CompletedProcess
    wall_s: float
    killed_jobid: str | None
    jobs: dict[str, tuple[str, str, int]]  # SLURM job id -> (comment, state, CPUs)


def _cancel_after_checkpoint(cluster, work: Path, stop: threading.Event, out: list) -> None:
    """scancel the training job of trained-rope as soon as its first checkpoint is complete."""
    ckpts = work / "resources" / "models" / f"trained-{KILLED_WILDCARDS}.checkpoints"
    comment = f"rule_{KILLED_RULE}_wildcards_{KILLED_WILDCARDS}"
    while not stop.is_set():
        if any(ckpts.glob("step-*/trainer_state.pt")):
            for line in cluster.squeue("--format", "%i|%k|%T").splitlines():
                jobid, com, state = line.split("|")
                if com == comment and state == "RUNNING":
                    subprocess.run(["scancel", jobid], env=cluster.env(), check=True)
                    out.append(jobid)
                    return
        time.sleep(0.05)


@pytest.fixture(scope="module")
def slurm_run(slurm_cluster, tmp_path_factory) -> SlurmRun:
    work = copy_pipeline(tmp_path_factory.mktemp("slurm_pipeline"))
    stop, killed = threading.Event(), []
    killer = threading.Thread(
        target=_cancel_after_checkpoint, args=(slurm_cluster, work, stop, killed), daemon=True
    )
    killer.start()
    t0 = time.monotonic()
    proc = snakemake(work, *SLURM, "--configfile", SMOKE, check=False, timeout=2400)
    wall = time.monotonic() - t0
    stop.set()
    killer.join()
    jobs = {}
    for line in slurm_cluster.squeue("--states=all", "--format", "%i|%k|%T|%C").splitlines():
        jobid, comment, state, cpus = line.split("|")
        jobs[jobid] = (comment, state, int(cpus))
    print(f"smoke run through SLURM: {wall:.0f} s, {len(jobs)} SLURM jobs")
    return SlurmRun(work, proc, wall, killed[0] if killed else None, jobs)


def test_smoke_run_through_slurm_equals_the_local_run(slurm_run, request):
    # the local run is asked for only now: under xdist another worker builds it meanwhile
    smoke_pipeline = request.getfixturevalue("smoke_pipeline")
    out = slurm_run.proc.stdout + slurm_run.proc.stderr
    assert slurm_run.proc.returncode == 0, out[-6000:]
    assert "Finished jobid: 0 (Rule: all)" in out or "steps (100%) done" in out
    # every table of the two results trees, exactly
    assert (
        causalpos_main(
            ["diff-results", str(smoke_pipeline / "results"), str(slurm_run.work / "results")]
        )
        == 0
    )


def test_extraction_threads_follow_the_node(slurm_run, slurm_cluster):
    # the rule asks 4 host threads on a cluster, capped at the node's CPUs (2 here): a
    # 4-CPU request on a 2-CPU node would pend forever (reason PartitionConfig)
    extract = [cpus for com, _, cpus in slurm_run.jobs.values() if "rule_extract_scores" in com]
    assert len(extract) >= 10
    assert set(extract) == {min(4, slurm_cluster.cpus)}
    # the other rules ask one
    others = {cpus for com, _, cpus in slurm_run.jobs.values() if "rule_extract_scores" not in com}
    assert others == {1}


def test_light_rules_run_on_the_submitting_host(slurm_run):
    import yaml

    schema = (slurm_run.work / "workflow" / "schemas" / "config.schema.yaml").read_text()
    light = set(yaml.safe_load(schema)["properties"]["local_rules"]["default"])
    submitted = {
        re.sub(r"^rule_(\w+?)(_wildcards_.*)?$", r"\1", c) for c, _, _ in slurm_run.jobs.values()
    }
    out = slurm_run.proc.stdout + slurm_run.proc.stderr
    # "localrule X:" from the submitting Snakemake (a failed job's log, shown by
    # show-failed-logs, has its own "localrule" lines: the job step runs its job locally)
    ran_here = set(re.findall(r"^localrule (\w+):", out, re.M))
    # no light rule was submitted, every one ran here (the smoke run has them all), the rest
    # was submitted
    assert not light & submitted
    assert light <= ran_here, sorted(light - ran_here)
    assert {"extract_scores", "merge_scores", "leakage", "train_model"} <= submitted


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
    assert re.search(r"resuming rope from \S+step-0*(\d+) \(step \1\)", log), log[-3000:]


def test_second_invocation_has_nothing_to_do(slurm_run):
    proc = snakemake(slurm_run.work, *SLURM, "--configfile", SMOKE)
    assert "Nothing to be done" in proc.stdout + proc.stderr


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
