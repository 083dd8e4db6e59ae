"""causalpos.models.footprint and causalpos.config.resources: parameter counts from config.json
fields against transformers' own count, the model jobs' requests in closed form, and every
stand-in of configs/paper-shape.yaml asking for what its weights and the measured peaks need."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import torch
import yaml

from causalpos.config import Resolved
from causalpos.models import footprint as F
from causalpos.models.architectures import (
    ARCHITECTURES,
    architecture_config,
    read_architecture_file,
)

REPO = Path(__file__).resolve().parents[2]
ARCH_DIR = REPO / "configs" / "architectures"
SHAPE = REPO / "configs" / "paper-shape.yaml"
PAPER = REPO / "configs" / "paper.yaml"


def _meta_count(config) -> int:
    from transformers import AutoModelForCausalLM

    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    return sum(p.numel() for p in model.parameters())


@pytest.mark.parametrize("path", sorted(ARCH_DIR.glob("*.json")), ids=lambda p: p.stem)
def test_parameter_count_of_every_architecture_file_is_transformers_count(path):
    from causalpos.models.architectures import file_config

    fields = read_architecture_file(path)
    assert F.parameter_count(F.shape_of(fields)) == _meta_count(file_config(path))


@pytest.mark.parametrize("arch", sorted(ARCHITECTURES))
@pytest.mark.parametrize("overrides", [{}, {"tie_word_embeddings": True, "vocab_size": 300}])
def test_parameter_count_of_every_tiny_architecture(arch, overrides):
    """Biases (qwen2), q/k norms (qwen3, gemma3), four norms a layer (gemma3), tied heads."""
    from causalpos.models.architectures import tiny_config_kwargs

    fields = {"model_type": ARCHITECTURES[arch], **tiny_config_kwargs(arch), **overrides}
    assert F.parameter_count(F.shape_of(fields)) == _meta_count(
        architecture_config(arch, "tiny", overrides)
    )


def test_shape_errors_name_the_field_and_the_type():
    with pytest.raises(ValueError, match="model_type 'gpt2' not one of"):
        F.shape_of({"model_type": "gpt2"})
    with pytest.raises(ValueError, match=r"lacks \['intermediate_size'\]"):
        F.shape_of({"model_type": "llama", "vocab_size": 8, "hidden_size": 4,
                    "num_hidden_layers": 1, "num_attention_heads": 2})  # fmt: skip
    with pytest.raises(ValueError, match="dtype 'int8'"):
        F.weights_bytes(10, "int8")


def test_prepare_request_closed_form():
    n = 1_235_814_400  # Llama-3.2-1B
    built = F.prepare_request(n, "bfloat16", builds=True)
    w = 2 * n
    assert built["mem_mb"] == -(-(2 * 2**30 + 1.5 * w) // 10**6)
    assert built["disk_mb"] == -(-(1.05 * w + 200e6) // 10**6)
    copied = F.prepare_request(n, "bfloat16", builds=False)
    assert copied["mem_mb"] == -(-(2 * 2**30) // 10**6) and copied["disk_mb"] == built["disk_mb"]
    assert F.prepare_request(n, "float32", builds=True)["disk_mb"] > 2 * built["disk_mb"] - 300


def test_extract_request_closed_form():
    """Paper 1 on Llama-3.1-8B's shape at 1,024 tokens: on CPU the weights, the moments and
    group state, the batch and the float32 store on the host; on a GPU the state on the card."""
    shape = F.shape_of(read_architecture_file(ARCH_DIR / "llama-3.1-8b.json"))
    n = F.parameter_count(shape)
    cell = 32 * 1024 * 1024
    state = (2 * 32 + 1) * cell * 8 + 20 * 32 * 1024 * 1024 * 8
    store = 2 * 32 * cell * 4 + 20 * 32 * 1024 * 1024 * 4
    per = 4 * 32 * 1024 * 1024 * 4 + 6 * 1024 * (4096 + 14336) * 2
    kw = dict(n_groups=20, n_sequences=250, batch_size=2)
    job = lambda variants, device: F.ExtractJob(1024, variants, device=device, **kw)  # noqa: E731
    cpu = F.extract_request(shape, n, "bfloat16", job({"causal": ["moments", "groups"]}, "cpu"))
    assert cpu == {"mem_mb": -(-(2 * 2**30 + 2 * n + state + 2 * per + store) // 10**6)}
    gpu = F.extract_request(shape, n, "bfloat16", job({"causal": ["moments", "groups"]}, "cuda"))
    assert gpu == {
        "mem_mb": -(-(2 * 2**30 + 2 * n + store) // 10**6),
        "gpu_mb": -(-(2 * n + state) // 10**6),
    }
    # the largest variant's state counts, not the sum: one variant's state is freed first
    two = F.extract_request(
        shape, n, "bfloat16", job({"a": ["moments", "groups"], "b": ["leakage"]}, "cuda")
    )
    # summed logits (layer, head, T, T) and log Z (layer, head, T) + one chunk of the batch of 2
    leak = 32 * (cell + 32 * 1024) * 8 + 128 * 2 * cell
    assert leak < state and two == gpu
    # and where the leakage variant's is the larger (a batch of 4), that one
    big = F.extract_request(
        shape,
        n,
        "bfloat16",
        F.ExtractJob(1024, {"a": ["moments", "groups"], "b": ["leakage"]}, 20, 250, 4, "cuda"),
    )
    leak = 32 * (cell + 32 * 1024) * 8 + 128 * 4 * cell
    assert leak > state and big == {**gpu, "gpu_mb": -(-(2 * n + leak) // 10**6)}


def _validated(cfg: dict) -> dict:
    from snakemake.utils import validate

    cfg = copy.deepcopy(cfg)
    validate(cfg, str(REPO / "workflow" / "schemas" / "config.schema.yaml"))
    return cfg


def _overlaid(*paths: Path) -> dict:
    """Snakemake's merge of several --configfile files: nested dicts updated key by key."""

    def merge(a, b):
        for k, v in b.items():
            a[k] = (
                merge(a.get(k, {}), v) if isinstance(v, dict) and isinstance(a.get(k), dict) else v
            )
        return a

    out: dict = {}
    for p in paths:
        merge(out, yaml.safe_load(p.read_text()))
    return out


