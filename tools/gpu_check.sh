#!/usr/bin/env bash
# The GPU check: runs the CUDA tests, `specpipe generate --device cuda` on the
# embedded model (every --kv mode), then the benchmarks, on a machine with an
# NVIDIA GPU, from a build folder configured with -DSPECPIPE_CUDA=ON (built
# here if missing). Logs and JSON go to $OUT; a compact summary table is
# printed last. Files (at most 8): build.log (only when it builds), tests.log,
# generate.log, a .log per benchmark (kernels, llama3_32k, llama3_128k,
# quantspec: llama2-7b's draft with int4 GEMV v7 and v9 in one log) and
# bench.json, one object holding every benchmark's JSON by name. About 7-9
# minutes on an H200.
#
# usage: tools/gpu_check.sh [BUILD_DIR] [LIB_DIR]
#   SPECPIPE_GPU_CHECK=tests|bench|switches|switches-llama3|all (default
#   all): only the tests and generate, or only the benchmarks (so a GPU
#   shared with other work runs the tests, and the timings get the card to
#   themselves); switches: the kernels bench (and its GEMV versions), then
#   QuantSpec's draft with
#   --draft-gemv 7/9 x --packed-blocks 0/4 and with --draft-lm-head
#   (kernels.log, quantspec.log); switches-llama3: --packed-blocks 0/4 on
#   llama3-8b 32k at batch 1, 8 and at max batch under 48 GB
#   (llama3_32k.log)
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

sp="$build/apps/specpipe"
phase="${SPECPIPE_GPU_CHECK:-all}"
status=0
if [ "$phase" = tests ] || [ "$phase" = all ]; then
# 1. GPU tests: kernels (bf16 and packed attention v1/v2, quantize-and-pack,
#    top-k, ...), the whole-model checks (cuda_forward against the
#    reference, cpu_forward, the default model, the transformers fixtures,
#    and every --kv mode against the CPU cache of that mode), and
#    `generate --device cuda` through the CLI.
nvidia-smi --query-gpu=name,memory.total,clocks.sm,clocks.mem --format=csv > "$out/tests.log" 2>&1
run_tests() {  # binary, filter
  [ -x "$1" ] || { echo "missing $1" >> "$out/tests.log"; status=1; return; }
  timeout 300 "$1" --gtest_filter="$2" >> "$out/tests.log" 2>&1 || status=1
}
run_tests "$build/tests/specpipe_kernels_tests" 'cuda*:Cuda*:packed*'
run_tests "$build/tests/specpipe_model_tests" 'cuda*:Cuda*'
run_tests "$build/tests/specpipe_apps_tests" 'Cuda*'
tests_summary=$(grep -E '^\[  (PASSED|FAILED|SKIPPED) \]' "$out/tests.log" | sort | uniq -c | tr '\n' ';')

# 2. generate on the embedded model: greedy and sampled on the full cache,
#    then greedy over each quantized cache (200 tokens: several flushes).
{
  echo "== greedy"
  timeout 60 "$sp" generate --device cuda --prompt 'The old man looked out over the sea and' -n 48 \
    --temperature 0 2>&1
  echo "== sampled (t 0.8, top-p 0.95, seed 1)"
  timeout 60 "$sp" generate --device cuda --prompt 'Once upon a time' -n 48 --temperature 0.8 --top-p 0.95 \
    --seed 1 2>&1
  for kv in "kivi --kv-bits 2" "kivi --kv-bits 1" "hier --kv-bits 4" "hier --kv-bits 8"; do
    echo "== greedy --kv $kv"
    # shellcheck disable=SC2086  # the mode's flags are words
    timeout 60 "$sp" generate --device cuda --kv $kv --prompt 'The old man looked out over the sea and' \
      -n 200 --temperature 0 2>&1 | tail -c 600
  done
} > "$out/generate.log" 2>&1 || status=1
fi

