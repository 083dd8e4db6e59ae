#!/usr/bin/env bash
# One command on a bare GPU machine (one H100; docs/performance.md#gpu-rehearsal): the GPU tests,
# the default config end to end on the GPU (device: auto) with its tables compared to a CPU run's,
# and one Llama-3.1-8B stand-in through the pipeline at paper shape (paper 1 at 1,024 tokens with
# batch_size: auto, paper 2's leakage at 64 x 256) next to bench_extract_gpu.py's tokens/s of the
# same architecture. Writes OUTDIR/gpu-rehearsal-<date>.md (benchmarks/gpu_report.py).
#
#   benchmarks/gpu_rehearsal.sh [--dry-run] [--reference RESULTS] [--budget SECONDS] [OUTDIR]
#
# OUTDIR: default $OUT (the lent machine's return folder), else ./gpu-rehearsal.
# --reference RESULTS: a finished CPU run's results/ of the same config (e.g. carried from the
#   build machine); without it the CPU reference runs here, beside the GPU run, on half the cores.
# --dry-run: no GPU needed: every pipeline step as `snakemake -n` (configs, targets and DAGs
#   checked), the rest skipped; the report is written from what ran (tests/benchmarks/test_gpu_rehearsal.py).
# --budget: the wall seconds the whole script may take (default 540 = 9 min); each step gets a
#   `timeout` from what is left, so the report is always written.
# Wheels: where .whl/ holds wheels (docs/performance.md), they are installed to /tmp/site first.
set -u
REPO=$(cd "$(dirname "$0")/.." && pwd)
DRY=0
REF=""
BUDGET=540
POS=()
while [ $# -gt 0 ]; do
  case "$1" in
    --dry-run) DRY=1 ;;
    --reference) REF=$(cd "$2" && pwd); shift ;;
    --budget) BUDGET=$2; shift ;;
    -h|--help) sed -n 2,18p "$0"; exit 0 ;;
    *) POS+=("$1") ;;
  esac
  shift
done
OUTDIR=${POS[0]:-${OUT:-$PWD/gpu-rehearsal}}
mkdir -p "$OUTDIR" && OUTDIR=$(cd "$OUTDIR" && pwd)
WORK=${CAUSALPOS_REHEARSAL_WORK:-/tmp/causalpos-gpu-rehearsal}
PY=${PYTHON:-python3}
export REPO PY
T0=$(date +%s)
NCORES=$(nproc)
HALF=$(( NCORES > 3 ? NCORES / 2 : 1 ))
: > "$OUTDIR/steps.tsv"

left() { echo $(( BUDGET - ($(date +%s) - T0) )); }

# step NAME CMD...: run CMD with a timeout of what is left of the budget, log to OUTDIR/NAME.log,
# record start, end and exit status in steps.tsv.
step() {
  local name=$1; shift
  local s e rc budget
  budget=$(left)
  s=$(date +%s.%N)
  if [ "$budget" -le 5 ]; then
    rc=124; echo "no time left" > "$OUTDIR/$name.log"
  else
    if declare -F "$1" > /dev/null; then  # a function of this script: in a child bash
      export -f "$1"
      timeout "$budget" bash -c "$1" > "$OUTDIR/$name.log" 2>&1; rc=$?
    else
      timeout "$budget" "$@" > "$OUTDIR/$name.log" 2>&1; rc=$?
    fi
  fi
  e=$(date +%s.%N)
  printf '%s\t%s\t%s\t%s\n' "$name" "$s" "$e" "$rc" >> "$OUTDIR/steps.tsv"
  echo "[$(( $(date +%s) - T0 )) s] $name: exit $rc" >&2
  return "$rc"
}

