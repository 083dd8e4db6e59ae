"""Every hyper-parameter of a model trained here, declared once (torch-free): the config's
``train:`` keys are these fields (:func:`config_keys`), each with its default, its meaning and
the positional type that reads it. :class:`RunOptions` changes no number.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from typing import Any

from causalpos.settings import FULL_PRECISION, Scheduling, check_keys, from_params, setting, shared

#: Positional variants, in the canonical order (what differs between them:
#: :mod:`causalpos.training.architecture`).
VARIANTS: tuple[str, ...] = ("rope", "nope", "ntk", "swa")


def _hp(key: str | None, default: Any, doc: str, *, only: str | None = None) -> Any:
    """A hyper-parameter: its config key (None: not a choice of the config), default and meaning
    (``doc``); ``only`` the positional type that reads it."""
    return setting(default, key, doc, only=only)


@dataclass(frozen=True)
class ModelShape:
    """Size of the decoder (the same for every variant)."""

    hidden: int = _hp("train.hidden", 128, "residual width (hidden_size)")
    layers: int = _hp("train.layers", 4, "decoder layers")
    heads: int = _hp("train.heads", 4, "query heads; hidden / heads must be even (rotary pairs)")
    kv_heads: int = _hp(
        "train.kv_heads", 2, "key/value heads (grouped-query attention); divides heads"
    )
    intermediate: int = _hp("train.intermediate", 384, "MLP width (SwiGLU intermediate_size)")
    rope_theta: float = _hp(
        "train.rope_theta", 10000.0, "rotary base θ (rope and ntk; nope keeps it in config.json)"
    )
    tie_embeddings: bool = _hp("train.tie_embeddings", True, "lm_head shares the input embedding")


# The field order is the order of the ``settings`` record in checkpoints and training.json.
@dataclass(frozen=True)
class TrainSettings:
    """Everything that determines a trained model's weights (checked on resume, so a checkpoint
    is never continued with other settings)."""

    variant: str = _hp(None, "rope", f"positional variant: one of {', '.join(VARIANTS)}")
    shape: ModelShape = field(default_factory=ModelShape, metadata={"doc": "decoder size"})
    context: int = _hp(
        "train.context", 128, "training window in tokens, BOS at position 0 included"
    )
    steps: int = _hp("train.steps", 500, "optimiser updates")
    batch: int = _hp("train.batch", 16, "windows per update (also the evaluation batch)")
    lr: float = _hp("train.lr", 3e-3, "peak learning rate (AdamW, β = 0.9, 0.95)")
    warmup: int = _hp("train.warmup", 50, "updates of linear warmup, in [0, steps]")
    min_lr_ratio: float = _hp(
        "train.min_lr_ratio", 0.1, "final lr / peak lr (cosine decay after the warmup)"
    )
    weight_decay: float = _hp("train.weight_decay", 0.1, "AdamW weight decay, on matrices only")
    grad_clip: float = _hp("train.grad_clip", 1.0, "gradient-norm clip (0: none)")
    seed: int = shared(
        "seed", "initial weights and data order (the config's top-level seed)", only=None
    )
    window: int | None = _hp(
        "train.window",
        None,
        "sliding window in tokens, in [1, context); default context // 4",
        only="swa",
    )
    ntk_factor: float = _hp(
        "train.ntk_factor", 8.0, "llama3 scaling factor of the RoPE frequencies", only="ntk"
    )
    ntk_original_context: int | None = _hp(
        None, None, "llama3 original_max_position_embeddings; default context"
    )
    eval_every: int = _hp(
        "train.eval_every", 50, "updates between held-out evaluations (also at step 0 and the end)"
    )
    n_eval: int = _hp(
        "train.n_eval", 64, "held-out windows in each evaluation (the first n non-overlapping)"
    )
    dtype: str = _hp(
        "train.dtype", FULL_PRECISION, "float32, or a half type under autocast (fp32 master)"
    )

    @classmethod
    def from_params(cls, params: Mapping[str, Any]) -> TrainSettings:
        """Settings from a flat mapping (a rule's ``settings`` param: ``variant``, the shape's keys
        and the rest); a key that is no field raises. Values are taken as given (no conversion:
        the checkpoints record them as the config wrote them)."""
        shape_keys = {f.name for f in fields(ModelShape)}
        own = {f.name for f in fields(cls)} - {"shape"}
        check_keys(cls, params, shape_keys | own)
        shape = ModelShape(**{k: v for k, v in params.items() if k in shape_keys})
        return cls(shape=shape, **{k: v for k, v in params.items() if k in own})

    def check(self) -> None:
        """Raise on a value no run can use (the message names the key and its allowed range)."""
        if self.variant not in VARIANTS:
            raise ValueError(f"unknown variant {self.variant!r}; allowed: {', '.join(VARIANTS)}")
        for name in ("steps", "batch", "context", "eval_every", "n_eval"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1 (got {getattr(self, name)})")
        if not 0 <= self.warmup <= self.steps:
            raise ValueError(f"warmup={self.warmup} must be in [0, steps={self.steps}]")

    def resolved(self) -> TrainSettings:
        """The settings as the run uses them: ``window`` only for swa (default context // 4),
        ``ntk_factor`` only for ntk (0.0 otherwise), ``ntk_original_context`` only for ntk
        (default context) — so variants that ignore a key are not told apart by it."""
        swa, ntk = self.variant == "swa", self.variant == "ntk"
        window = self.context // 4 if self.window is None else self.window
        return replace(
            self,
            window=window if swa else None,
            ntk_factor=self.ntk_factor if ntk else 0.0,
            ntk_original_context=(self.ntk_original_context or self.context) if ntk else None,
        )


@dataclass(frozen=True)
class RunOptions:
    """How and where a run goes; none of it changes the trained weights."""

    device: str = "cpu"
    #: updates between checkpoints (and one at ``stop_after`` and at the end)
    checkpoint_every: int = 100
    #: default: the sibling ``<out_dir>.checkpoints`` (it survives Snakemake deleting a failed
    #: job's ``directory()`` output, so the rerun resumes)
    checkpoint_dir: str | None = None
    keep_checkpoints: int = 1
    #: end after that many updates with a checkpoint and no final outputs (the next call resumes)
    stop_after: int | None = None
    progress: bool = False
    #: a checkpoint made with other settings or provenance: "raise" refuses it, "restart" deletes
    #: it and trains from scratch (what a pipeline rerun after a changed setting or code needs)
    on_mismatch: str = "raise"
    #: JSON-able data recorded in checkpoints and training.json and compared on resume (e.g. the
    #: code fingerprint of the pipeline rule)
    provenance: Mapping[str, Any] | None = None
    #: False deletes the checkpoint directory once the final outputs are written
    keep_final_checkpoint: bool = True

    def check(self) -> None:
        for name in ("checkpoint_every", "keep_checkpoints"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1 (got {getattr(self, name)})")
        if self.on_mismatch not in ("raise", "restart"):
            raise ValueError(f"on_mismatch={self.on_mismatch!r}; allowed: 'raise' | 'restart'")


def config_keys() -> tuple[tuple[str, ...], dict[str, tuple[str, ...]]]:
    """The config's ``train:`` hyper-parameter keys: ``(every variant's, {type: its own})``.

    Every field of :class:`ModelShape` and :class:`TrainSettings` the config sets (``variant``
    comes from ``positional``, ``seed`` from the top-level ``seed``)."""
    hp = list(fields(ModelShape))
    hp += [
        f for f in fields(TrainSettings) if (f.metadata.get("config") or "").startswith("train.")
    ]
    shared = tuple(f.name for f in hp if f.metadata["only"] is None)
    own: dict[str, tuple[str, ...]] = {}
    for f in hp:
        if f.metadata["only"] is not None:
            own[f.metadata["only"]] = (*own.get(f.metadata["only"], ()), f.name)
    return shared, own


@dataclass(frozen=True)
class LengthGenSettings:
    """Loss by position beyond the training length (rule ``length_generalization``): the
    held-out sequences (``length_factor`` × the longest training context, or ``seq_len``;
    ``n_sequences`` of them in ``mode``), the forward passes' batch, the bootstrap and the seed.
    Each field's metadata names its config key (``config``; None: not set by the config)."""

    length_factor: float = setting(2.0, "train.lengthgen.length_factor", "× the longest context")
    n_sequences: int = setting(128, "train.lengthgen.n_sequences", "held-out sequences")
    # sequences per forward pass change no number: the rule's untracked ``run``
    batch_size: int = setting(
        Scheduling.lengthgen_batch_size, None, "sequences per forward pass (Scheduling)"
    )
    n_bootstrap: int = shared("stats.n_bootstrap", "bootstrap replicates")
    confidence: float = shared("stats.confidence", "every interval's confidence level")
    seed: int = shared("seed", "the sequences' and the bootstrap's seed")
    seq_len: int | None = setting(None, None, "tokens per sequence (None: length_factor's)")
    mode: str = setting("chunks", None, "how sequences are drawn (causalpos.sampling)")

    from_params = classmethod(from_params)