# Each bench's JSON goes to a scratch folder first and into bench.json at
# the end, so $OUT keeps few files however many runs there are.
json_dir=$(mktemp -d)
trap 'rm -rf "$json_dir"' EXIT
run_bench() {  # name, args... (LOG=file appends there instead of NAME.log)
  local name=$1 log
  shift
  log="$out/${LOG:-$name.log}"
  [ -z "${LOG:-}" ] && : > "$log"
  timeout 300 "$sp" bench "$@" --json "$json_dir/$name.json" >> "$log" 2>&1 || {
    echo "bench $name failed (rc $?)" >> "$log"
    status=1
  }
}
# The opt-in switches against their defaults, in two calls' worth each:
# switches (the kernels bench, QuantSpec's draft: GEMV v7/v9 x register
# budget 3/4, and its own 4-bit lm_head) and switches-llama3 (llama3-8b at
# 32k, batch 1 and 8 and the max batch under 48 GB, budget 3/4).
if [ "$phase" = switches ]; then
run_bench kernels --kernels --repeats 30 --warmup 5
# The GEMV versions (v7 and v9 among them) run only with --gemv-only.
LOG=kernels.log run_bench kernels_gemv --kernels --gemv-only --repeats 30 --warmup 5
: > "$out/quantspec.log"
qs_args=(--preset llama2-7b --device cuda --kv quantspec --gamma 4 --batch 1 --context 8192,32768,131072
  --tokens 32 --acceptance 0.93)
for v in 7 9; do
  for pb in 0 4; do
    echo "== --draft-gemv $v --packed-blocks $pb" >> "$out/quantspec.log"
    LOG=quantspec.log run_bench "quantspec_v${v}_pb$pb" "${qs_args[@]}" --draft-gemv "$v" --packed-blocks "$pb"
  done
done
echo "== --draft-gemv 9 --packed-blocks 4 --draft-lm-head" >> "$out/quantspec.log"
LOG=quantspec.log run_bench quantspec_v9_pb4_head "${qs_args[@]}" --draft-gemv 9 --packed-blocks 4 --draft-lm-head
fi
if [ "$phase" = switches-llama3 ]; then
: > "$out/llama3_32k.log"
for pb in 0 4; do
  echo "== --packed-blocks $pb" >> "$out/llama3_32k.log"
  LOG=llama3_32k.log run_bench "llama3_32k_pb$pb" --preset llama3-8b --device cuda --batch 1,8 --context 32768 \
    --repeats 20 --warmup 3 --prefill-tokens 0 --kv kivi:1,kivi:2,specache,hier:4 --packed-blocks "$pb"
  echo "== max batch, 48 GB, --packed-blocks $pb" >> "$out/llama3_32k.log"
  LOG=llama3_32k.log run_bench "llama3_32k_max_pb$pb" --preset llama3-8b --device cuda --context 32768 \
    --gpu-memory 48 --max-batch --prefill-tokens 0 --repeats 10 --warmup 2 --kv kivi:1,specache --packed-blocks "$pb"
done
fi

if [ "$phase" = bench ] || [ "$phase" = all ]; then
# 3. Kernels alone: decode attention bf16 / packed v1 / packed v2 per format
#    at 64k, batch 8, 32/8 heads (v2: stages, batch 1, mixed rows, scores,
#    top-k, quantize-on-append), the GEMVs, the gathers; then every 4-bit
#    GEMV version (only with --gemv-only).
run_bench kernels --kernels --repeats 30 --warmup 5
LOG=kernels.log run_bench kernels_gemv --kernels --gemv-only --repeats 30 --warmup 5
# 4. llama3-8b shape (random weights): prefill 2048, then decode at 32k for
#    batch 1 and 8 over every cache mode; then 128k at batch 1.
run_bench llama3_32k --preset llama3-8b --device cuda --batch 1,8 --context 32768 --repeats 20 --warmup 3 \
  --kv full,kivi:1,kivi:2,kivi:4,specache,hier:4,hier:8
run_bench llama3_128k --preset llama3-8b --device cuda --batch 1 --context 131072 --repeats 10 --warmup 2 \
  --prefill-tokens 0 --kv full,kivi:2,specache,hier:8
# 5. QuantSpec, llama2-7b shape, batch 1: the draft's int4 GEMV v7 (the
#    default) and v9 (the bulk-copy schedule), one log.
: > "$out/quantspec.log"
for v in 7 9; do
  echo "== --draft-gemv $v" >> "$out/quantspec.log"
  LOG=quantspec.log run_bench "quantspec_v$v" --preset llama2-7b --device cuda --kv quantspec --gamma 4 --batch 1 \
    --context 8192,32768,131072 --tokens 32 --acceptance 0.93 --draft-gemv "$v"
done