# ---- setup: wheels, imports, versions ----------------------------------------------------------
setup() {
  if compgen -G "$REPO/.whl/*.whl" > /dev/null; then
    $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
      --target /tmp/site "$REPO"/.whl/*.whl || return 1
  fi
  $PY - <<'EOF'
import platform, torch, transformers, snakemake, zarr, xarray
import causalpos
print("python", platform.python_version(), "| torch", torch.__version__, "| transformers",
      transformers.__version__, "| snakemake", snakemake.__version__, "| zarr", zarr.__version__,
      "| xarray", xarray.__version__)
print("device:", torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no CUDA")
print("causalpos from", causalpos.__file__)
EOF
}
export PYTHONPATH=/tmp/site:$REPO/src${PYTHONPATH:+:$PYTHONPATH}
step setup setup
cp "$OUTDIR/setup.log" "$OUTDIR/env.txt"
echo "cores: $NCORES; budget ${BUDGET} s; dry run: $DRY" >> "$OUTDIR/env.txt"

if [ $DRY = 0 ] && command -v nvidia-smi > /dev/null; then
  nvidia-smi -L >> "$OUTDIR/env.txt"
  nvidia-smi --query-gpu=timestamp,memory.used --format=csv,noheader,nounits -lms 500 \
    > "$OUTDIR/gpu-memory.csv" 2> /dev/null &
  SMI=$!
fi

# ---- pipeline copies -----------------------------------------------------------------------------
# The default config needs SmolLM2's wheel (93 MB, from PyPI); offline and without it in .whl/ or
# $CAUSALPOS_WHEEL_DIR, its SmolLM2 is a random-init model of SmolLM2-135M's shape with the
# tokenizer trained here (the same DAG; GPU and CPU runs use the same config, so the comparison
# holds either way; the report says which).
make_copy() {  # make_copy DIR
  rm -rf "$1" && mkdir -p "$1"
  cp -r "$REPO"/Snakefile "$REPO"/config.yaml "$REPO"/configs "$REPO"/workflow "$REPO"/src \
    "$REPO"/profiles "$REPO"/envs "$REPO"/docs "$1"/
  $PY "$REPO/benchmarks/gpu_rehearsal_config.py" "$1/config.yaml" >> "$OUTDIR/env.txt"
}
rm -rf "$WORK" && mkdir -p "$WORK"
make_copy "$WORK/gpu"
make_copy "$WORK/cpu"
make_copy "$WORK/8b"
N="-n"; [ $DRY = 1 ] || N=""

# ---- GPU tests -----------------------------------------------------------------------------------
if [ $DRY = 1 ]; then
  step gpu_tests $PY -m pytest -q --collect-only -m gpu "$REPO/tests/test_gpu.py"
else
  step gpu_tests $PY -m pytest -q -n 0 -m gpu "$REPO/tests/test_gpu.py"
fi

# ---- 8B stand-in: prepared on the CPU (bf16, ~16 GB) while the default runs go -----------------
EIGHT=(--configfile configs/paper-shape.yaml configs/paper-shape-gpu-8b.yaml)
T8=(results/normalized/llama-3.1-8b/random-chunks1024/causal.zarr
    results/leakage/llama-3.1-8b/kjv-chunks256.zarr)
cat > "$WORK/8b/configs/paper-shape-gpu-8b.yaml" <<'EOF'
device: cuda
datasets:
  random-chunks1024: {n_sequences: 128}
leakage:
  n_permutations: 100
  position0: {n_permutations: 100}
EOF
( cd "$WORK/8b" && step prepare_8b $PY -m snakemake $N --cores 2 "${T8[@]}" "${EIGHT[@]}" \
    --until sample_sequences prepare_model ) &
PREP=$!

# ---- the default config: GPU (device auto) and, without --reference, CPU, side by side ---------
( cd "$WORK/gpu" && step default_gpu $PY -m snakemake $N --cores "$HALF" --config device=auto ) &
GPU_RUN=$!
if [ -z "$REF" ]; then
  ( cd "$WORK/cpu" && step default_cpu $PY -m snakemake $N --cores "$HALF" --config device=cpu ) &
  CPU_RUN=$!
fi
wait "$GPU_RUN"; wait "$PREP"

# ---- 8B: extraction and leakage through the pipeline, then the benchmark of the same shape -----
( cd "$WORK/8b" && step extract_8b $PY -m snakemake $N --cores "$HALF" "${T8[@]}" "${EIGHT[@]}" )
mkdir -p "$OUTDIR/logs-8b"  # each job's log ends with its wall time and peak RSS
[ -d "$WORK/8b/logs" ] && cp -r "$WORK/8b/logs/." "$OUTDIR/logs-8b/" 2> /dev/null
grep -h "batch_size auto" "$WORK"/8b/logs/extract_scores/*/*/*.log > "$OUTDIR/auto-batch.txt" \
  2> /dev/null
if [ $DRY = 1 ]; then
  step bench_8b $PY "$REPO/benchmarks/bench_extract_gpu.py" --help
else
  step bench_8b $PY "$REPO/benchmarks/bench_extract_gpu.py" --preset llama-3.1-8b \
    --seq-len 1024 --batch auto --n-batches 3 --modes forward,maps --json "$OUTDIR/bench-8b.json"
fi

# ---- CPU vs GPU tables ---------------------------------------------------------------------------
[ -n "${CPU_RUN:-}" ] && wait "$CPU_RUN"
REFDIR=${REF:-$WORK/cpu/results}
if [ $DRY = 1 ]; then
  step diff $PY -m causalpos.cli diff-results --help
else
  # float32 models; the GPU's kernels sum in other orders: 1e-4 relative, 1e-6 absolute
  step diff $PY -m causalpos.cli diff-results "$REFDIR" "$WORK/gpu/results" --rtol 1e-4 --atol 1e-6
fi
cp "$OUTDIR/diff.log" "$OUTDIR/diff.txt"

[ -n "${SMI:-}" ] && kill "$SMI" 2> /dev/null
COMMIT=$(git -C "$REPO" rev-parse --short HEAD 2> /dev/null || echo "${CAUSALPOS_COMMIT:-unknown}")
$PY "$REPO/benchmarks/gpu_report.py" "$OUTDIR" --commit "$COMMIT" > /dev/null
echo "report: $OUTDIR/gpu-rehearsal-$(date +%F).md ($(( $(date +%s) - T0 )) s)" >&2
