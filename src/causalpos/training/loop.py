"""The training loop: resume, optimiser, one update, checkpoint, finish.

Training is deterministic on CPU: the initial weights come from ``torch.manual_seed(seed)``, the
batch at step ``s`` is a pure function of ``(seed, s)``, and a checkpoint stores the weights, the
optimiser and scheduler state, the RNG state, the step and the loss log, so a run interrupted and
resumed ends bit-identical to an uninterrupted one (on the same machine and thread count).
"""

from __future__ import annotations

import json
import logging
import math
import os
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from causalpos.io.atomic import atomic_dir
from causalpos.models.device import DTYPES, resolve_device
from causalpos.settings import FULL_PRECISION
from causalpos.training.architecture import build_config, build_model, count_parameters
from causalpos.training.batches import batch_at, heldout_windows, token_stream, unigram_baselines
from causalpos.training.checkpoints import (
    default_checkpoint_dir,
    delete_checkpoints,
    disk_write,
    list_checkpoints,
    load_checkpoint_weights,
    load_trainer_state,
    save_model_dir,
    settings_record,
    state_bytes,
    write_checkpoint,
    write_weights_record,
)
from causalpos.training.loss import evaluate, sequence_nll
from causalpos.training.settings import RunOptions, TrainSettings
from causalpos.training.tokenizer import load_tokenizer
from causalpos.training.trainlog import LOSS_CURVE, TRAINING_JSON, write_loss_curve

log = logging.getLogger("causalpos.training.loop")


def lr_factor(step: int, *, steps: int, warmup: int, min_lr_ratio: float) -> float:
    """Learning-rate multiplier of update ``step`` (0-based): linear warmup, then cosine to
    ``min_lr_ratio``."""
    if step < warmup:
        return (step + 1) / warmup
    progress = (step - warmup) / max(1, steps - warmup)
    return min_lr_ratio + (1.0 - min_lr_ratio) * 0.5 * (
        1.0 + math.cos(math.pi * min(1.0, progress))
    )


@dataclass
class _Job:
    """What every part of one run reads: the resolved settings, the data, where things go."""

    settings: TrainSettings
    run: RunOptions
    tokenizer_dir: Path
    out_dir: Path
    ckpt_dir: Path
    train_ids: np.ndarray
    eval_tokens: torch.Tensor
    bos_id: int
    eos_id: int | None
    pad_id: int | None
    vocab_size: int
    record: dict[str, Any]
    provenance: dict[str, Any]
    device: torch.device
    autocast_dtype: torch.dtype | None
    t_start: float = field(default_factory=time.perf_counter)
    cpu_start: float = field(default_factory=time.process_time)


@dataclass
class _State:
    """The run's mutable part: model, optimiser, schedule, loss log and time spent before."""

    model: nn.Module
    opt: torch.optim.Optimizer
    sched: torch.optim.lr_scheduler.LRScheduler
    step: int
    rows: list[dict[str, float]]
    elapsed_before: float = 0.0
    cpu_before: float = 0.0

    def elapsed(self, job: _Job) -> tuple[float, float]:
        """Wall and process CPU seconds of the whole run so far (resumed parts included)."""
        return (
            self.elapsed_before + time.perf_counter() - job.t_start,
            self.cpu_before + time.process_time() - job.cpu_start,
        )


