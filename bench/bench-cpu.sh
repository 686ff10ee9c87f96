#!/usr/bin/env bash
# CPU spent outside the scale search: pn-quantize and pn-check on one source
# from a cold cache, with wall, user and system seconds.
#   bench/bench-cpu.sh SRC.gguf [RUNS]        RUNS default 2
# For each run: drops SRC's page cache (dd iflag=nocache count=0, the file's
# own cache only: other people's caches stay), runs pn-quantize under
# /usr/bin/time (P0k with PROMOTE promotions, default 4; the promotion
# measurement is made once beforehand and read from a file, so every run
# does the same work), then pn-check on the output from a cold cache. Prints
# one line per run: wall, user, sys, peak RSS, the ratio of weights/s to
# bench_pn's 2-thread pn3t fast throughput (measured once, first), and the
# stage seconds of the report.
# Environment: BUILD (default build), OUT (default /tmp/pn-bench-cpu-out.gguf,
# removed at the end), THREADS (default 2), PROMOTE (default 4).
set -euo pipefail
cd "$(dirname "$0")/.."
src=${1:?usage: bench/bench-cpu.sh SRC.gguf [RUNS]}
runs=${2:-2}
build=${BUILD:-build}
bin=$build/bin
out=${OUT:-/tmp/pn-bench-cpu-out.gguf}
threads=${THREADS:-2}
[ -x /usr/bin/time ] || { echo "bench-cpu: /usr/bin/time is missing (apt-get install time)" >&2; exit 2; }
cmake --build "$build" -j2 --target pn_programs bench_pn >/dev/null
meas=$out.measure
rep=$out.json
trap 'rm -f "$out" "$meas" "$rep" "$out.time"' EXIT
cold() { sync; dd if="$1" iflag=nocache count=0 status=none; }

bp=$(OMP_NUM_THREADS=2 "$bin/bench_pn" --seconds 2)
bp2=$(echo "$bp" | awk 'NR == 1 { for (i = 1; i < NF; i++) if ($i == "best" && $(i+1) == "path") best = $(i+2); sub(/,$/, "", best) }
           $1 == "pn3t" && $2 == best { print $4 }')
echo "bench_pn pn3t fast, 2 threads: $bp2 weights/s"
"$bin/pn-quantize" --quiet --force --threads "$threads" --promote "${PROMOTE:-4}" \
    --measurement "$meas" --dry-run "$src" > /dev/null

json_num() { grep -o "\"$1\": [0-9.e+-]*" "$2" | head -1 | awk '{print $2}'; }
printf '%-4s %8s %8s %8s %8s %6s | %-22s | %s\n' run wall_s user_s sys_s rss_MB ratio \
    "pn-check wall/user/sys" "stage seconds (they overlap)"
for r in $(seq 1 "$runs"); do
  rm -f "$out"
  cold "$src"
  /usr/bin/time -f '%e %U %S %M' -o "$out.time" "$bin/pn-quantize" --quiet --force \
      --threads "$threads" --promote "${PROMOTE:-4}" --measurement "$meas" --report "$rep" \
      "$src" "$out" > /dev/null
  read -r wall user sys rss < "$out.time"
  weights=$(json_num weights "$rep")
  total=$(json_num total "$rep")
  stages=$(grep -o '"seconds": {[^}]*}' "$rep" | sed 's/"seconds": {//; s/}//; s/"//g; s/total: [0-9.]*, //')
  cold "$out"
  /usr/bin/time -f '%e %U %S' -o "$out.time" "$bin/pn-check" "$out" > /dev/null
  read -r cwall cuser csys < "$out.time"
  printf '%-4s %8s %8s %8s %8.0f %6.3f | %6s %6s %6s   | %s\n' "$r" "$wall" "$user" "$sys" \
      "$(awk -v k="$rss" 'BEGIN{print k/1024}')" \
      "$(awk -v w="$weights" -v t="$total" -v b="$bp2" 'BEGIN{print (w/t)/b}')" \
      "$cwall" "$cuser" "$csys" "$stages"
done
