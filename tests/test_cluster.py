"""causalpos.cluster: what a SLURM partition can give a job, read from ``sinfo``."""

from __future__ import annotations

from causalpos.cluster import (
    allocated_threads,
    capped_threads,
    parse_sinfo,
    unschedulable,
)

# sinfo --noheader --Node --format '%P|%c|%m|%G': one line per (node, partition); `*` marks
# the default partition; a node in two partitions appears twice.
SINFO = """\
cpu*|2|24105|(null)
cpu*|8|64000|(null)
gpu|16|256000|gpu:a100:4(S:0-1)
gpu|32|512000+|gpu:h100:2,gpu:a100:1
"""


def test_parse_sinfo_largest_node_per_partition():
    nodes = parse_sinfo(SINFO)
    assert nodes.default_partition == "cpu"
    cpu = nodes.largest(None)
    assert (cpu.partition, cpu.cpus, cpu.mem_mb, cpu.gpus) == ("cpu", 8, 64000, 0)
    gpu = nodes.largest("gpu")
    # 2 H100 + 1 A100 on the second node; 4 A100 on the first: the most on one node is 4
    assert (gpu.cpus, gpu.mem_mb, gpu.gpus) == (32, 512000, 4)
    assert nodes.largest("nope") is None


def test_threads_capped_at_the_largest_node():
    nodes = parse_sinfo("main*|2|24105|(null)\n")
    assert capped_threads(4, nodes) == 2
    assert capped_threads(1, nodes) == 1
    assert capped_threads(4, None) == 4  # no cluster to ask: the request as declared
    assert capped_threads(4, nodes, "gpu") == 4  # unknown partition: left to the check


def test_allocated_threads_follow_the_allocation(monkeypatch):
    monkeypatch.setenv("SLURM_CPUS_PER_TASK", "2")
    assert allocated_threads(4) == 2 and allocated_threads(1) == 1
    monkeypatch.delenv("SLURM_CPUS_PER_TASK")
    assert allocated_threads(4) == 4


def test_unschedulable_names_rule_resource_and_fix():
    nodes = parse_sinfo(SINFO)
    assert unschedulable("extract_scores", None, 8, 64000, 0, nodes) is None
    assert unschedulable("extract_scores", "gpu", 4, 8000, 4, nodes) is None
    msg = unschedulable("extract_scores", None, 9, 8000, 0, nodes)
    assert "rule extract_scores asks threads=9" in msg and "has 8 CPUs" in msg
    msg = unschedulable("merge_scores", "cpu", 1, 64001, 0, nodes)
    assert "mem_mb=64001" in msg and "64000 MB" in msg and "partition 'cpu'" in msg
    msg = unschedulable("train_model", None, 1, 4000, 1, nodes)
    assert "gpu=1" in msg and "has 0 GPUs" in msg and "device: cpu" in msg
    msg = unschedulable("train_model", "big", 1, 4000, 0, nodes)
    assert "partition 'big' has no nodes" in msg and "['cpu', 'gpu']" in msg


def test_memory_kills_read_from_the_plugins_slurm_logs(tmp_path):
    import os

    from causalpos.cluster import memory_kills

    logs = tmp_path / "logs" / "slurm"
    killed = logs / "rule_theory_check" / "7.log"
    oom = logs / "rule_extract_scores" / "m_d_0001" / "9.log"
    fine = logs / "rule_simulate" / "l2" / "8.log"
    old = logs / "rule_merge_scores" / "3.log"
    for f in (killed, oom, fine, old):
        f.parent.mkdir(parents=True, exist_ok=True)
    # slurmstepd's own kill (accounting poll) and a cgroup OOM report
    killed.write_text(
        "slurmstepd-vm: error: StepId=7.batch exceeded memory limit (68124672 > 52428800), "
        "being killed\n"
    )
    oom.write_text("slurmstepd: error: Detected 1 oom_kill event in StepId=9.0.\n")
    fine.write_text("Finished job 0.\n")
    old.write_text("error: StepId=3.0 exceeded memory limit (2 > 1), being killed\n")
    os.utime(old, (1.0, 1.0))  # before this run
    kills = memory_kills(logs, since=1000.0)
    assert [(k.rule, k.wildcards, k.jobid, k.used_mb, k.limit_mb) for k in kills] == [
        ("extract_scores", "m_d_0001", "9", None, None),
        ("theory_check", "", "7", 64, 50),  # 68124672 B = 64.97 MiB, 52428800 B = 50 MiB
    ]
    assert (
        kills[1]
        .message()
        .startswith(
            "rule theory_check was killed by SLURM for memory: it used 64 MB, over its request "
            "mem_mb=50 (SLURM job 7)"
        )
    )
    assert "--set-resources extract_scores:mem_mb=<MB>" in kills[0].message()
    # a group job (profiles/slurm: groups) is named as the group, with how to find its rule
    grouped = logs / "group_analyses" / "11.log"
    grouped.parent.mkdir(parents=True)
    grouped.write_text("error: StepId=11.0 exceeded memory limit (9437184000 > 8388608000)\n")
    kill = memory_kills(logs, since=1000.0)[0]
    assert (kill.rule, kill.group, kill.used_mb, kill.limit_mb) == ("analyses", True, 9000, 8000)
    assert kill.message().startswith(
        "group analyses was killed by SLURM for memory: it used 9000 MB, over its request "
        "mem_mb=8000 (SLURM job 11)"
    )
    assert "--set-resources <rule>:mem_mb=<MB>" in kill.message()
