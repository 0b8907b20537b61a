#!/usr/bin/env bash
# The GPU check: runs the CUDA tests, `specpipe generate --device cuda` on the
# embedded model, then the benchmarks, on a machine with an NVIDIA GPU, from a
# build folder configured with -DSPECPIPE_CUDA=ON (built here if missing).
# Logs and JSON go to $OUT; a compact summary is printed last. Files:
# build.log (only when it builds), tests.log, generate.log, and a .log and a
# .json per benchmark. About 4-6 minutes on an H200.
#
# usage: tools/gpu_check.sh [BUILD_DIR] [LIB_DIR]
#   BUILD_DIR  default $SPECPIPE_BUILD_DIR or build-cuda
#   LIB_DIR    extra shared libraries (e.g. CAF), prepended to LD_LIBRARY_PATH;
#              default $SPECPIPE_LIB_DIR
set -uo pipefail
cd "$(dirname "$0")/.."
build="${1:-${SPECPIPE_BUILD_DIR:-build-cuda}}"
libs="${2:-${SPECPIPE_LIB_DIR:-}}"
out="${OUT:-$PWD/gpu_check_out}"
mkdir -p "$out"
[ -n "$libs" ] && export LD_LIBRARY_PATH="$libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"

if [ ! -x "$build/apps/specpipe" ] || [ ! -x "$build/tests/specpipe_kernels_tests" ]; then
  cmake -S . -B "$build" -DSPECPIPE_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DCMAKE_BUILD_TYPE=Release \
    > "$out/build.log" 2>&1 &&
    cmake --build "$build" -j "$(nproc)" >> "$out/build.log" 2>&1 || { tail -40 "$out/build.log"; exit 1; }
fi
# The test binaries find the tree and the build here even when they were
# built at another path (tests/support/test_paths.hpp).
export SPECPIPE_SOURCE_DIR="$PWD"
export SPECPIPE_BINARY_DIR="$(cd "$build" && pwd)"

status=0
# 1. GPU tests: kernels, the whole-model checks (cuda_forward against the
#    reference, cpu_forward, the default model and the transformers
#    fixtures), and `generate --device cuda` through the CLI.
nvidia-smi --query-gpu=name,memory.total,clocks.sm,clocks.mem --format=csv > "$out/tests.log" 2>&1
run_tests() {  # binary, filter
  [ -x "$1" ] || { echo "missing $1" >> "$out/tests.log"; status=1; return; }
  timeout 300 "$1" --gtest_filter="$2" >> "$out/tests.log" 2>&1 || status=1
}
run_tests "$build/tests/specpipe_kernels_tests" 'cuda*:Cuda*'
run_tests "$build/tests/specpipe_model_tests" 'cuda*:Cuda*'
run_tests "$build/tests/specpipe_apps_tests" 'Cuda*'
tests_summary=$(grep -E '^\[  (PASSED|FAILED|SKIPPED) \]' "$out/tests.log" | sort | uniq -c | tr '\n' ';')

sp="$build/apps/specpipe"
# 2. generate on the embedded model, greedy and sampled.
{
  echo "== greedy"
  timeout 60 "$sp" generate --device cuda --prompt 'The old man looked out over the sea and' -n 48 \
    --temperature 0 2>&1
  echo "== sampled (t 0.8, top-p 0.95, seed 1)"
  timeout 60 "$sp" generate --device cuda --prompt 'Once upon a time' -n 48 --temperature 0.8 --top-p 0.95 \
    --seed 1 2>&1
} > "$out/generate.log" 2>&1 || status=1

run_bench() {  # name, args...
  local name=$1
  shift
  timeout 240 "$sp" bench "$@" --json "$out/$name.json" > "$out/$name.log" 2>&1 || {
    echo "bench $name failed (rc $?)" >> "$out/$name.log"
    status=1
  }
}
# 3. Decode attention and the GEMV (m = 1, 2, 4, 8, own and cuBLAS) alone.
run_bench kernels --kernels --repeats 30 --warmup 5
# 4. llama3-8b shapes (random weights): prefill 2048 (tensor-core and
#    CUDA-core attention), decode at 32k for batch 1, 4, 8, 16; batch 1
#    without PDL as the baseline of the overlap; then 4k and 128k at batch 1.
run_bench llama3_32k --preset llama3-8b --device cuda --batch 1,4,8,16 --context 32768 --repeats 20 --warmup 3
run_bench llama3_32k_nopdl --preset llama3-8b --device cuda --batch 1 --context 32768 --repeats 20 --warmup 3 \
  --prefill-tokens 0 --no-overlap
run_bench llama3_4k_128k --preset llama3-8b --device cuda --batch 1 --context 4096,131072 --repeats 20 \
  --warmup 3 --prefill-tokens 0

echo
echo "==== logs and JSON in $out ===="
echo "---- generate --device cuda"
cat "$out/generate.log"
echo "---- tests: $tests_summary"
grep -hE '^(FAILED|\[  FAILED)|Failure|Expected|actual' "$out/tests.log" | head -20
for b in kernels llama3_32k llama3_32k_nopdl llama3_4k_128k; do
  echo "---- $b"
  grep -E '^(measured|attention|gemv|gather|prefill|decode|kind)' "$out/$b.log" || tail -5 "$out/$b.log"
done
exit $status
