"""configs/paper-shape.yaml: configs/paper.yaml's DAG with random-weight stand-ins of the hub models
(configs/architectures/*.json) and local text — its shape against the paper config's, the
``config_file`` model source, and a scaled-down run of it on CPU with the rehearsal banner."""

from __future__ import annotations

import copy
import json
import time
from pathlib import Path

import pytest
import yaml

from causalpos.config import ConfigError, Resolved  # noqa: E402
from causalpos.models.architectures import (  # noqa: E402
    ModelSpecError,
    file_config,
    read_architecture_file,
)
from causalpos.models.config_keys import unknown_config_keys  # noqa: E402
from causalpos.models.load import build_model_dir  # noqa: E402
from causalpos.stages.report import REHEARSAL_BANNER  # noqa: E402
from tests.wfutil import copy_pipeline, planned_jobs, rule_counts, snakemake  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
PAPER = REPO / "configs" / "paper.yaml"
SHAPE = REPO / "configs" / "paper-shape.yaml"
ARCH_DIR = REPO / "configs" / "architectures"
#: paper.yaml's hub datasets -> their local stand-ins in paper-shape.yaml
DATASET_STAND_INS = {
    "fineweb-first1024": "random-chunks1024",
    "fineweb-first50": "kjv-first50",
    "wiki-chunks256": "kjv-chunks256",
    "random-chunks256": "random-chunks256",
    "kjv-chunks512": "kjv-chunks512",
}


def _load(path: Path) -> dict:
    return yaml.safe_load(path.read_text())


