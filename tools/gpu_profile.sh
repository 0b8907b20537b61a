#!/usr/bin/env bash
# The kernel profile: Nsight Compute (ncu) on the kernels whose limit the
# timings alone cannot name (kernels/cuda/NOTES.md, Stop 24 and 25): packed
# attention v4 at 1, 2 and 4 bits (64k, batch 8, 32/8 heads: the
# `bench --kernels --attention-only` rows) and the tiled 4-bit GEMV (v7, the
# QuantSpec draft's). Per kernel launch it reads the issue rate, the stall
# reasons, each pipe's share of its peak and the executed instructions per
# opcode, and prints a short table per launch last.
#
# ncu needs a machine whose runtime exposes the hardware counters; where it
# cannot read them the script says so and stops (the timings then come from
# tools/gpu_check.sh alone). The clocks are left as they are
# (--clock-control none), so durations match the benches'.
#
# usage: tools/gpu_profile.sh [BUILD_DIR] [LIB_DIR]
#   BUILD_DIR  default $SPECPIPE_BUILD_DIR or build-cuda (configured with
#              -DSPECPIPE_CUDA=ON; not built here)
#   LIB_DIR    extra shared libraries (e.g. CAF), prepended to LD_LIBRARY_PATH;
#              default $SPECPIPE_LIB_DIR
#   SPECPIPE_PROFILE=attention|gemv|all (default all)
# Files in $OUT: profile_<name>.log (ncu's details page per launch).
# About 2-4 minutes on an H100 (each profiled launch is replayed per pass).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
build="${1:-${SPECPIPE_BUILD_DIR:-build-cuda}}"
libs="${2:-${SPECPIPE_LIB_DIR:-}}"
out="${OUT:-$PWD/gpu_profile_out}"
what="${SPECPIPE_PROFILE:-all}"
mkdir -p "$out"
[ -n "$libs" ] && export LD_LIBRARY_PATH="$libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
sp="$build/apps/specpipe"
[ -x "$sp" ] || { echo "gpu_profile: no $sp (build with -DSPECPIPE_CUDA=ON first)"; exit 1; }
command -v ncu > /dev/null || { echo "gpu_profile: ncu is not on the PATH"; exit 1; }
case "$what" in attention | gemv | all) ;; *) echo "gpu_profile: SPECPIPE_PROFILE=$what (attention|gemv|all)"; exit 1 ;; esac

# Pipe shares (instructions issued and cycles busy, % of each pipe's peak),
# shared-memory wavefronts and bank conflicts, and the per-opcode counts.
metrics="regex:sm__inst_executed_pipe_.*\\.avg\\.pct_of_peak_sustained_active$"
metrics+=",regex:sm__pipe_.*_cycles_active\\.avg\\.pct_of_peak_sustained_active$"
metrics+=",smsp__inst_executed.sum,smsp__issue_active.avg.pct_of_peak_sustained_active"
metrics+=",smsp__warps_active.avg.per_cycle_active,smsp__warps_eligible.avg.per_cycle_active"
metrics+=",l1tex__data_pipe_lsu_wavefronts_mem_shared.sum,l1tex__data_bank_conflicts_pipe_lsu_mem_shared.sum"
metrics+=",regex:smsp__average_warps_issue_stalled_.*_per_issue_active\\.ratio$"
metrics+=",sass__inst_executed_per_opcode,sm__cycles_elapsed.avg.per_second"
sections=(--section SpeedOfLight --section ComputeWorkloadAnalysis --section InstructionStats
  --section WarpStateStats --section SchedulerStats --section Occupancy --section LaunchStats)

# A template argument as ncu may print it: "1" or "(int)1", "false",
# "(bool)0" or "0" (ncu casts non-type arguments of kernels in a named
# namespace, and prints those of an anonymous namespace's kernels bare).
targ() {  # type, value
  local v=$2
  if [ "$1" = bool ]; then
    local word=false
    [ "$v" = 1 ] && word=true
    echo "(\\(bool\\))?($v|$word)"
  else
    echo "(\\($1\\))?$v"
  fi
}

