"""What a SLURM cluster can give a job: its partitions' nodes (CPUs, memory, GPUs), read once
with ``sinfo`` by the Snakemake process that submits the jobs (profiles/slurm).

A job asking more than any node of its partition has pends forever (``PartitionConfig``) while
Snakemake waits without a word, so the workflow caps the threads it asks (:func:`capped_threads`)
and stops on a request no node can satisfy before the first submission (:func:`unschedulable`).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Node:
    """One node as ``sinfo`` reports it: CPUs, memory (MB) and GPUs (GRES ``gpu``)."""

    partition: str
    cpus: int
    mem_mb: int
    gpus: int


@dataclass(frozen=True)
class SlurmNodes:
    """Every (partition, node) pair of the cluster and the cluster's default partition."""

    nodes: tuple[Node, ...]
    default_partition: str | None

    def largest(self, partition: str | None) -> Node | None:
        """The most of each resource one node of ``partition`` (default: the cluster's) has."""
        nodes = [n for n in self.nodes if n.partition == (partition or self.default_partition)]
        if not nodes:
            return None
        return Node(
            nodes[0].partition,
            max(n.cpus for n in nodes),
            max(n.mem_mb for n in nodes),
            max(n.gpus for n in nodes),
        )


#: The GPUs of a ``sinfo %G`` field: ``gpu:a100:4(S:0-1),shard:8`` has 4, ``(null)`` none.
_GPU_GRES = re.compile(r"gpu(?::[^:(,]+)?:(\d+)")


def parse_sinfo(text: str) -> SlurmNodes:
    """Parse ``sinfo --noheader --Node --format '%P|%c|%m|%G'`` (one line per node and partition;
    the default partition carries a ``*``)."""
    nodes, default = [], None
    for line in text.splitlines():
        if not line.strip():
            continue
        partition, cpus, mem, gres = (f.strip() for f in line.split("|", 3))
        if partition.endswith("*"):
            partition = partition[:-1]
            default = partition
        gpus = sum(int(m.group(1)) for m in _GPU_GRES.finditer(gres))
        nodes.append(Node(partition, int(cpus.rstrip("+")), int(mem.rstrip("+")), gpus))
    return SlurmNodes(tuple(nodes), default)


def query_slurm_nodes() -> SlurmNodes | None:
    """The cluster's nodes from ``sinfo``; None where ``sinfo`` is absent or fails."""
    if shutil.which("sinfo") is None:
        return None
    proc = subprocess.run(
        ["sinfo", "--noheader", "--Node", "--format", "%P|%c|%m|%G"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    if proc.returncode != 0:
        return None
    return parse_sinfo(proc.stdout)


def capped_threads(wanted: int, nodes: SlurmNodes | None, partition: str | None = None) -> int:
    """``wanted`` threads, at most the CPUs of the partition's largest node."""
    largest = nodes.largest(partition) if nodes is not None else None
    return max(1, min(wanted, largest.cpus)) if largest is not None else wanted


def allocated_threads(wanted: int) -> int:
    """Inside a SLURM job: ``wanted``, at most the CPUs SLURM allocated to it (so the job runs
    with the threads the submitting process capped with :func:`capped_threads`)."""
    cpus = os.environ.get("SLURM_CPUS_PER_TASK")
    return max(1, min(wanted, int(cpus))) if cpus and cpus.isdigit() else wanted


def unschedulable(
    rule: str,
    partition: str | None,
    threads: int,
    mem_mb: int,
    gpus: int,
    nodes: SlurmNodes,
) -> str | None:
    """Why no node of the job's partition can run it (None when one can): the rule, the
    resource, what was asked, what the largest node has, and what to change."""
    where = f"partition {partition!r}" if partition else "the cluster's default partition"
    largest = nodes.largest(partition)
    if largest is None:
        known = sorted({n.partition for n in nodes.nodes})
        return (
            f"rule {rule}: {where} has no nodes (sinfo lists {known}); set `slurm_partition` "
            "in profiles/slurm/config.yaml (default-resources) to one of them"
        )
    asks = (
        ("threads", threads, largest.cpus, "CPUs", "set-threads / --set-threads"),
        ("mem_mb", mem_mb, largest.mem_mb, "MB of memory", "set-resources / --set-resources"),
        ("gpu", gpus, largest.gpus, "GPUs", "`device: cpu` in the config"),
    )
    for name, asked, has, unit, fix in asks:
        if asked > has:
            return (
                f"rule {rule} asks {name}={asked} but the largest node of {where} has {has} "
                f"{unit}: SLURM would never start the job. Lower the request ({fix}) or choose "
                "another partition (`slurm_partition` in profiles/slurm/config.yaml)"
            )
    return None


@dataclass(frozen=True)
class MemoryKill:
    """A SLURM job killed for going over its memory request, read from its SLURM log; ``rule``
    names the group for a group job (``group``: profiles/slurm's ``groups``)."""

    rule: str
    wildcards: str
    jobid: str
    used_mb: int | None
    limit_mb: int | None
    group: bool = False

    def message(self) -> str:
        if self.used_mb is None:
            used = " (over its mem_mb request)"
        else:
            used = f": it used {self.used_mb} MB, over its request mem_mb={self.limit_mb}"
        if self.group:
            where, rule = f"group {self.rule}", "<rule>"
            give = (
                "; a group job asks the sum of the requests of the jobs it runs side by side. "
                "Give the rule that ran out more (its log in logs/<rule>/ stops where it was killed)"
            )
        else:
            where = f"rule {self.rule}" + (f" ({self.wildcards})" if self.wildcards else "")
            rule, give = self.rule, ". Give it more"
        return (
            f"{where} was killed by SLURM for memory{used} (SLURM job {self.jobid}){give}: "
            f"--set-resources {rule}:mem_mb=<MB> (or set-resources in profiles/slurm/config.yaml)"
        )


# slurmstepd's own kill (jobacct_gather, OverMemoryKill) and the cgroup OOM killer's report.
_OVER_LIMIT = re.compile(r"exceeded memory limit \((\d+) > (\d+)\)")
_OOM_EVENT = re.compile(r"oom[-_]kill event", re.IGNORECASE)


def memory_kills(logdir: str | os.PathLike, since: float) -> list[MemoryKill]:
    """Jobs killed for memory among the SLURM logs (``<logdir>/rule_<rule>[/<wildcards>]/
    <jobid>.log``, ``<logdir>/group_<group>/.../<jobid>.log`` for a group job: the plugin's
    layout) written since ``since`` (a time.time())."""
    kills = []
    root = Path(logdir)
    for log in sorted([*root.glob("rule_*/**/*.log"), *root.glob("group_*/**/*.log")]):
        if log.stat().st_mtime < since:
            continue
        text = log.read_text(errors="replace")
        over = _OVER_LIMIT.search(text)
        if over is None and not _OOM_EVENT.search(text):
            continue
        parts = log.relative_to(root).parts
        group = parts[0].startswith("group_")
        rule = parts[0].removeprefix("group_" if group else "rule_")
        used, limit = (int(over.group(i)) // 2**20 for i in (1, 2)) if over else (None, None)
        kills.append(MemoryKill(rule, "/".join(parts[1:-1]), log.stem, used, limit, group))
    return kills