def _renamed(obj):
    """``obj`` with paper.yaml's dataset names replaced by their stand-ins' (keys and values)."""
    if isinstance(obj, dict):
        return {DATASET_STAND_INS.get(k, k): _renamed(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_renamed(v) for v in obj]
    return DATASET_STAND_INS.get(obj, obj) if isinstance(obj, str) else obj


def test_paper_shape_is_the_paper_config_with_stand_ins():
    paper, shape = _load(PAPER), _load(SHAPE)
    assert shape["rehearsal"] is True and "rehearsal" not in paper
    # every section but the models and datasets is the paper's (dataset names mapped)
    for key in set(paper) - {"models", "datasets"}:
        assert shape[key] == _renamed(paper[key]), key
    assert set(shape) == set(paper) | {"rehearsal"}
    # same dataset sizes
    assert set(shape["datasets"]) == set(DATASET_STAND_INS.values())
    for name, stand_in in DATASET_STAND_INS.items():
        for key in ("seq_len", "n_sequences"):
            assert shape["datasets"][stand_in][key] == paper["datasets"][name][key]
        assert shape["datasets"][stand_in]["corpus"]["type"] in ("kjv", "random_tokens")
    # same model names; every hub model a random_init stand-in of its architecture file
    assert set(shape["models"]) == set(paper["models"])
    for name, spec in paper["models"].items():
        stand_in = shape["models"][name]
        assert stand_in["source"] == "random_init"
        assert stand_in.get("rope", "rope") == spec.get("rope", "rope")
        if spec["source"] == "hf":
            path = REPO / stand_in["config_file"]
            assert path.is_file()
            if name != "nope-1.5b":  # its own config.json is not kept (the config says so)
                assert path.stem == name
        else:
            assert stand_in == spec


def test_stand_ins_tokenizer_fits_every_architecture():
    """The trained tokenizer's ids (0 .. vocab_size - 1) index every stand-in's embedding."""
    shape = _load(SHAPE)
    n_ids = shape["train"]["tokenizer"]["vocab_size"]
    vocab = {p.stem: read_architecture_file(p)["vocab_size"] for p in ARCH_DIR.glob("*.json")}
    assert vocab == {
        "llama-3.1-8b": 128256,
        "llama-3.2-1b": 128256,
        "llama-3.2-3b": 128256,
        "mistral-7b": 32000,
        "phi-4": 100352,
        "qwen2.5-7b": 152064,
        "qwen3-8b": 151936,
    }
    assert n_ids == 8192 and n_ids < min(vocab.values())


def test_architecture_files_give_the_published_rope_and_window():
    llama = file_config(ARCH_DIR / "llama-3.1-8b.json")
    assert llama.rope_parameters["rope_type"] == "llama3"
    assert llama.rope_parameters["factor"] == 8.0 and llama.rope_parameters["rope_theta"] == 5e5
    assert file_config(ARCH_DIR / "llama-3.2-1b.json").rope_parameters["factor"] == 32.0
    assert file_config(ARCH_DIR / "mistral-7b.json").sliding_window == 4096
    qwen = file_config(ARCH_DIR / "qwen2.5-7b.json")
    assert qwen.sliding_window is None and qwen.rope_parameters["rope_theta"] == 1e6
    assert file_config(ARCH_DIR / "phi-4.json").rope_parameters["rope_theta"] == 250000
    assert file_config(ARCH_DIR / "qwen3-8b.json").head_dim == 128


# ----------------------------------------------------------------------------------------------
# random_init `config_file:`


def test_config_file_model_has_the_files_shape_and_the_tokenizers_ids(tmp_path, tokenizer_dir):
    from transformers import AutoConfig, AutoTokenizer

    tiny = {"hidden_size": 16, "intermediate_size": 32, "num_hidden_layers": 1, "head_dim": 4}
    spec = {
        "source": "random_init",
        "config_file": str(ARCH_DIR / "mistral-7b.json"),
        "config": {**tiny, "num_attention_heads": 4, "num_key_value_heads": 2},
        "tokenizer": str(tokenizer_dir),
        "seed": 3,
    }
    out = build_model_dir("m", spec, tmp_path / "models" / "m")
    cfg, tok = AutoConfig.from_pretrained(out), AutoTokenizer.from_pretrained(out)
    assert cfg.model_type == "mistral"
    assert (cfg.vocab_size, cfg.sliding_window, cfg.rope_parameters["rope_theta"]) == (
        32000,
        4096,
        10000.0,
    )
    assert (cfg.hidden_size, cfg.num_hidden_layers, cfg.num_key_value_heads) == (16, 1, 2)
    assert (cfg.bos_token_id, cfg.eos_token_id) == (tok.bos_token_id, tok.eos_token_id) == (1, 2)
    src = json.loads((out / "causalpos_source.json").read_text())
    assert src["architecture"] == "mistral" and len(src["config_file_sha256"]) == 64


def test_stand_in_is_built_and_saved_in_the_configs_dtype(tmp_path, tokenizer_dir):
    """bf16: every saved tensor bf16, the weights file 2 bytes a parameter (plus its header), the
    tokenizer read from ``tokenizer_dir`` (no sibling model); the same seed in float32 gives the
    same shapes at twice the bytes."""
    from safetensors import safe_open

    from causalpos.models.footprint import parameter_count, shape_of

    tiny = {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2, "head_dim": 8}
    tiny.update(num_attention_heads=4, num_key_value_heads=2)
    spec = {
        "source": "random_init",
        "config_file": str(ARCH_DIR / "llama-3.2-1b.json"),
        "config": {**tiny, "vocab_size": 1024},
        "tokenizer": "trained-rope",  # not a sibling: read from tokenizer_dir
        "seed": 5,
    }
    n = parameter_count(shape_of({**read_architecture_file(spec["config_file"]), **spec["config"]}))
    sizes = {}
    for dtype in ("bfloat16", "float32"):
        out = build_model_dir(
            "m", spec, tmp_path / dtype / "m", dtype=dtype, tokenizer_dir=tokenizer_dir
        )
        f = out / "model.safetensors"
        with safe_open(f, "pt") as st:
            dtypes = {str(st.get_tensor(k).dtype) for k in st.keys()}
            count = sum(st.get_tensor(k).numel() for k in st.keys())
        assert dtypes == {f"torch.{dtype}"} and count == n
        sizes[dtype] = f.stat().st_size
        assert json.loads((out / "causalpos_source.json").read_text())["dtype"] == dtype
        assert (out / "tokenizer.json").is_file()
    assert 2 * n < sizes["bfloat16"] < 2 * n + 64_000  # the safetensors header
    assert 4 * n < sizes["float32"] < 4 * n + 64_000
    with pytest.raises(ValueError, match="dtype 'int8' not in"):
        build_model_dir("m", spec, tmp_path / "x", dtype="int8", tokenizer_dir=tokenizer_dir)


def test_config_file_errors_name_the_key(tmp_path, tokenizer_dir, tokenizer_bos):
    base = {"source": "random_init", "tokenizer": str(tokenizer_dir)}
    with pytest.raises(ModelSpecError, match="config_file.*not a readable JSON"):
        build_model_dir("m", {**base, "config_file": str(tmp_path / "nope.json")}, tmp_path / "a")
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"model_type": "gpt2", "hidden_size": 8}))
    with pytest.raises(ModelSpecError, match="config_file.*model_type.*'gpt2'"):
        build_model_dir("m", {**base, "config_file": str(bad)}, tmp_path / "b")
    both = {**base, "config_file": str(ARCH_DIR / "phi-4.json"), "architecture": "phi3"}
    with pytest.raises(ModelSpecError, match="exactly one of `architecture`, `like`"):
        build_model_dir("m", both, tmp_path / "c")
    # ids beyond the embedding: the tokenizer's ids (~400) and vocab_size 256
    small = {**base, "config_file": str(ARCH_DIR / "phi-4.json"), "config": {"vocab_size": 256}}
    small["config"].update(hidden_size=8, intermediate_size=8, num_hidden_layers=1)
    small["config"].update(num_attention_heads=2, num_key_value_heads=1)
    top = len(tokenizer_bos) - 1
    assert top > 256
    with pytest.raises(ModelSpecError, match=f"ids reach {top}, beyond the model's vocab_size 256"):
        build_model_dir("m", small, tmp_path / "d")