#: Measured on the 2-core build VM (2026-11-26, docs/performance.md): prepare_model of the
#: Llama-3.2-1B-shape stand-in in bf16 (1,235,814,400 parameters), peak RSS in MB.
MEASURED_PREPARE_1B_MB = 3318
MEASURED_1B_PARAMS = 1_235_814_400


def test_every_stand_in_asks_for_its_weights_and_the_measured_peak_scaled(monkeypatch):
    """configs/paper-shape.yaml: each stand-in's prepare_model mem_mb covers its bf16 weights
    and the 1B stand-in's measured peak scaled by parameter count; its disk_mb its weights."""
    monkeypatch.chdir(REPO)
    resolved = Resolved(_validated(yaml.safe_load(SHAPE.read_text())))
    names = list(yaml.safe_load(SHAPE.read_text())["models"])
    assert len(names) == 9
    for name in names:
        shape, n, dtype = resolved.model_footprint(name)
        assert dtype == "bfloat16"
        req = resolved.prepare_resources(name)
        weights_mb = 2 * n / 1e6
        assert req["mem_mb"] >= weights_mb, name
        assert req["mem_mb"] >= MEASURED_PREPARE_1B_MB * n / MEASURED_1B_PARAMS, name
        assert weights_mb < req["disk_mb"] <= 1.15 * weights_mb + 200, name
    # the published sizes: Phi-4 14.66 B in bf16 on disk
    assert resolved.model_footprint("phi-4")[1] == pytest.approx(14.66e9, rel=1e-3)
    # the twin is `like:` the 1B stand-in: the same shape
    assert resolved.model_footprint("llama-3.2-1b-random")[1] == MEASURED_1B_PARAMS


