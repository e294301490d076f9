#!/usr/bin/env bash
# The checks that need a GPU, in one go, logs into one folder: the CUDA tests, a default run on
# the GPU, the GPU benchmarks, the precision preset on the GPU (with and without float32
# statistics), the registered cost claims measured on the GPU, and the whole test suite under
# this machine's PyTorch. About 6 minutes on one H200 before the cost claims (estimated 2
# more); each stage has a time limit and a failed stage does not stop the next.
#
#   bash scripts/cuda_check.sh [LOG_DIR]        (default: cuda-check/)
set -u
mkdir -p "${1:-cuda-check}"
out=$(cd "${1:-cuda-check}" && pwd)
python=${PYTHON:-python3}
cd "$(dirname "$0")/.."
runs=$(mktemp -d)
export NORMBENCH_CACHE=${NORMBENCH_CACHE:-$runs/cache} PYTHONUNBUFFERED=1

stage() {  # stage NAME SECONDS LOG COMMAND...: run with a limit, log the time and exit code
  local name=$1 limit=$2 log=$3
  shift 3
  local start=$SECONDS
  echo "== $name" >>"$log"
  timeout "$limit" "$@" >>"$log" 2>&1
  echo "== $name: exit $? in $((SECONDS - start)) s" | tee -a "$log"
}

{
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
  "$python" -c "import sys, torch; print(sys.version); print('torch', torch.__version__, \
'cuda', torch.version.cuda, torch.cuda.get_device_name())"
  "$python" -m pip list 2>/dev/null | grep -iE '^(typer|rich|pandas|pyarrow|numpy|hydra-core) '
  nproc
} >"$out/env.txt" 2>&1

stage "CUDA tests" 180 "$out/cuda_tests.log" "$python" -m pytest -q -p no:cacheprovider tests/training/test_cuda.py
stage "default transformer run" 100 "$out/run.log" \
  "$python" -m normbench run -q device=cuda norm=layernorm placement=pre --runs-dir "$runs/runs"
stage "default cnn run" 100 "$out/run.log" \
  "$python" -m normbench run -q device=cuda model=cnn norm=batchnorm --runs-dir "$runs/runs"
cd benchmarks
stage "loop overhead" 120 "$out/bench.log" "$python" loop_overhead.py --device cuda --steps 400 --repeats 3
stage "model cost" 60 "$out/bench.log" "$python" model_cost.py --device cuda
stage "norm cost" 120 "$out/bench.log" "$python" norm_cost.py --device cuda --repeats 3
stage "cost claims" 240 "$out/cost_claims.md" "$python" cost_claims.py --device cuda
cd ..

# The CPU-only suite runs beside the sweep: the benchmarks above had the machine to themselves.
timeout 300 "$python" -m pytest -q -p no:cacheprovider --ignore=tests/training/test_cuda.py \
  >"$out/suite.log" 2>&1 &
suite=$!
stage "precision sweep" 200 "$out/sweep.log" \
  "$python" -m normbench sweep precision device=cuda norm.fp32_stats=true,false --jobs 6 \
  --runs-dir "$runs/runs"
"$python" -m normbench report --runs-dir "$runs/runs" --table precision --format markdown \
  >"$out/report.md" 2>&1
"$python" -m normbench report --runs-dir "$runs/runs" --table convergence --format markdown \
  >>"$out/report.md" 2>&1
wait $suite
echo "== whole suite: exit $?" | tee -a "$out/suite.log"