def run_training(
    settings: TrainSettings,
    *,
    tokenizer_dir: str | os.PathLike,
    out_dir: str | os.PathLike,
    train_ids: np.ndarray,
    heldout_ids: np.ndarray,
    run: RunOptions | None = None,
) -> dict[str, Any]:
    """Train one model from scratch (resuming from the last checkpoint) and save it in HF format.

    ``train_ids`` / ``heldout_ids``: token streams ``(n_tokens,)``. The held-out loss is the mean
    NLL on the first ``n_eval`` non-overlapping held-out windows, at step 0, every ``eval_every``
    updates and at the end. AdamW (β = 0.9, 0.95; weight decay on matrices only), gradient
    clipping, linear warmup then cosine decay to ``min_lr_ratio · lr``; master weights float32,
    another ``dtype`` under autocast.

    ``out_dir`` (renamed into place at the end) holds the HF model and tokenizer,
    ``loss_curve.csv`` and ``training.json``, whose content is returned (a partial summary when
    stopped early by ``run.stop_after``).
    """
    run = RunOptions() if run is None else run
    job = _job(settings, run, tokenizer_dir, out_dir, train_ids, heldout_ids)
    state = _resume(job)
    end = job.settings.steps if run.stop_after is None else min(job.settings.steps, run.stop_after)
    for step in range(state.step, end):
        row = _step(job, state, step)
        state.rows.append(row)
        done = step + 1
        if done % run.checkpoint_every == 0 or done == end:
            _checkpoint(job, state, done)
    return _finish(job, state, end)


def _job(
    settings: TrainSettings,
    run: RunOptions,
    tokenizer_dir: str | os.PathLike,
    out_dir: str | os.PathLike,
    train: np.ndarray,
    heldout: np.ndarray,
) -> _Job:
    """Check the settings, read the tokenizer and the data, resolve the device."""
    t_start, cpu_start = time.perf_counter(), time.process_time()
    settings.check()
    run.check()
    if settings.dtype not in DTYPES:
        raise ValueError(f"dtype={settings.dtype!r} not supported; allowed: {', '.join(DTYPES)}")
    tokenizer_dir, out_dir = Path(tokenizer_dir), Path(out_dir)
    tok = load_tokenizer(tokenizer_dir)
    train_ids, heldout_ids = token_stream(train, "train"), token_stream(heldout, "heldout")
    vocab_size = len(tok)
    if int(max(train_ids.max(), heldout_ids.max())) >= vocab_size:
        raise ValueError(
            f"token ids exceed the tokenizer's vocabulary ({vocab_size}): were they encoded with "
            f"{tokenizer_dir}?"
        )
    if tok.bos_token_id is None:
        raise ValueError(
            f"tokenizer in {tokenizer_dir} has no BOS token; train it with "
            "causalpos.training.tokenizer.fit_tokenizer"
        )
    resolved = settings.resolved()
    return _Job(
        settings=resolved,
        run=run,
        tokenizer_dir=tokenizer_dir,
        out_dir=out_dir,
        ckpt_dir=Path(run.checkpoint_dir)
        if run.checkpoint_dir is not None
        else default_checkpoint_dir(out_dir),
        train_ids=train_ids,
        eval_tokens=heldout_windows(
            heldout_ids, n=settings.n_eval, length=settings.context, bos_id=tok.bos_token_id
        ),
        bos_id=tok.bos_token_id,
        eos_id=tok.eos_token_id,
        pad_id=tok.pad_token_id,
        vocab_size=vocab_size,
        record=settings_record(
            settings, vocab_size=vocab_size, train_ids=train_ids, heldout_ids=heldout_ids
        ),
        provenance=json.loads(json.dumps(dict(run.provenance or {}))),
        device=torch.device(resolve_device(run.device)),
        autocast_dtype=None if settings.dtype == FULL_PRECISION else DTYPES[settings.dtype],
        t_start=t_start,
        cpu_start=cpu_start,
    )