status=0
profile() {  # name, kernel regex, launches, bench args...
  local name=$1 regex=$2 count=$3 log="$out/profile_$1.log" rc
  shift 3
  local common=(--clock-control none --kernel-name-base demangled --kernel-name "regex:$regex"
    --launch-count "$count" "${sections[@]}")
  timeout 400 ncu "${common[@]}" --metrics "$metrics" --print-metric-instances details \
    "$sp" bench --device cuda "$@" > "$log" 2>&1
  rc=$?
  if grep -qE 'ERR_NVGPUCTRPERM|LibraryNotLoaded|Failed to initialize the profiler|Device not supported' "$log"; then
    echo "gpu_profile: ncu cannot read the counters here (see $log)"
    status=1
    return 1
  fi
  if [ $rc -ne 0 ] && grep -qE 'Failed to find metric|Invalid metric' "$log"; then
    # A metric this ncu does not know: the sections alone.
    mv "$log" "$log.metrics-failed"
    timeout 400 ncu "${common[@]}" "$sp" bench --device cuda "$@" > "$log" 2>&1
    rc=$?
  fi
  [ $rc -eq 0 ] || { echo "gpu_profile: $name: ncu rc $rc (see $log)"; status=1; }
  if grep -q 'No kernels were profiled' "$log"; then
    # Say what ran instead: the launches ncu saw are not listed, but the
    # regex and the bench's own errors are.
    echo "gpu_profile: $name: no launch matched regex:$regex"
    grep -vE '^==PROF==' "$log" | grep -iE 'error|usage|not |fail' | head -5
    status=1
  fi
  return 0
}

if [ "$what" = attention ] || [ "$what" = all ]; then
  # The default register budget (3 blocks per SM), two value groups (G = 64):
  # the first launches are the 64k, batch-8 rows at each stage count.
  for b in 1 2 4; do
    profile "v4_${b}bit" "packed_attention_v4_kernel<$(targ int $b), $(targ bool 0), $(targ int 2), $(targ bool 0), $(targ int 3)>" 3 \
      --kernels --attention-only --repeats 1 --warmup 0 || break
  done
fi
if [ "$what" = gemv ] || [ "$what" = all ]; then
  # v7, either output type (the bench times the f32 one; the draft uses both):
  # every llama shape, m = 1 first.
  profile gemv_v7 "int4_gemv_tiled_kernel<" 8 --kernels --gemv-only --repeats 1 --warmup 0
fi

# The table: per launch, its grid, duration, issue rate, warps, the top
# stalls and the busiest pipes.
echo
echo "==== ncu details in $out ===="
for log in "$out"/profile_*.log; do
  [ -f "$log" ] || continue
  echo "---- $(basename "$log" .log)"
  awk '
    function flush() {
      if (kname == "") return
      printf "%s\n  grid %s  block %s  regs %s  %s us  issue %s%%  warps %s (eligible %s)  insts %s\n",
        kname, grid, block, regs, dur, issue, wact, welig, insts
      printf "  stalls:%s\n  pipes (inst %% of peak):%s\n  pipes (cycles %% of peak):%s\n", stalls, pinst, pcyc
      printf "  shared: %s wavefronts, %s bank conflicts\n  opcodes:%s\n", wav, conf, substr(ops, 1, 600)
      kname = ""; stalls = ""; pinst = ""; pcyc = ""; ops = ""
    }
    /^  [A-Za-z_].*\(.*\)/ && !/Section:/ { flush(); kname = $0; sub(/^ +/, "", kname); sub(/\(specpipe.*/, "", kname) }
    $1 == "Grid" && $2 == "Size" { grid = $NF }
    $1 == "Block" && $2 == "Size" { block = $NF }
    $1 == "Registers" && $2 == "Per" { regs = $NF }
    $1 == "Duration" { dur = $NF; if ($2 ~ /^ms/) dur = dur * 1000 }
    /smsp__issue_active.avg.pct_of_peak_sustained_active/ { issue = $NF }
    /smsp__warps_active.avg.per_cycle_active/ { wact = $NF }
    /smsp__warps_eligible.avg.per_cycle_active/ { welig = $NF }
    /smsp__inst_executed.sum / { insts = $NF }
    /l1tex__data_pipe_lsu_wavefronts_mem_shared.sum / { wav = $NF }
    /l1tex__data_bank_conflicts_pipe_lsu_mem_shared.sum / { conf = $NF }
    /sm__inst_executed_pipe_.*pct_of_peak/ && $NF + 0 >= 5 {
      p = $1; sub(/sm__inst_executed_pipe_/, "", p); sub(/\.avg.*/, "", p); pinst = pinst " " p "=" $NF }
    /sm__pipe_.*_cycles_active.*pct_of_peak/ && $NF + 0 >= 5 {
      p = $1; sub(/sm__pipe_/, "", p); sub(/_cycles_active.*/, "", p); pcyc = pcyc " " p "=" $NF }
    /smsp__average_warps_issue_stalled_.*_per_issue_active.ratio/ && $NF + 0 >= 0.1 {
      p = $1; sub(/smsp__average_warps_issue_stalled_/, "", p); sub(/_per_issue_active.*/, "", p)
      stalls = stalls " " p "=" $NF }
    /sass__inst_executed_per_opcode/ { ops = $0; gsub(/ +/, " ", ops) }
    END { flush() }' "$log" | cut -c1-400
  grep -hE '^==(ERROR|WARNING)==' "$log" | sort | uniq -c | head -5
done
exit $status
