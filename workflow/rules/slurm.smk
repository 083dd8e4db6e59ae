# SLURM (profiles/slurm): requests follow what the cluster's nodes can give, requests no node can
# run stop the run before the first submission, and jobs SLURM killed for memory are named after a
# failed run. The submitting process reads the nodes once with sinfo (the executor is known once
# the DAG is being built, not while this file is parsed); inside a job the allocation says it.
# Included right after common.smk: extract.smk's threads and memory are functions of this file.
# On one machine every function here returns the one-machine answer and the hooks do nothing.

import os
import sys
import time

from causalpos import cluster as _cluster

_SLURM_NODES = []


def slurm_nodes():
    """The cluster's nodes when this process submits SLURM jobs, else None (cached)."""
    if not _SLURM_NODES:
        submits = getattr(workflow.executor_plugin, "name", None) == "slurm"
        _SLURM_NODES.append(
            _cluster.query_slurm_nodes()
            if submits and workflow.is_main_process
            else None
        )
    return _SLURM_NODES[0]


#: Extraction's threads on a cluster node (locally 1; see extract.smk).
EXTRACT_CLUSTER_THREADS = 4


def _default_partition():
    """The profile's `slurm_partition` (default-resources), None where it names none."""
    found = (workflow.resource_settings.default_resources or {}).get("slurm_partition")
    found = getattr(found, "value", found)  # a snakemake Resource or a plain value
    return found if isinstance(found, str) and found else None


def extract_threads(wildcards):
    """1 on one machine; on SLURM the host side of a GPU job gets up to 4, never more than the
    partition's largest node has (a job asking more would pend forever)."""
    nodes = slurm_nodes()
    if nodes is not None:
        return _cluster.capped_threads(
            EXTRACT_CLUSTER_THREADS, nodes, _default_partition()
        )
    if workflow.remote_exec and "SLURM_JOB_ID" in os.environ:  # a job SLURM started
        return _cluster.allocated_threads(EXTRACT_CLUSTER_THREADS)
    return 1


def extract_mem_mb(wildcards, attempt):
    """The job's host memory from its model's shape and reducers
    (causalpos.models.footprint.extract_request), more on each retry (profiles/slurm: retries),
    at most the largest node's memory."""
    wanted = (
        CFG.extract_resources(wildcards.model, wildcards.dataset)["mem_mb"] * attempt
    )
    nodes = slurm_nodes()
    largest = nodes.largest(_default_partition()) if nodes is not None else None
    return min(wanted, largest.mem_mb) if largest is not None else wanted


def check_cluster_run():
    """Before the first submission: the cluster's profile in place of profiles/default, and no
    job asking more than any node of its partition has (causalpos.cluster.unschedulable names
    the rule, the resource and the fix)."""
    nodes = slurm_nodes()
    if nodes is None:
        return
    # Snakemake loads profiles/default (one machine: `gpu=1`, 2 GB default memory) next to
    # any --profile, and its settings win.
    if not any(a.startswith("--workflow-profile") for a in sys.argv):
        raise WorkflowError(
            "causalpos: on SLURM run `snakemake --workflow-profile profiles/slurm ...` (not "
            "--profile): with --profile Snakemake also loads profiles/default, the one-machine "
            "profile, and its settings win (its gpu=1 limit runs GPU jobs one at a time, its "
            "default-resources replace the partition and memory of profiles/slurm); see "
            "docs/slurm.md"
        )
    for job in workflow.dag.needrun_jobs():
        if job.is_local:  # run here, not submitted (config `local_rules`)
            continue
        res = job.resources
        problem = _cluster.unschedulable(
            job.rule.name,
            res.get("slurm_partition"),
            job.threads,
            int(res.get("mem_mb", 0) or 0),
            int(res.get("gpu", 0) or 0),
            nodes,
        )
        if problem:
            raise WorkflowError(f"causalpos: {problem}")
    bound_group_jobs(nodes)


def bound_group_jobs(nodes):
    """Group jobs (profiles/slurm: `groups`, `group-components`) ask what one node can give.

    Snakemake asks, for a group job, the sum of the requests of its jobs that could run side by
    side, unless `--cores` bounds it; then it stacks them in series. `--cores` would also cap
    every job's threads, so the bound is set here, once every job's threads are known: the
    largest node's CPUs, which no job asks more of anyway (extract_threads). Each group job's
    request is then checked like a job's."""
    largest = nodes.largest(_default_partition())
    if largest is None:
        return
    workflow.global_resources["_cores"] = largest.cpus
    groups = {workflow.dag.get_job_group(j) for j in workflow.dag.needrun_jobs()}
    for group in groups - {None}:
        res = group.resources
        problem = _cluster.unschedulable(
            f"group {group.groupid} ({', '.join(sorted({j.rule.name for j in group.jobs}))})",
            res.get("slurm_partition"),
            int(res.get("_cores", 1) or 1),
            int(res.get("mem_mb", 0) or 0),
            int(res.get("gpu", 0) or 0),
            nodes,
        )
        if problem:
            raise WorkflowError(f"causalpos: {problem}")


def report_memory_kills():
    """After a failed SLURM run: each job SLURM killed for memory, named with its rule, what
    it used and asked, and how to give it more (the plugin only says 'FAILED')."""
    if slurm_nodes() is None:
        return
    logdir = (
        getattr(workflow.executor_settings, "logdir", None) or ".snakemake/slurm_logs"
    )
    for kill in _cluster.memory_kills(logdir, since=_RUN_STARTED):
        print(f"causalpos: {kill.message()}", file=sys.stderr)


_RUN_STARTED = time.time()


# Before the first job: a run on this machine whose `device: cuda` torch cannot serve
# (common.smk), a SLURM run's requests against its nodes.
onstart:
    check_local_device()
    check_cluster_run()


onerror:
    report_memory_kills()