def _resume(job: _Job) -> _State:
    """The model, optimiser and log: from the newest checkpoint made with the same settings and
    provenance, else freshly initialised (and evaluated at step 0)."""
    s = job.settings
    config = build_config(
        s.variant,
        vocab_size=job.vocab_size,
        shape=s.shape,
        context=s.context,
        window=s.window,
        ntk_factor=s.ntk_factor,
        ntk_original_context=s.ntk_original_context,
        special_ids=(job.bos_id, job.eos_id, job.pad_id),
    )
    saved, path = _matching_checkpoint(job)
    weights = None if saved is None else load_checkpoint_weights(path)
    model = build_model(config, seed=s.seed, base_state=weights)
    model.to(job.device)
    model.train()
    opt, sched = _optimizer(model, s)
    if saved is not None:
        log.info("resuming %s from %s (step %d)", s.variant, path, int(saved["step"]))
        opt.load_state_dict(saved["optimizer"])
        sched.load_state_dict(saved["scheduler"])
        torch.set_rng_state(saved["torch_rng"])
        if job.device.type == "cuda" and saved.get("cuda_rng") is not None:
            torch.cuda.set_rng_state(saved["cuda_rng"], job.device)
        return _State(
            model,
            opt,
            sched,
            step=int(saved["step"]),
            rows=list(saved["rows"]),
            elapsed_before=float(saved.get("elapsed_s", 0.0)),
            cpu_before=float(saved.get("cpu_s", 0.0)),
        )
    held = evaluate(model, job.eval_tokens, batch=s.batch, autocast_dtype=job.autocast_dtype)
    rows = [{"step": 0, "train_loss": math.nan, "lr": math.nan, "heldout_loss": held}]
    if job.run.progress:
        log.info("%s step 0 held-out %.4f", s.variant, held)
    return _State(model, opt, sched, step=0, rows=rows)


def _matching_checkpoint(job: _Job) -> tuple[dict[str, Any] | None, Path | None]:
    """The newest checkpoint's trainer state if it was made with this run's settings and
    provenance; otherwise raise (``on_mismatch="raise"``) or delete the checkpoints (``"restart"``)."""
    ckpts = list_checkpoints(job.ckpt_dir)
    if not ckpts:
        return None, None
    _, path = ckpts[-1]
    saved = load_trainer_state(path)
    now = {**job.record, "provenance": job.provenance}
    then = {**saved["settings"], "provenance": saved.get("provenance", {})}
    if then == now:
        return saved, path
    diff = {k: (then.get(k), v) for k, v in now.items() if then.get(k) != v}
    if job.run.on_mismatch == "raise":
        raise ValueError(
            f"checkpoint {path} was made with other settings (key: (checkpoint, now)) {diff}; "
            f"delete {job.ckpt_dir} to start over or pass another checkpoint_dir"
        )
    log.warning(
        "discarding checkpoints in %s made with other settings %s; training from scratch",
        job.ckpt_dir,
        diff,
    )
    delete_checkpoints(job.ckpt_dir)
    return None, None


def _optimizer(
    model: nn.Module, s: TrainSettings
) -> tuple[torch.optim.Optimizer, torch.optim.lr_scheduler.LRScheduler]:
    """AdamW with weight decay on matrices only, and the warmup + cosine schedule."""
    decay = [p for n, p in model.named_parameters() if p.ndim >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.ndim < 2]
    opt = torch.optim.AdamW(
        [
            {"params": decay, "weight_decay": s.weight_decay},
            {"params": no_decay, "weight_decay": 0.0},
        ],
        lr=s.lr,
        betas=(0.9, 0.95),
        eps=1e-8,
    )
    # a plain function (not a partial): LambdaLR's state_dict then stores no lambda state
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt,
        lambda i: lr_factor(i, steps=s.steps, warmup=s.warmup, min_lr_ratio=s.min_lr_ratio),
    )
    return opt, sched


class TrainingDiverged(RuntimeError):
    """The training or held-out loss stopped being finite: the run stops there (nothing after a
    non-finite update could be a result)."""


def _finite_loss(value: float, what: str, step: int, settings: Any) -> float:
    """``value``, or :class:`TrainingDiverged` naming the step, the variant and the key to lower."""
    if not math.isfinite(value):
        raise TrainingDiverged(
            f"training of variant {settings.variant!r} diverged at step {step}: the {what} loss "
            f"is {value} (lr {settings.lr}); lower train.lr (or the variant's lr under "
            "train.variants), or raise train.warmup, and rerun"
        )
    return value