fi

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
if [ "$phase" = tests ] || [ "$phase" = all ]; then
echo "---- generate --device cuda (timing lines)"
grep -E '^== |tok/s' "$out/generate.log" | cut -c1-160
echo "---- tests: $tests_summary"
grep -hE '^(\[  FAILED  \])|Failure|Expected|actual|Which is' "$out/tests.log" | head -24
fi
[ "$phase" = tests ] && exit $status
if [ -f "$out/kernels.log" ]; then
echo "---- measured copy bandwidth"
grep -h '^measured' "$out/kernels.log" | head -1
if [ "$phase" != switches ]; then
echo "---- decode attention, 64k, 32/8 heads, d=128 (ms, % of the bytes floor, vs bf16; notes: kernel format bits)"
# columns of print_table: kind batch context median spread tokens/s floor floor% peak note
awk '$1 == "attention" || $1 == "qattn" {
       pct = $8; note = ""; for (i = 10; i <= NF; ++i) note = note " " $i;
       printf "%-6s b%-2s %8s ms %7s%s\n", $1, $2, $4, pct, note }' "$out/kernels.log" | cut -c1-170
# Quantize on append per decode step of llama3-8b (32 layers): one flush of
# every sequence every G steps plus the idle launch on the others, against
# the decode step of the same mode at batch 8, 32k.
awk -v step_log="$out/llama3_32k.log" '
  BEGIN { while ((getline line < step_log) > 0) {
            split(line, f, " ")
            if (f[1] == "decode" && f[2] == 8 && line ~ /kivi 2-bit/) kivi_step = f[4]
            if (f[1] == "decode" && f[2] == 8 && line ~ /hier INT8/) hier_step = f[4] } }
  $1 == "qattn" && / quantize kivi/ { kflush = $4 } $1 == "qattn" && / quantize-idle kivi/ { kidle = $4 }
  $1 == "qattn" && / quantize hier/ { hflush = $4 } $1 == "qattn" && / quantize-idle hier/ { hidle = $4 }
  END {
    if (kflush != "" && kidle != "") {
      k = 32 * (kflush / 64 + kidle)
      printf "quantize on append, kivi 2-bit G=64: %.4f ms per step", k
      if (kivi_step > 0) printf " = %.2f%% of the kivi 2-bit b8 32k step (%s ms)", 100 * k / kivi_step, kivi_step
      printf "\n" }
    if (hflush != "" && hidle != "") {
      h = 32 * (hflush / 128 + hidle)
      printf "quantize on append, hier G=128: %.4f ms per step", h
      if (hier_step > 0) printf " = %.2f%% of the hier INT8 b8 32k step (%s ms)", 100 * h / hier_step, hier_step
      printf "\n" } }' "$out/kernels.log"
fi
fi
echo "---- decode step, llama3-8b shape (ms, tok/s, % of floor; mode and KV memory in the note)"
for b in llama3_32k llama3_128k; do
  [ -f "$out/$b.log" ] || continue
  awk '$1 == "==" { print; next } $1 == "decode" || $1 == "prefill" {
         if ($5 == "skipped:") { print; next }
         note = ""; for (i = 10; i <= NF; ++i) note = note " " $i;
         printf "%-8s b%-2s %7s %9s ms %9s tok/s %7s%s\n", $1, $2, $3, $4, $6, $8, note }' "$out/$b.log" |
    sed -E 's/, (CUDA graph|eager launches), .*//' | cut -c1-170
  grep -E 'bench .* failed' "$out/$b.log"
done
if [ -f "$out/kernels.log" ]; then
grep -hE 'bench .* failed' "$out/kernels.log"
echo "---- packed attention v4, 128-register budget (4 blocks/SM) against the default"
awk '($1 == "attention" || $1 == "qattn") && / v4(-128reg|-specache)? / {
       note = ""; for (i = 10; i <= NF; ++i) note = note " " $i;
       printf "b%-2s %8s ms %7s%s\n", $2, $4, $8, note }' "$out/kernels.log" | cut -c1-170
echo "---- 4-bit GEMV, m = 1 (TB/s of packed bytes), v7 against v9"
awk '$1 == "gemv" && $2 == 1 && / int4 gemv v(7|9) / { sub(/.*int4 gemv /, ""); print }' "$out/kernels.log"
fi
if [ -f "$out/quantspec.log" ]; then
echo "---- QuantSpec, llama2-7b, batch 1, gamma 4 (draft ms, c, speedup at 93%)"
grep -hE '^== |^draft |at acceptance|bench .* failed' "$out/quantspec.log" |
  sed -E 's/note: context ([0-9]+), batch 1: at acceptance 93% a round of 4 drafts yields/\1:/' | cut -c1-150
fi
exit $status
