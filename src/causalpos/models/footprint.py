"""What a model job costs, from the model's ``config.json`` fields alone (no model built): the
parameter count, the weights' bytes in a dtype, and the memory and disk requests of the rules
that prepare, and extract scores from, a model. Pure arithmetic, torch-free: config resolution
(``causalpos.config.resources``) calls it for every job's ``mem_mb`` / ``disk_mb``, and
extraction (``causalpos.stages.extract``) for the reducers' state it sets aside before sizing a
batch. The constants are measured (``docs/paper-shape.md``) and rounded up.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

#: Bytes per element of the dtypes a config can name (``dtype:``).
DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}

MB = 10**6  # Snakemake's mem_mb / disk_mb are megabytes

#: Score cells per chunk of a batch for reducers that work on whole maps in float64 (paper 2's
#: leakage fits, ~90 bytes of temporaries per cell; the sink reducer, ~27), whatever the batch
#: size (on an H100, 16 sequences of Llama-3.2-1B at T = 1,024 asked for 8 and 18 GiB in one
#: piece). On a GPU, where the leakage fits are launch-bound (~5,000 kernels per chunk, 48 ms per
#: 8 × 32 × 256² cells on an H100), one cell per KiB of the card, at most ``WORK_CELLS_CUDA``
#: (``causalpos.capture.reducers.work_cells``).
WORK_CELLS = 1 << 24
WORK_CELLS_CUDA = 1 << 27

#: Peak float64 temporaries per score cell of a reducer's update, measured on CPU (ru_maxrss over
#: a batch: leakage fits ≈ 90 bytes, sink ≈ 27), rounded up.
WORK_BYTES_PER_CELL = {"leakage": 128, "sink": 32}

#: Host bytes per (layer, head, query, key) cell that paper 2's reducers (leakage with mean maps,
#: sink) hold on CPU beyond :func:`reducer_state_bytes`' mean maps: per layer, and per sequence of
#: the shard (glibc's heap, which jobs keep for reuse: ``causalpos.io.runlog.keep_freed_memory``).
#: Measured at Llama-3.2-1B's shape, T = 256, 4 fits, 5 windows: 30 + 21.5 × sequences bytes a
#: cell a layer, rounded up (measured up to 4 sequences, linear beyond). Not seen on a GPU.
CPU_LEAKAGE_CELL_BYTES = 16
CPU_LEAKAGE_CELL_BYTES_PER_SEQUENCE = 24

#: What a Python process with torch, transformers, zarr and xarray loaded holds before any model
#: or array (measured 0.34 GB for torch + transformers; the stages import more), rounded up.
PROCESS_BYTES = 2 * 2**30

#: prepare_model's peak over the weights it builds: a random stand-in is built in its dtype and
#: saved as built (measured: Llama-3.2-1B's shape in bf16, 2.47 GB of weights, peak RSS 3.32 GB,
#: i.e. 1.34 × the weights with the process); 1.5 × covers that ratio at every size.
PREPARE_WEIGHTS_FACTOR = 1.5


@dataclass(frozen=True)
class Shape:
    """The fields of a decoder's config.json that set its size."""

    vocab: int
    hidden: int
    intermediate: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    tied: bool
    qkv_bias: bool  # q, k, v projections with biases (Qwen2)
    qk_norm: bool  # per-head RMSNorm of q and k (Qwen3, Gemma 3)
    norms_per_layer: int  # 2, or 4 (Gemma 3: pre and post norms of attention and MLP)


#: Per model_type: (attention biases, q/k norms, norms per layer, tied embeddings by default).
_TYPE_DEFAULTS = {
    "llama": (False, False, 2, False),
    "mistral": (False, False, 2, False),
    "qwen2": (True, False, 2, False),
    "qwen3": (False, True, 2, False),
    "phi3": (False, False, 2, False),
    "gemma3_text": (False, True, 4, True),
}


