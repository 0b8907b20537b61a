#!/usr/bin/env bash
# The GPU check: runs the CUDA tests, `specpipe generate --device cuda` on the
# embedded model, then the benchmarks, on a machine with an NVIDIA GPU, from a
# build folder configured with -DSPECPIPE_CUDA=ON (built here if missing).
# Logs and JSON go to $OUT; a compact summary is printed last. Files (at
# most 8): build.log (only when it builds), tests.log, generate.log, a .log
# per benchmark (kernels, llama3_32k, llama3_b1_variants, llama3_4k_128k) and
# bench.json, one object holding every benchmark's JSON by name. About 6-8
# minutes on an H200.
#
# usage: tools/gpu_check.sh [BUILD_DIR] [LIB_DIR]
#   BUILD_DIR  default $SPECPIPE_BUILD_DIR or build-cuda
#   LIB_DIR    extra shared libraries (e.g. CAF), prepended to LD_LIBRARY_PATH;
#              default $SPECPIPE_LIB_DIR
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
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
SPECPIPE_BINARY_DIR="$(cd "$build" && pwd)"
export SPECPIPE_BINARY_DIR

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

# Each bench's JSON goes to a scratch folder first and into bench.json at
# the end, so $OUT keeps few files however many runs there are.
json_dir=$(mktemp -d)
trap 'rm -rf "$json_dir"' EXIT
run_bench_into() {  # log name, json name, args...
  local log=$1 name=$2
  shift 2
  timeout 240 "$sp" bench "$@" --json "$json_dir/$name.json" >> "$out/$log.log" 2>&1 || {
    echo "bench $name failed (rc $?)" >> "$out/$log.log"
    status=1
  }
}
run_bench() {  # name, args...
  local name=$1
  shift
  : > "$out/$name.log"
  run_bench_into "$name" "$name" "$@"
}
# 3. Decode attention and the GEMV (m = 1, 2, 4, 8, own and cuBLAS) alone;
#    the batch-1 GEMVs of one llama3-8b layer per GEMV variant (unroll 2/4 x
#    k-split on/off, fused SwiGLU down against SwiGLU kernel + plain down).
run_bench kernels --kernels --repeats 30 --warmup 5
# 4. llama3-8b shapes (random weights): prefill 2048 (tensor-core and
#    CUDA-core attention), decode at 32k for batch 1, 4, 8, 16.
run_bench llama3_32k --preset llama3-8b --device cuda --batch 1,4,8,16 --context 32768 --repeats 20 --warmup 3
# 5. The batch-1 regression of v2 (kernels/cuda/NOTES.md, version 3): decode
#    at 32k under each GEMV v2 switch, every flag spelled out so a line does
#    not depend on the build's defaults. v2 is what round 2 measured (7.27
#    ms); v1 shape should give back v1's 6.43 ms.
variants=(
  "v2|--fuse-swiglu --ksplit --gemv-unroll 4"
  "v2 --no-fuse-swiglu|--no-fuse-swiglu --ksplit --gemv-unroll 4"
  "v2 --no-ksplit|--fuse-swiglu --no-ksplit --gemv-unroll 4"
  "v2 both|--no-fuse-swiglu --no-ksplit --gemv-unroll 4"
  "v2 both --no-overlap|--no-fuse-swiglu --no-ksplit --gemv-unroll 4 --no-overlap"
  "v1 shape (both, no PDL, unroll 2)|--no-fuse-swiglu --no-ksplit --gemv-unroll 2 --no-overlap"
  "v3 default|"
)
: > "$out/llama3_b1_variants.log"
i=0
for v in "${variants[@]}"; do
  i=$((i + 1))
  label=${v%%|*}
  flags=${v#*|}
  echo "== variant $i: $label: ${flags:-(no flags)}" >> "$out/llama3_b1_variants.log"
  # shellcheck disable=SC2086  # the flags are words
  run_bench_into llama3_b1_variants "llama3_b1_variant$i" --preset llama3-8b --device cuda --batch 1 \
    --context 32768 --repeats 20 --warmup 3 --prefill-tokens 0 $flags
done
run_bench llama3_4k_128k --preset llama3-8b --device cuda --batch 1 --context 4096,131072 --repeats 20 \
  --warmup 3 --prefill-tokens 0

# All JSON in one file: {"name": report, ...}.
{
  printf '{'
  sep=''
  for f in "$json_dir"/*.json; do
    [ -s "$f" ] || continue
    printf '%s"%s":' "$sep" "$(basename "$f" .json)"
    cat "$f"
    sep=','
  done
  printf '}\n'
} > "$out/bench.json"

echo
echo "==== logs and JSON in $out ===="
echo "---- generate --device cuda"
cat "$out/generate.log"
echo "---- tests: $tests_summary"
grep -hE '^(FAILED|\[  FAILED)|Failure|Expected|actual' "$out/tests.log" | head -20
for b in kernels llama3_32k llama3_b1_variants llama3_4k_128k; do
  echo "---- $b"
  pattern='^(measured|attention|qattn|gemv|swiglu|layer|gather|prefill|decode|kind|bench .* failed)'
  [ "$b" = llama3_b1_variants ] && pattern='^(== variant|decode|bench .* failed)'
  grep -E "$pattern" "$out/$b.log" || tail -5 "$out/$b.log"
done
exit $status
