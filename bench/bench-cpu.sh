#!/usr/bin/env bash
# CPU spent outside the scale search: pn-quantize and pn-check on one source
# from a cold cache, with wall, user and system seconds.
#   bench/bench-cpu.sh SRC.gguf [RUNS]        RUNS default 2
# BINS="dir1 dir2 ..." compares builds (folders holding pn-quantize,
# pn-check and bench_pn): each run goes over them in turn, so they share
# the machine's state (default: BUILD/bin, built first).
# For each run and build: drops SRC's page cache (dd iflag=nocache count=0,
# the file's own cache only: other people's caches stay), runs pn-quantize
# under /usr/bin/time (P0k with PROMOTE promotions, default 4; the promotion
# measurement is made once beforehand and read from a file, so every run
# does the same work), then pn-check on the output from a cold cache. Prints
# one line per run: wall, user, sys, peak RSS, the ratio of weights/s to
# bench_pn's 2-thread pn3t fast throughput (measured once, first), pn-check's
# wall, user and sys, a digest of every tensor's relative error and CRC in
# the report (equal digests: the same figures), and the stage seconds.
# Environment: BUILD (default build), BINS, OUT (default
# /tmp/pn-bench-cpu-out.gguf, removed at the end), THREADS (default 2),
# PROMOTE (default 4).
set -euo pipefail
cd "$(dirname "$0")/.."
src=${1:?usage: bench/bench-cpu.sh SRC.gguf [RUNS]}
runs=${2:-2}
build=${BUILD:-build}
out=${OUT:-/tmp/pn-bench-cpu-out.gguf}
threads=${THREADS:-2}
[ -x /usr/bin/time ] || { echo "bench-cpu: /usr/bin/time is missing (apt-get install time)" >&2; exit 2; }
if [ -z "${BINS:-}" ]; then
  cmake --build "$build" -j2 --target pn_programs bench_pn >/dev/null
  BINS=$build/bin
fi
read -r -a bins <<< "$BINS"
meas=$out.measure
rep=$out.json
trap 'rm -f "$out" "$meas" "$rep" "$out.time"' EXIT
cold() { sync; dd if="$1" iflag=nocache count=0 status=none; }

bp=$(OMP_NUM_THREADS=2 "${bins[0]}/bench_pn" --seconds 2)
bp2=$(echo "$bp" | awk 'NR == 1 { for (i = 1; i < NF; i++) if ($i == "best" && $(i+1) == "path") best = $(i+2); sub(/,$/, "", best) }
           $1 == "pn3t" && $2 == best { print $4 }')
echo "bench_pn pn3t fast, 2 threads: $bp2 weights/s"
"${bins[0]}/pn-quantize" --quiet --force --threads "$threads" --promote "${PROMOTE:-4}" \
    --measurement "$meas" --dry-run "$src" > /dev/null 2>&1

json_num() { grep -o "\"$1\": [0-9.e+-]*" "$2" | head -1 | awk '{print $2}'; }
printf '%-4s %-10s %8s %8s %8s %7s %6s | %-20s | %-8s | %s\n' run build wall_s user_s sys_s \
    rss_MB ratio "check wall/user/sys" figures "stage seconds (they overlap)"
for r in $(seq 1 "$runs"); do
  for b in "${bins[@]}"; do
    rm -f "$out"
    cold "$src"
    /usr/bin/time -f '%e %U %S %M' -o "$out.time" "$b/pn-quantize" --quiet --force \
        --threads "$threads" --promote "${PROMOTE:-4}" --measurement "$meas" --report "$rep" \
        "$src" "$out" > /dev/null 2>&1
    read -r wall user sys rss < "$out.time"
    weights=$(json_num weights "$rep")
    total=$(json_num total "$rep")
    figures=$(grep -o '"relative_error": [^,]*, "crc32": "[0-9a-f]*"' "$rep" | md5sum | cut -c1-8)
    stages=$(grep -o '"seconds": {[^}]*}' "$rep" | sed 's/"seconds": {//; s/}//; s/"//g; s/total: [0-9.]*, //; s/measure[a-z_]*: [0-9.]*, //g; s/plan: [0-9.]*, //')
    cold "$out"
    /usr/bin/time -f '%e %U %S' -o "$out.time" "$b/pn-check" "$out" > /dev/null
    read -r cwall cuser csys < "$out.time"
    printf '%-4s %-10s %8s %8s %8s %7.0f %6.3f | %6s %6s %6s | %-8s | %s\n' "$r" \
        "$(basename "$b")" "$wall" "$user" "$sys" "$(awk -v k="$rss" 'BEGIN{print k/1024}')" \
        "$(awk -v w="$weights" -v t="$total" -v x="$bp2" 'BEGIN{print (w/t)/x}')" \
        "$cwall" "$cuser" "$csys" "$figures" "$stages"
  done
done