def test_config_file_is_read_at_config_time_and_is_an_input(tmp_path, monkeypatch):
    monkeypatch.chdir(REPO)
    cfg = _validated(_load(SHAPE))
    resolved = Resolved(cfg)
    # the stand-ins need the trained tokenizer, not a trained model (no train_model first)
    assert resolved.prepare_model_inputs("qwen3-8b") == [
        "resources/tokenizers/kjv-bpe-8k",
        "configs/architectures/qwen3-8b.json",
    ]
    assert resolved.prepare_tokenizer_dir("qwen3-8b") == "resources/tokenizers/kjv-bpe-8k"
    assert resolved.prepare_dtype("qwen3-8b") == "bfloat16"
    # the twin takes its config and tokenizer from the stand-in it is `like:`
    assert resolved.prepare_model_inputs("llama-3.2-1b-random") == ["resources/models/llama-3.2-1b"]
    assert resolved.prepare_tokenizer_dir("llama-3.2-1b-random") is None
    assert resolved.model_context("phi-4") == (16384, "rope")
    assert resolved.model_context("nope-1.5b") == (131072, "none")
    cfg["models"]["phi-4"]["config_file"] = "configs/architectures/phi-5.json"
    with pytest.raises(ConfigError, match=r"models\.phi-4\.config_file: .*phi-5\.json"):
        Resolved(cfg).check()


# ----------------------------------------------------------------------------------------------
# The DAG


@pytest.mark.slow
def test_dry_run_has_the_paper_configs_jobs(tmp_path):
    """Every rule runs as many jobs as for configs/paper.yaml, but ``sample_sequences``: one
    store per dataset here (every stand-in shares the trained tokenizer), one per (dataset,
    tokenizer) there."""
    pipeline = copy_pipeline(tmp_path / "pipeline")
    paper = rule_counts(planned_jobs(pipeline, "--configfile", "configs/paper.yaml"))
    shape = rule_counts(planned_jobs(pipeline, "--configfile", "configs/paper-shape.yaml"))
    assert shape["sample_sequences"] == len(_load(SHAPE)["datasets"]) == 5
    assert paper["sample_sequences"] == 16
    assert {**shape, "sample_sequences": 0} == {**paper, "sample_sequences": 0}
    assert shape["prepare_model"] == len(_load(SHAPE)["models"]) == 9
    # the scaled run of the test below runs every rule of the full shape, fewer jobs of each
    scaled = scaled_config(_load(SHAPE))
    (pipeline / "configs" / "scaled.yaml").write_text(yaml.safe_dump(scaled, sort_keys=False))
    small = rule_counts(planned_jobs(pipeline, "--configfile", "configs/scaled.yaml"))
    assert set(small) == set(shape)
    assert all(small[r] <= shape[r] for r in shape)


#: The two stores configs/paper-shape-cpu.yaml builds on a CPU machine (docs/paper-shape.md).
CPU_TARGETS = (
    "results/normalized/nope-1.5b/random-chunks1024/causal.zarr",
    "results/leakage/llama-3.2-1b/kjv-chunks256.zarr",
)


@pytest.mark.slow
def test_cpu_overlay_plans_the_1b_stores_with_no_model_trained(tmp_path):
    """The overlay's dry run: the 1B-shape stand-ins' paper-1 and paper-2 stores, from the
    trained tokenizer alone (no train_model), every job on the CPU, each stand-in's
    prepare_model asking for the memory of its bf16 build."""
    pipeline = copy_pipeline(tmp_path / "pipeline")
    args = (
        *CPU_TARGETS,
        "--configfile",
        "configs/paper-shape.yaml",
        "configs/paper-shape-cpu.yaml",
    )
    counts = rule_counts(planned_jobs(pipeline, *args))
    assert counts == {
        "train_tokenizer": 1,
        "prepare_model": 2,
        "sample_sequences": 2,
        # one per pair, each dataset one shard: the final stores, no merge job (paper 1's
        # causal map; paper 2's 12 variants)
        "extract_scores": 2,
        "diagonal_normalize": 1,
        "leakage": 1,
    }
    proc = snakemake(pipeline, "-n", *args)
    text = proc.stdout + proc.stderr
    from causalpos.models.footprint import prepare_request

    req = prepare_request(1_235_814_400, "bfloat16", builds=True)
    assert text.count(f"disk_mb={req['disk_mb']},") == 2
    assert text.count(f"mem_mb={req['mem_mb']},") == 2
    assert "gpu=1" not in text