def shape_of(cfg: Mapping) -> Shape:
    """The :class:`Shape` of a ``config.json`` dict (an architecture file's fields).

    Raises ValueError naming the missing field or the unknown ``model_type``."""
    mtype = cfg.get("model_type")
    if mtype not in _TYPE_DEFAULTS:
        raise ValueError(
            f"footprint: model_type {mtype!r} not one of {sorted(_TYPE_DEFAULTS)}: its parameter "
            "count is not known from its config fields"
        )
    bias, qk_norm, norms, tied = _TYPE_DEFAULTS[mtype]
    need = ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers")
    if missing := [k for k in (*need, "num_attention_heads") if cfg.get(k) is None]:
        raise ValueError(f"footprint: config of model_type {mtype!r} lacks {missing}")
    heads = int(cfg["num_attention_heads"])
    hidden = int(cfg["hidden_size"])
    return Shape(
        vocab=int(cfg["vocab_size"]),
        hidden=hidden,
        intermediate=int(cfg["intermediate_size"]),
        layers=int(cfg["num_hidden_layers"]),
        heads=heads,
        kv_heads=int(cfg.get("num_key_value_heads") or heads),
        head_dim=int(cfg.get("head_dim") or hidden // heads),
        tied=bool(cfg.get("tie_word_embeddings", tied)),
        qkv_bias=bool(cfg.get("attention_bias", bias)),
        qk_norm=qk_norm,
        norms_per_layer=norms,
    )


def parameter_count(shape: Shape) -> int:
    """Parameters of a decoder of ``shape``: embedding, per layer attention (q, k, v, o and
    their biases / norms), gated MLP (three matrices) and norms, the final norm and, untied, the
    output head. Equal to transformers' count on the meta device (tests/models/test_footprint.py)."""
    h, hd = shape.hidden, shape.head_dim
    layer = _matrix_weights(shape) + shape.norms_per_layer * h
    if shape.qkv_bias:
        layer += (shape.heads + 2 * shape.kv_heads) * hd
    if shape.qk_norm:
        layer += 2 * hd
    embed = shape.vocab * h
    return embed * (1 if shape.tied else 2) + shape.layers * layer + h


def _matrix_weights(shape: Shape) -> int:
    """Weights of one layer's matrices: q, k, v, o and the gated MLP's three."""
    h, q, kv = shape.hidden, shape.heads * shape.head_dim, shape.kv_heads * shape.head_dim
    return h * q + 2 * h * kv + q * h + 3 * h * shape.intermediate


def dtype_bytes(dtype: str) -> int:
    if dtype not in DTYPE_BYTES:
        raise ValueError(f"footprint: dtype {dtype!r} not in {sorted(DTYPE_BYTES)}")
    return DTYPE_BYTES[dtype]


def weights_bytes(n_params: int, dtype: str) -> int:
    """Bytes of ``n_params`` weights in ``dtype``."""
    return int(n_params) * dtype_bytes(dtype)


def _mb(n_bytes: float) -> int:
    return int(math.ceil(n_bytes / MB))


def prepare_request(n_params: int, dtype: str, *, builds: bool) -> dict[str, int]:
    """``mem_mb`` and ``disk_mb`` of ``prepare_model`` for a model of ``n_params`` weights saved in
    ``dtype``. ``builds``: the job builds the model in memory (a random stand-in:
    :data:`PREPARE_WEIGHTS_FACTOR` × its weights and the process); otherwise it copies or
    downloads files (the process alone). Disk: the weights, 5 % and 200 MB for the tokenizer,
    config and a download's temporaries."""
    w = weights_bytes(n_params, dtype)
    mem = PROCESS_BYTES + (PREPARE_WEIGHTS_FACTOR * w if builds else 0)
    return {"mem_mb": _mb(mem), "disk_mb": _mb(1.05 * w + 200 * MB)}


@dataclass(frozen=True)
class ReducerPlan:
    """What sizes the reducers' memory of one variant beside its maps: ``n_groups`` group means,
    the leakage reducer's mean maps (``mean_maps``), the shard's ``n_sequences`` (position 0's
    states), the ``batch_size`` (None: "auto") and the cells of one chunk of work
    (``work_cells``: :data:`WORK_CELLS` on CPU, :data:`WORK_CELLS_CUDA` on a GPU)."""

    n_groups: int
    mean_maps: bool = True
    n_sequences: int = 0
    work_cells: int = WORK_CELLS
    batch_size: int | None = None


def reducer_state_bytes(
    layers: int, heads: int, hidden: int, seq_len: int, names: Sequence[str], plan: ReducerPlan
) -> int:
    """Bytes the named reducers hold whatever the batch size: their float64 state (allocated at
    the first batch, on the model's device) and one chunk of working memory (``plan``).

    ``moments``: two (layer, head, T, T) sums and one map buffer; ``groups``: ``n_groups`` ×
    (layer, T, T); ``leakage``: the (layer, head, T, T) logit sums and (layer, head, T) log Z sums
    unless ``mean_maps`` is off (Llama-3.1-8B at T = 1,024: moments 16 GiB, 20 groups 5 GiB);
    ``position0``: the (layer + 1, hidden) float32 states of the shard, and as much again for the
    value vectors at most.
    """
    cell = heads * seq_len * seq_len  # one sequence's (head, T, T) map
    total = 0
    if "moments" in names:
        total += (2 * layers + 1) * cell * 8
    if "groups" in names:
        total += plan.n_groups * layers * seq_len * seq_len * 8
    if "leakage" in names and plan.mean_maps:
        total += leakage_sums_bytes(layers, heads, seq_len, 8)
    if "position0" in names:
        total += 2 * plan.n_sequences * (layers + 1) * hidden * 4
    work = [WORK_BYTES_PER_CELL[n] for n in names if n in WORK_BYTES_PER_CELL]
    if work:  # one reducer's update at a time, one chunk of the batch at a time
        chunk = max(cell, (plan.work_cells // cell) * cell)
        if plan.batch_size is not None:
            chunk = min(chunk, int(plan.batch_size) * cell)
        total += max(work) * chunk
    return int(total)


def leakage_sums_bytes(layers: int, heads: int, seq_len: int, map_bytes: int) -> int:
    """Bytes of the leakage reducer's summed maps: the logits' (layer, head, T, T) at
    ``map_bytes`` a value (8 in float64, 4 in a final float32 store) and log Z's (layer, head, T)
    in float64 (the summed log-attention maps are rebuilt from the two, never held)."""
    return layers * heads * seq_len * (seq_len * map_bytes + 8)


def sequence_bytes(
    heads: int, hidden: int, intermediate: int, seq_len: int, dtype_size: int
) -> int:
    """Estimated peak bytes one sequence adds to an extraction forward pass: the capture's float32
    (head, T, T) score buffer and a few more of its size (softmax, the reducers' float64 work),
    and (T, hidden) and (T, intermediate) activations in the model dtype; the factors 4 and 6 are
    deliberately generous."""
    scores = 4 * heads * seq_len * seq_len * 4
    acts = 6 * seq_len * (hidden + intermediate) * dtype_size
    return scores + acts


def map_store_bytes(shape: Shape, seq_len: int, names: Sequence[str], *, n_groups: int) -> int:
    """Bytes of one variant's score store before compression: float32 mean and M2 per (layer,
    head, T, T) (``moments``) and ``n_groups`` float32 head-averaged (layer, T, T) maps
    (``groups``); paper 2's per-sequence tables are small beside them and not counted."""
    total = 0
    if "moments" in names:
        total += 2 * shape.layers * shape.heads * seq_len * seq_len * 4
    if "groups" in names:
        total += n_groups * shape.layers * seq_len * seq_len * 4
    return total


#: Batch counted for the host memory of ``batch_size: auto`` on CPU (the job takes what
#: ``memory_fraction`` of the free memory allows; the request covers this many sequences).
CPU_AUTO_BATCH = 4


@dataclass(frozen=True)
class ExtractJob:
    """What one extraction job runs, as its memory request reads it: the prompts' ``seq_len``,
    the variants (name -> reducer names), the groups, the shard's sequences, the batch size (or
    "auto"), the device, whether the leakage reducer sums mean maps and whether the job merges
    its one shard in memory."""

    seq_len: int
    variants: Mapping[str, Sequence[str]]
    n_groups: int
    n_sequences: int
    batch_size: int | str
    device: str
    mean_maps: bool = True
    merges: bool = False


def extract_request(shape: Shape, n_params: int, dtype: str, job: ExtractJob) -> dict[str, int]:
    """Host ``mem_mb`` of one extraction job and, on a GPU, its device memory (``gpu_mb``, before
    the batch: weights and reducers' state).

    The model is read into host memory before it moves to a GPU. On CPU the reducers' state and
    working memory (the largest variant's: one variant's state is freed before the next
    allocates), the batch's activations and one variant's float32 store live beside it; on a GPU
    the state stays on the card and only the store comes back. ``job.merges`` adds what
    ``merge_scores`` holds beside its process (:data:`MERGE_STORE_FACTOR` × the largest variant
    store; measured 2.15 × a 255 MB store, 6 layers × 8 heads at T = 768, on CPU)."""
    seq_len, variants, device = job.seq_len, job.variants, job.device
    n_groups, n_sequences, batch_size = job.n_groups, job.n_sequences, job.batch_size
    w = weights_bytes(n_params, dtype)
    plan = ReducerPlan(
        n_groups=n_groups,
        mean_maps=job.mean_maps,
        n_sequences=n_sequences,
        work_cells=WORK_CELLS if device == "cpu" else WORK_CELLS_CUDA,
        batch_size=None if batch_size == "auto" else int(batch_size),
    )
    state = max(
        reducer_state_bytes(shape.layers, shape.heads, shape.hidden, seq_len, names, plan)
        for names in variants.values()
    )
    store = max(map_store_bytes(shape, seq_len, n, n_groups=n_groups) for n in variants.values())
    out = {}
    if device == "cpu":
        batch = CPU_AUTO_BATCH if batch_size == "auto" else int(batch_size)
        per = sequence_bytes(
            shape.heads, shape.hidden, shape.intermediate, seq_len, dtype_bytes(dtype)
        )
        if any("leakage" in names for names in variants.values()):
            # the heap beside the state, and the result's float64 copy of the summed maps
            cells = shape.layers * shape.heads * seq_len * seq_len
            per_cell = CPU_LEAKAGE_CELL_BYTES + CPU_LEAKAGE_CELL_BYTES_PER_SEQUENCE * n_sequences
            sums = leakage_sums_bytes(shape.layers, shape.heads, seq_len, 8)
            store = max(store, cells * per_cell + sums)
        host = PROCESS_BYTES + w + state + batch * per + store
    else:
        host = PROCESS_BYTES + w + store
        out["gpu_mb"] = _mb(w + state)
    if job.merges:
        host += MERGE_STORE_FACTOR * max(
            variant_store_bytes(shape, seq_len, names, n_groups=n_groups)
            for names in variants.values()
        )
    return {"mem_mb": _mb(host), **out}


#: merge_scores' peak over one variant's store (float32 maps, uncompressed): the merged result in
#: float64 (twice the store) and one shard's arrays read at a time
#: (``causalpos.io.shards.merge_shards``), cast back to float32 when written. Measured on the
#: build VM (2026-11-26, docs/paper-shape.md): 12,496 MB for the 4.43 GB store of Llama-3.2-1B's
#: shape at T = 1,024 (2.75 × with the process), rounded up.
MERGE_STORE_FACTOR = 3.0

#: diagonal_normalize's peak over the float32 mean maps it reads (the normalized maps written
#: beside them). Measured (2026-11-26): 12,215 MB for 2.15 GB of mean maps (5.55 ×), rounded up.
NORMALIZE_STORE_FACTOR = 6.0

#: The ``leakage`` rule's peak over the summed maps of the variants it reads (float32, every
#: variant at once). Measured (2026-11-26): 3,344 MB for 12 variants of 268 MB (Llama-3.2-1B's
#: shape, T = 256, with the process), rounded up; each variant's maps were then two float32
#: (layer, head, T, T) arrays (logits and log-attention), where a store now keeps one and
#: :func:`leakage_request` counts one: not re-measured since.
LEAKAGE_MAPS_FACTOR = 1.25


def variant_store_bytes(shape: Shape, seq_len: int, names: Sequence[str], *, n_groups: int) -> int:
    """Bytes of one variant's merged store before compression: its score maps
    (:func:`map_store_bytes`) and, where paper 2's leakage reducer keeps them, its summed logits
    and log Z as the merge holds them (float64: :func:`leakage_sums_bytes`)."""
    total = map_store_bytes(shape, seq_len, names, n_groups=n_groups)
    if "leakage" in names:
        total += leakage_sums_bytes(shape.layers, shape.heads, seq_len, 8)
    return total


def merge_request(store_bytes: int) -> dict[str, int]:
    """``mem_mb`` of ``merge_scores`` for a variant store of ``store_bytes``
    (:func:`variant_store_bytes`)."""
    return {"mem_mb": _mb(PROCESS_BYTES + MERGE_STORE_FACTOR * store_bytes)}


def normalize_request(shape: Shape, seq_len: int) -> dict[str, int]:
    """``mem_mb`` of ``diagonal_normalize``: the float32 (layer, head, T, T) mean maps read and
    their normalized copy written."""
    mean = shape.layers * shape.heads * seq_len * seq_len * 4
    return {"mem_mb": _mb(PROCESS_BYTES + NORMALIZE_STORE_FACTOR * mean)}


def leakage_request(shape: Shape, seq_len: int, n_variants: int) -> dict[str, int]:
    """``mem_mb`` of the ``leakage`` rule: the summed maps of its ``n_variants`` score stores
    (float32 logits and float64 log Z: :func:`leakage_sums_bytes`)."""
    maps = n_variants * leakage_sums_bytes(shape.layers, shape.heads, seq_len, 4)
    return {"mem_mb": _mb(PROCESS_BYTES + LEAKAGE_MAPS_FACTOR * maps)}


# ---------------------------------------------------------------------------------------------
# Arithmetic: the matmul FLOPs of the work a job does, for the per-stage budget
# (benchmarks/budget.py sets a stage's CPU time against its FLOPs over the machine's sgemm rate).


def attention_flops(shape: Shape, seq_len: int) -> int:
    """FLOPs of one sequence's attention products, QKᵀ and PV, over the whole (T, T) map (what
    eager and SDPA attention compute on a CPU, masked cells included)."""
    return 2 * 2 * shape.layers * shape.heads * shape.head_dim * seq_len * seq_len


def forward_flops(shape: Shape, seq_len: int, *, logits_positions: int = 1) -> int:
    """Matmul FLOPs of one sequence's forward pass: the layers' matrices for every token (2 per
    multiply-add; biases, norms and activations are not counted), the attention products, and the
    vocabulary projection at ``logits_positions`` positions (extraction keeps one:
    ``logits_to_keep=1``; a loss needs every position)."""
    return (
        seq_len * (2 * shape.layers * _matrix_weights(shape))
        + attention_flops(shape, seq_len)
        + 2 * logits_positions * shape.hidden * shape.vocab
    )


def train_step_flops(shape: Shape, seq_len: int, batch: int) -> int:
    """Matmul FLOPs of one training step: forward with the loss at every position, and the
    backward's two products per forward product (gradients of inputs and of weights), i.e.
    3 × the forward."""
    return 3 * batch * forward_flops(shape, seq_len, logits_positions=seq_len)