def _step(job: _Job, state: _State, step: int) -> dict[str, float]:
    """Update ``step`` (0-based): one batch, clipped gradient, optimiser and schedule; the log
    row of ``step + 1`` (held-out loss every ``eval_every`` updates and at the last)."""
    s = job.settings
    x = batch_at(
        job.train_ids, step, batch=s.batch, context=s.context, bos_id=job.bos_id, seed=s.seed
    ).to(job.device)
    lr_now = state.sched.get_last_lr()[0]
    loss = sequence_nll(state.model, x, autocast_dtype=job.autocast_dtype).mean()
    _finite_loss(float(loss.detach()), "training", step + 1, s)
    loss.backward()
    if s.grad_clip > 0:
        torch.nn.utils.clip_grad_norm_(state.model.parameters(), s.grad_clip)
    state.opt.step()
    state.sched.step()
    state.opt.zero_grad(set_to_none=True)
    done = step + 1
    row = {"step": done, "train_loss": float(loss.detach()), "lr": lr_now, "heldout_loss": math.nan}
    if done % s.eval_every == 0 or done == s.steps:
        held = evaluate(
            state.model, job.eval_tokens, batch=s.batch, autocast_dtype=job.autocast_dtype
        )
        row["heldout_loss"] = _finite_loss(held, "held-out", done, s)
        if job.run.progress:
            log.info(
                "%s step %d train %.4f held-out %.4f",
                s.variant,
                done,
                row["train_loss"],
                row["heldout_loss"],
            )
    return row


def _checkpoint(job: _Job, state: _State, step: int) -> None:
    """Checkpoint after update ``step`` (see :mod:`causalpos.training.checkpoints`)."""
    elapsed, cpu = state.elapsed(job)
    dev = job.device
    write_checkpoint(
        job.ckpt_dir,
        step,
        state.model,
        job.tokenizer_dir,
        {
            "step": step,
            "settings": job.record,
            "provenance": job.provenance,
            "optimizer": state.opt.state_dict(),
            "scheduler": state.sched.state_dict(),
            "torch_rng": torch.get_rng_state(),
            "cuda_rng": torch.cuda.get_rng_state(dev) if dev.type == "cuda" else None,
            "rows": state.rows,
            "elapsed_s": elapsed,
            "cpu_s": cpu,
        },
        keep=job.run.keep_checkpoints,
    )


def _finish(job: _Job, state: _State, end: int) -> dict[str, Any]:
    """The run's summary; at the last update also the model directory with its loss curve and
    ``training.json`` (and the checkpoints deleted unless ``run.keep_final_checkpoint``)."""
    # Wall time depends on what else runs on the machine; process CPU time (all threads) less so.
    elapsed, cpu = state.elapsed(job)
    rows = state.rows
    summary: dict[str, Any] = {
        "variant": job.settings.variant,
        "settings": job.record,
        "step": end,
        "n_parameters": count_parameters(state.model),
        "initial_heldout_loss": rows[0]["heldout_loss"],
        # the last evaluation after an update (never step 0's: NaN before the first one)
        "final_heldout_loss": next(
            (r["heldout_loss"] for r in reversed(rows[1:]) if not math.isnan(r["heldout_loss"])),
            math.nan,
        ),
        "final_train_loss": rows[-1]["train_loss"],
        **unigram_baselines(job.train_ids, job.eval_tokens, job.vocab_size),
        "elapsed_s": elapsed,
        "cpu_s": cpu,
        "device": str(job.device),
        "torch_threads": torch.get_num_threads(),
        "tokenizer_dir": str(job.tokenizer_dir),
        "provenance": job.provenance,
    }
    if end < job.settings.steps:
        return summary
    need = state_bytes(state.model)
    with disk_write(job.out_dir, "the trained model", need=need), atomic_dir(job.out_dir) as tmp:
        save_model_dir(state.model, job.tokenizer_dir, tmp)
        write_loss_curve(rows, tmp / LOSS_CURVE)
        (tmp / TRAINING_JSON).write_text(json.dumps(summary, indent=2) + "\n")
        write_weights_record(tmp, name=job.out_dir.name, variant=job.settings.variant)
    if not job.run.keep_final_checkpoint:
        shutil.rmtree(job.ckpt_dir, ignore_errors=True)
    return summary