#: Tiny widths for every stand-in (head_dim 8; vocab_size: the scaled tokenizer's).
TINY_MODEL = {
    "hidden_size": 32,
    "intermediate_size": 64,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 8,
    "vocab_size": 512,
}


def _validated(cfg: dict) -> dict:
    """``cfg`` with the schema's defaults filled in (as the Snakefile validates it)."""
    from snakemake.utils import validate

    cfg = copy.deepcopy(cfg)
    validate(cfg, str(REPO / "workflow" / "schemas" / "config.schema.yaml"))
    return cfg


def scaled_config(shape: dict) -> dict:
    """paper-shape.yaml on a CPU in seconds: the same sections, stand-ins and variants, every
    list cut to one entry per rule family, tiny widths, a few short sequences, float32."""
    c = copy.deepcopy(shape)
    c.update(device="cpu", dtype="float32")
    c["simulate"].update(n_samples=64, seq_len=8, dim=16, n_layers=2, n_groups=4)
    c["simulate"]["settings"] = {k: c["simulate"]["settings"][k] for k in ("l2_a000", "rope_a000")}
    c["theory"]["n_positions"] = 8
    c["figures"] = {
        "formats": ["png"],
        "simulation": {
            "fig2": {"settings": ["l2_a000"], "normalized_row": False},
            "fig4": {"settings": ["rope_a000"], "normalized_row": True},
        },
    }
    for spec in c["models"].values():
        if "config_file" in spec:
            # phi3's and qwen2's configs have no head_dim key (hidden_size / heads, 8 here too)
            arch = json.loads((REPO / spec["config_file"]).read_text())["model_type"]
            tiny = {k: v for k, v in TINY_MODEL.items() if not unknown_config_keys(arch, [k])}
            spec["config"] = tiny
    seq = {"random-chunks1024": 24, "kjv-first50": 12, "kjv-chunks256": 16, "kjv-chunks512": 24}
    for name, ds in c["datasets"].items():
        ds.update(seq_len=seq.get(name, 16), n_sequences=8)
        if name == "kjv-chunks256":
            ds["corpus"]["books"] = ds["corpus"]["books"][:2]
    c["extract"] = {"batch_size": 4, "shard_size": 8, "n_groups": 4}
    c["paper1_llm"].update(models=["qwen3-8b"], fig5_layers=2)
    exp = c["leakage"]["experiments"]
    # the stand-ins' random twin (`like:` a config_file model) stands for the scale experiment
    exp["scale_and_architecture"].update(models=["llama-3.2-1b-random"], datasets=["kjv-chunks256"])
    exp["controls"].update(
        models=["llama-3.2-1b"], variants=["causal", "bos_replace_mean+bidirectional"]
    )
    exp["trained"]["models"] = ["trained-rope", "trained-rope-init"]
    lk = c["leakage"]
    lk["reducer"] = {"fits": ["saturated+query", "linear+query"], "windows": ["all", "early8"]}
    lk.update(n_permutations=10, bos_windows=["early8"])
    lk["position0"].update(conditions=["causal", "bidirectional"], n_folds=2, n_permutations=10)
    t = c["train"]
    t.update(variants={"rope": {}}, hidden=32, layers=2, heads=4, kv_heads=2, intermediate=64)
    t.update(context=24, window=8, steps=4, batch=4, warmup=1, dtype="float32")
    t.update(eval_every=2, n_eval=4, checkpoint_every=2)
    t["tokenizer"] = {"name": "shape-bpe", "vocab_size": 512, "min_frequency": 2}
    t["corpus"] = {"type": "kjv", "books": ["Genesis", "Ruth", "Mark"]}
    t["heldout"] = ["Ruth", "Mark"]
    c["datasets"]["kjv-chunks512"]["corpus"]["books"] = ["Ruth", "Mark"]
    t["gram"].update(models=["nope-1.5b", "trained-rope"], seq_len=12, n_sequences=8)
    t["lengthgen"].update(n_sequences=4)
    c["stats"]["n_bootstrap"] = 50
    return c