def test_paper_config_hub_models_are_sized_from_the_architecture_files(monkeypatch):
    monkeypatch.chdir(REPO)
    resolved = Resolved(_validated(yaml.safe_load(PAPER.read_text())))
    # a hub checkpoint is copied, not built: the process alone; disk: its bf16 safetensors
    req = resolved.prepare_resources("llama-3.1-8b")
    assert req["mem_mb"] == F.prepare_request(8_030_261_248, "bfloat16", builds=False)["mem_mb"]
    assert req["disk_mb"] == pytest.approx(1.05 * 2 * 8.03e9 / 1e6 + 200, rel=1e-3)
    # the random twin of a hub model is built in bf16 (the config's dtype)
    twin = resolved.prepare_resources("llama-3.2-1b-random")
    assert twin == F.prepare_request(MEASURED_1B_PARAMS, "bfloat16", builds=True)
    # the NoPE checkpoint's config.json is not kept here: the fallback requests
    assert resolved.model_footprint("nope-1.5b") is None
    assert resolved.prepare_resources("nope-1.5b") == {"mem_mb": 16000, "disk_mb": 32000}
    # extraction on one GPU: host = process + weights + the float32 maps of the store, and (the
    # dataset is one shard) the in-memory merge writing the final store: 3 x the store
    ext = resolved.extract_resources("llama-3.1-8b", "fineweb-first1024")
    store = 2 * 32 * 32 * 1024**2 * 4 + 20 * 32 * 1024**2 * 4
    assert resolved.n_shards("fineweb-first1024") == 1
    assert ext["mem_mb"] == -(-(2 * 2**30 + 2 * 8_030_261_248 + store + 3.0 * store) // 10**6)
    assert ext["gpu_mb"] > 2 * 8.03e9 / 1e6 + 17_000  # weights + 17 GB of moments state


def test_the_cpu_overlay_keeps_the_shapes_and_cuts_only_counts(monkeypatch):
    monkeypatch.chdir(REPO)
    shape = yaml.safe_load(SHAPE.read_text())
    over = _overlaid(SHAPE, REPO / "configs" / "paper-shape-cpu.yaml")
    assert over["models"] == shape["models"] and over["device"] == "cpu"
    for name, ds in shape["datasets"].items():
        assert over["datasets"][name]["seq_len"] == ds["seq_len"]
        assert over["datasets"][name]["corpus"] == ds["corpus"]
    assert over["datasets"]["random-chunks1024"]["n_sequences"] == 2
    assert over["datasets"]["kjv-chunks256"]["n_sequences"] == 4
    resolved = Resolved(_validated(over))
    # the 1B stand-ins' extraction asks for what the CPU run holds: weights, moments state, and
    # (one shard) the merge's hold on the largest variant store beside the process
    req = resolved.extract_resources("nope-1.5b", "random-chunks1024")
    merge = max(
        resolved.merge_resources("nope-1.5b", "random-chunks1024", v)["mem_mb"]
        for v in resolved.merge_variants("nope-1.5b", "random-chunks1024")
    )
    assert 12_000 < req["mem_mb"] - (merge - 2 * 2**30 / 1e6) < 20_000 and "gpu_mb" not in req


#: Peak RSS (MB, Snakemake's benchmark files) of the overlay's jobs on the build VM, 2026-11-26,
#: the larger of its two runs (docs/performance.md): (rule, wildcards) -> MB.
MEASURED_CPU_RUN_MB = {
    ("prepare_model", "llama-3.2-1b"): 2746,
    ("prepare_model", "nope-1.5b"): 2746,
    ("extract_scores", "nope-1.5b", "random-chunks1024"): 11978,
    ("extract_scores", "llama-3.2-1b", "kjv-chunks256"): 7682,
    ("merge_scores", "nope-1.5b", "random-chunks1024", "causal"): 12496,
    ("merge_scores", "llama-3.2-1b", "kjv-chunks256", "scrambled_rope+bidirectional"): 915,
    ("diagonal_normalize", "nope-1.5b", "random-chunks1024"): 12215,
    ("leakage", "llama-3.2-1b", "kjv-chunks256"): 3344,
}


def test_every_measured_job_of_the_cpu_overlay_ran_within_its_request(monkeypatch):
    """The overlay's requests, as the rules compute them, against the measured peaks, with at
    most 3x room (a request far above the peak would hold a cluster's memory for nothing)."""
    monkeypatch.chdir(REPO)
    r = Resolved(_validated(_overlaid(SHAPE, REPO / "configs" / "paper-shape-cpu.yaml")))
    ask = {
        "prepare_model": r.prepare_resources,
        "extract_scores": r.extract_resources,
        "merge_scores": r.merge_resources,
        "diagonal_normalize": r.normalize_resources,
        "leakage": r.leakage_resources,
    }
    for (rule, *wildcards), peak in MEASURED_CPU_RUN_MB.items():
        mem = ask[rule](*wildcards)["mem_mb"]
        assert peak <= mem <= 3 * peak + 2500, (rule, wildcards, peak, mem)


def test_store_requests_closed_form():
    shape = F.shape_of(read_architecture_file(ARCH_DIR / "llama-3.2-1b.json"))
    cells = 16 * 32 * 1024**2
    store = F.variant_store_bytes(shape, 1024, ["moments", "groups"], n_groups=2)
    assert store == 2 * cells * 4 + 2 * 16 * 1024**2 * 4
    # the summed logits (layer, head, T, T) and log Z (layer, head, T), float64 in the merge
    assert (
        F.variant_store_bytes(shape, 256, ["leakage", "sink"], n_groups=2)
        == 16 * 32 * 256 * (256 + 1) * 8
    )
    assert F.merge_request(store)["mem_mb"] == -(-(2 * 2**30 + 3.0 * store) // 10**6)
    assert F.normalize_request(shape, 1024)["mem_mb"] == -(-(2 * 2**30 + 6.0 * cells * 4) // 10**6)
    assert F.leakage_request(shape, 256, 12)["mem_mb"] == -(
        -(2 * 2**30 + 1.25 * 12 * 16 * 32 * 256 * (256 * 4 + 8)) // 10**6
    )


@pytest.mark.parametrize("arch", ["llama", "qwen2", "mistral"])
def test_forward_and_training_flops_are_torch_flop_counters(arch):
    """The budget's arithmetic (benchmarks/budget.py) against torch's own FLOP counter on a tiny
    model with eager attention (whose QKᵀ and PV are counted matmuls): a forward keeping one
    position's logits, as extraction does, and a training step (loss at every position, then
    backward) are exactly the closed forms."""
    from torch.utils.flop_counter import FlopCounterMode
    from transformers import AutoModelForCausalLM

    from causalpos.models.architectures import tiny_config_kwargs

    fields = {"model_type": ARCHITECTURES[arch], **tiny_config_kwargs(arch), "vocab_size": 300}
    from transformers import AutoConfig

    cfg = AutoConfig.for_model(**fields)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(cfg, attn_implementation="eager")
    shape, batch, seq = F.shape_of(cfg.to_dict()), 3, 20
    ids = torch.randint(0, 300, (batch, seq))
    with torch.inference_mode(), FlopCounterMode(display=False) as fc:
        model(input_ids=ids, use_cache=False, logits_to_keep=1)
    assert fc.get_total_flops() == batch * F.forward_flops(shape, seq)
    with FlopCounterMode(display=False) as fc:
        model(input_ids=ids, labels=ids, use_cache=False).loss.backward()
    assert fc.get_total_flops() == F.train_step_flops(shape, seq, batch)
    # the attention term is what makes the count exact (it is not a rounding of the rest)
    assert F.attention_flops(shape, seq) > 0
