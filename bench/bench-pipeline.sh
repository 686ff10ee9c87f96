#!/usr/bin/env bash
# End-to-end benchmark of pn-quantize on full-width pn-synth models.
#   bench/bench-pipeline.sh [LAYERS...]     default: 2 4
# For each layer count: generates a full-width BF16 model with the full
# vocabulary (skipped when it exists in $BENCH_DIR), then runs pn-quantize
# (P0k with PROMOTE promotions, default 4: a 2-layer model has only 8
# candidates; measurement saved beside it) under /usr/bin/time -v, and prints
# wall time, weights/s, peak RSS and the per-stage times (they overlap: each
# is the time its stage spent working, see docs/pipeline.md), plus `cat` of
# the source to /dev/null for the disk's read speed, and the ratio of
# weights/s to bench_pn's 2-thread pn3t fast throughput measured in the same
# run (the goal of issue 13 is 0.75 on the full shape from a cold cache:
# bench/bench-full.sh). THREADS (default 2) sets pn-quantize's threads.
# Environment: BENCH_DIR (default /tmp/pn-bench), BUILD (default build),
# BACKEND (default auto), KEEP=1 keeps the outputs.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${BUILD:-build}
dir=${BENCH_DIR:-/tmp/pn-bench}
mkdir -p "$dir"
layers=("$@")
[ ${#layers[@]} -gt 0 ] || layers=(2 4)
[ -x /usr/bin/time ] || { echo "bench: /usr/bin/time is missing (apt-get install time)" >&2; exit 2; }
cmake --build "$build" -j"$(nproc)" --target pn_programs bench_pn >/dev/null
bp2=$(OMP_NUM_THREADS=2 "$build/bin/bench_pn" --seconds 2 | awk 'NR == 1 { for (i = 1; i < NF; i++) if ($i == "best" && $(i+1) == "path") best = $(i+2); sub(/,$/, "", best) }
           $1 == "pn3t" && $2 == best { print $4 }\')
echo "bench_pn pn3t fast, 2 threads: $bp2 weights/s"
printf '%-7s %12s %14s %9s %10s %12s %7s %11s %9s  %s\n' layers weights src_bytes cat_s wall_s weights/s ratio peak_rss_MB search% stages
for L in "${layers[@]}"; do
  src=$dir/synth-full-L$L.gguf
  [ -f "$src" ] || "$build/bin/pn-synth" --quiet --width-scale 1 --layers "$L" --vocab 248320 "$src"
  t0=$(date +%s%N); cat "$src" > /dev/null; t1=$(date +%s%N)
  cat_s=$(awk -v a="$t0" -v b="$t1" 'BEGIN{printf "%.2f", (b-a)/1e9}')
  out=$dir/out-L$L.gguf
  /usr/bin/time -v -o "$dir/time-L$L.txt" "$build/bin/pn-quantize" --force --quiet --threads "${THREADS:-2}" \
      --backend "${BACKEND:-auto}" --promote "${PROMOTE:-4}" --measurement "$dir/synth-full-L$L.measure" \
      --report "$dir/report-L$L.json" "$src" "$out" > "$dir/run-L$L.txt"
  rss_kb=$(awk -F: '/Maximum resident set size/{gsub(/ /,"",$2); print $2}' "$dir/time-L$L.txt")
  python_free_json() { grep -o "\"$1\": [0-9.e+-]*" "$dir/report-L$L.json" | head -1 | awk '{print $2}'; }
  weights=$(python_free_json weights)
  total=$(python_free_json total)
  phases=$(grep -o '"seconds": {[^}]*}' "$dir/report-L$L.json" | sed 's/"seconds": //; s/"//g')
  search=$(grep -o '"seconds": {[^}]*}' "$dir/report-L$L.json" | awk -F'[:,}]' '{
      for (i = 1; i <= NF; i++) { gsub(/[ "{]/, "", $i) }
      for (i = 1; i < NF; i++) { v[$i] = $(i+1) }
      printf "%.1f", 100 * (v["rotate"] + v["quantize"] + v["measure"]) / v["total"] }')
  printf '%-7s %12s %14s %9s %10s %12.4g %7.3f %11.0f %9s  %s\n' "$L" "$weights" "$(stat -c %s "$src")" \
      "$cat_s" "$total" "$(awk -v w="$weights" -v t="$total" 'BEGIN{print w/t}')" \
      "$(awk -v w="$weights" -v t="$total" -v r="$bp2" 'BEGIN{print (w/t)/r}')" \
      "$(awk -v k="$rss_kb" 'BEGIN{print k/1024}')" "$search" "$phases"
  [ "${KEEP:-0}" = 1 ] || rm -f "$out"
done
