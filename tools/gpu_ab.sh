#!/usr/bin/env bash
# Two builds, one bench, one GPU: runs `specpipe bench` of a baseline build and
# of a candidate build in turn (base, new, base, new, ...), so that a kernel
# change is timed against its parent on the same card in the same call, and
# prints per bench row both medians (the lower of the rounds') and new / base.
# Rows are matched by kind, batch, context and note (numbers in the note
# ignored), in their order.
#
# usage: tools/gpu_ab.sh BASE_BUILD NEW_BUILD [-r ROUNDS] -- BENCH_ARGS...
#   e.g. tools/gpu_ab.sh build-base build-cuda -- --device cuda --kernels --attention-only
#   BASE_BUILD, NEW_BUILD  build folders (apps/specpipe in each)
#   ROUNDS                 alternations, default 2
#   SPECPIPE_LIB_DIR       extra shared libraries, prepended to LD_LIBRARY_PATH
# Files in $OUT (default ./gpu_ab_out): ab_base_R.log / ab_new_R.log and their
# JSON, ab.txt (the table).
#
# A baseline build of the parent commit, for instance:
#   git worktree add /tmp/base HEAD^ && cmake -S /tmp/base -B build-base -DSPECPIPE_CUDA=ON \
#     -DCMAKE_CUDA_ARCHITECTURES=90 -DCMAKE_BUILD_TYPE=Release && cmake --build build-base -j
set -uo pipefail
usage() { sed -n '9,13p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }
[ $# -ge 3 ] || usage
base=$1 new=$2
shift 2
rounds=2
while [ $# -gt 0 ] && [ "$1" != -- ]; do
  case "$1" in
    -r) rounds=${2:-}; shift 2 ;;
    *) usage ;;
  esac
done
[ "${1:-}" = -- ] || usage
shift
[[ "$rounds" =~ ^[1-9][0-9]?$ ]] || { echo "gpu_ab: -r wants 1-99 rounds, got '$rounds'"; exit 2; }
for b in "$base" "$new"; do
  [ -x "$b/apps/specpipe" ] || { echo "gpu_ab: no $b/apps/specpipe"; exit 1; }
done
out="${OUT:-$PWD/gpu_ab_out}"
mkdir -p "$out"
[ -n "${SPECPIPE_LIB_DIR:-}" ] && export LD_LIBRARY_PATH="$SPECPIPE_LIB_DIR${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"

status=0
for r in $(seq 1 "$rounds"); do
  for side in base new; do
    dir=$base
    [ "$side" = new ] && dir=$new
    timeout 500 "$dir/apps/specpipe" bench "$@" --json "$out/ab_${side}_$r.json" > "$out/ab_${side}_$r.log" 2>&1 || {
      echo "gpu_ab: $side round $r failed (rc $?), see $out/ab_${side}_$r.log"
      status=1
    }
  done
done

python3 - "$out" "$rounds" <<'EOF' | tee "$out/ab.txt"
import json, os, re, sys
out, rounds = sys.argv[1], int(sys.argv[2])

def rows(side):
    """{key: [ms of each round]} and the keys in the first round's order."""
    times, order = {}, []
    for r in range(1, rounds + 1):
        path = os.path.join(out, f"ab_{side}_{r}.json")
        if not os.path.exists(path):
            continue
        seen = {}
        for p in json.load(open(path)).get("points", []):
            if p.get("skipped"):
                continue
            note = re.sub(r"-?\d+(\.\d+)?(e-?\d+)?", "#", p.get("note", ""))
            key = (p["kind"], p["batch"], p["context"], note)
            n = seen.get(key, 0)
            seen[key] = n + 1
            key = key + (n,)
            if key not in times:
                times[key] = []
                order.append((key, p.get("note", "")))
            times[key].append(p["median_ms"])
    return times, order

base, order = rows("base")
new, _ = rows("new")
print(f"{'kind':9s} {'batch':>5s} {'context':>8s} {'base_ms':>9s} {'new_ms':>9s} {'new/base':>8s}  note (base)")
for key, note in order:
    if key not in new:
        continue
    b, n = min(base[key]), min(new[key])
    print(f"{key[0]:9s} {key[1]:5d} {key[2]:8d} {b:9.3f} {n:9.3f} {n / b:8.3f}  {note[:110]}")
missing = [k for k, _ in order if k not in new]
if missing:
    print(f"({len(missing)} base rows without a match in the new build's output)")
EOF
exit $status
