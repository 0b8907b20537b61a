#!/usr/bin/env bash
# The GPU check: runs the CUDA tests, then the benchmarks, on a machine with
# an NVIDIA GPU, from a build folder configured with -DSPECPIPE_CUDA=ON
# (built here if missing). Logs and JSON go to $OUT (at most 8 files); a
# compact summary is printed last. Files: build.log (only when it builds),
# tests.log, and a .log and a .json per benchmark: 7 at most.
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

status=0
# 1. GPU tests (kernel tests and the whole-model check), each binary directly
#    so that a missing room does not stop the others.
nvidia-smi --query-gpu=name,memory.total,clocks.sm,clocks.mem --format=csv > "$out/tests.log" 2>&1
for t in "$build/tests/specpipe_kernels_tests" "$build/tests/specpipe_model_tests"; do
  [ -x "$t" ] || { echo "missing $t" >> "$out/tests.log"; status=1; continue; }
  timeout 300 "$t" --gtest_filter='cuda*' >> "$out/tests.log" 2>&1 || status=1
done
tests_summary=$(grep -E '^\[  (PASSED|FAILED|SKIPPED) \]' "$out/tests.log" | sort | uniq -c | tr '\n' ';')

sp="$build/apps/specpipe"
run_bench() {  # name, args...
  local name=$1
  shift
  timeout 240 "$sp" bench "$@" --json "$out/$name.json" > "$out/$name.log" 2>&1 || {
    echo "bench $name failed (rc $?)" >> "$out/$name.log"
    status=1
  }
}
# 2. Decode attention and GEMV alone, against their rooflines.
run_bench kernels --kernels --repeats 30 --warmup 5
# 3. llama3-8b shapes (random weights), decode at 32k for batch 1 and 8, with
#    the prefill measurement; then 4k and 128k at batch 1.
run_bench llama3_32k --preset llama3-8b --device cuda --batch 1,8 --context 32768 --repeats 30 --warmup 5
run_bench llama3_4k_128k --preset llama3-8b --device cuda --batch 1 --context 4096,131072 --repeats 30 \
  --warmup 5 --prefill-tokens 0

echo
echo "==== logs and JSON in $out ===="
echo "tests: $tests_summary"
grep -hE '^(FAILED|\[  FAILED)' "$out/tests.log" | head -20
for b in kernels llama3_32k llama3_4k_128k; do
  echo "---- $b"
  grep -E '^(measured|attention|gemv|prefill|decode|kind)' "$out/$b.log" || tail -5 "$out/$b.log"
done
exit $status