@dataclass(frozen=True)
class TrainCorpus:
    """The text the models trained here learn from (rules ``train_tokenizer``, ``train_model``)
    and the sources held out of it (rule ``plot_loss_curves`` names them)."""

    corpus: dict = setting(
        {"type": "kjv"}, "train.corpus", "causalpos.data corpus spec, split by source"
    )
    heldout: tuple[str, ...] = setting(
        ("Ruth", "Ecclesiastes", "Hosea", "Mark", "Romans"),
        "train.heldout",
        "sources (KJV book titles) held out of the tokenizer's and the models' training",
    )


@dataclass(frozen=True)
class TokenizerSettings:
    """The BPE tokenizer the variants share (rule ``train_tokenizer``; its name is the output's
    path, ``train.tokenizer.name``)."""

    vocab_size: int = setting(
        2048, "train.tokenizer.vocab_size", "byte-level BPE: 256 bytes + 3 specials + merges"
    )
    min_frequency: int = setting(2, "train.tokenizer.min_frequency", "a merge's minimum count")
    seed: int = shared("seed", "the tokenizer trainer's seed")


@dataclass(frozen=True)
class LossByPositionSettings:
    """The loss-by-position figure (rule ``plot_loss_by_position``)."""

    smooth: int = setting(
        1, "train.lengthgen.smooth", "moving average of the curve over this many positions"
    )


@dataclass(frozen=True)
class ComparisonFigureSettings:
    """The figures of the trained variants beside their init twins (rule
    ``plot_train_comparison``)."""

    dataset: str = setting(
        "", "train.compare.dataset", "the comparison's held-out dataset (the figures' prompts)"
    )
    map_layer: int = setting(
        -1, "train.compare.map_layer", "layer of the map figure (0-indexed, -1: the last)"
    )