@pytest.mark.slow
def test_scaled_paper_shape_runs_end_to_end_under_the_banner(tmp_path):
    pipeline = copy_pipeline(tmp_path / "pipeline")
    cfg = scaled_config(_load(SHAPE))
    (pipeline / "configs" / "scaled.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False))
    t0 = time.perf_counter()
    snakemake(pipeline, "--cores", "2", "--configfile", "configs/scaled.yaml", timeout=1800)
    wall = time.perf_counter() - t0
    print(f"scaled paper-shape run: {wall:.1f} s")
    check_scaled_run(pipeline, cfg)


def check_scaled_run(pipeline: Path, cfg: dict) -> None:
    """The finished scaled run in ``pipeline`` (config ``cfg``, written to configs/scaled.yaml)."""
    res = pipeline / "results"
    # every target of the config (each table, store and figure of rule all) exists, and the dry
    # run of the finished run plans nothing
    targets = Resolved(_validated(cfg)).all_targets()
    assert len(targets) == 81 and not [t for t in targets if not (pipeline / t).exists()]
    assert planned_jobs(pipeline, "--configfile", "configs/scaled.yaml") == []
    card = (res / "report" / "scorecard.md").read_text()
    assert card.startswith(f"> **{REHEARSAL_BANNER}**")
    # the stand-ins' stores: the paper's variants, each stand-in's own architecture
    import xarray as xr

    for model, arch, variants in (
        ("llama-3.2-1b", "llama", ["causal", "bos_replace_mean+bidirectional"]),
        ("llama-3.2-1b-random", "llama", ["causal", "bidirectional"]),
    ):
        for v in variants:
            with xr.open_zarr(res / "scores" / model / "kjv-chunks256" / f"{v}.zarr") as ds:
                assert (ds.attrs["variant"], ds.attrs["architecture"]) == (v, arch)
    with xr.open_zarr(res / "scores" / "qwen3-8b" / "random-chunks1024" / "causal.zarr") as ds:
        assert ds.attrs["architecture"] == "qwen3" and ds.attrs["seq_len"] == 24
        assert ds.sizes["layer"] == 2 and int(ds.attrs["n_sequences"]) == 8
    # the stand-in keeps its file's fields where the scaled config does not override them
    qwen = json.loads((pipeline / "resources" / "models" / "qwen3-8b" / "config.json").read_text())
    assert (qwen["max_position_embeddings"], qwen["rope_parameters"]["rope_theta"]) == (40960, 1e6)
    assert (qwen["hidden_size"], qwen["vocab_size"]) == (32, 512)
    # the report's front page carries the banner
    snakemake(pipeline, "--configfile", "configs/scaled.yaml", "--report", "report.html")
    assert REHEARSAL_BANNER in (pipeline / "report.html").read_text()


def test_every_model_rule_records_its_wall_time_and_peak_memory():
    """Each rule that loads, builds or writes a model or its maps — every rule with a script —
    has a log under ``logs/<rule>/`` and its script runs under ``logged``, whose last line records
    the job's wall seconds and peak RSS (causalpos.io.joblog.done_line): what a cluster user
    compares with the job's request (``read_job_logs`` sorts the logs by rule)."""
    import re

    rules = {}
    for smk in (REPO / "workflow" / "rules").glob("*.smk"):
        for m in re.finditer(r"^rule (\w+):\n(.*?)(?=^rule |\Z)", smk.read_text(), re.S | re.M):
            rules[m.group(1)] = m.group(2)
    model_rules = {
        "prepare_model", "train_tokenizer", "train_model", "init_twin", "sample_sequences",
        "extract_scores", "merge_scores", "diagonal_normalize", "gram_panels",
        "length_generalization", "leakage", "position0",
    }  # fmt: skip
    scripts = {r: re.search(r'script:\n\s+"\.\./scripts/(\w+\.py)"', b) for r, b in rules.items()}
    scripts = {r: m.group(1) for r, m in scripts.items() if m}
    assert model_rules <= set(scripts), sorted(model_rules - set(scripts))
    # every job of the workflow: each script in workflow/scripts is a rule's
    assert set(scripts.values()) == {p.name for p in (REPO / "workflow" / "scripts").glob("*.py")}
    for rule, script in sorted(scripts.items()):
        log = re.search(r'    log:\n\s+"(logs/[^"]+\.log)"', rules[rule])
        assert log and log.group(1).startswith(f"logs/{rule}/"), (rule, log and log.group(1))
        code = (REPO / "workflow" / "scripts" / script).read_text()
        call = re.search(
            r"^with logged\(snakemake\.log\[0\], snakemake\.threads(.*)\):$", code, re.M
        )
        assert call and "exit_when_done=True" in call.group(1), (rule, script)
