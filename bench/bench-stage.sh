#!/usr/bin/env bash
# The pipeline's quantize stage against the search's own benchmark, for one
# or two builds, in one run (issue 33).
#   bench/bench-stage.sh SRC.gguf [BUILD...]      default BUILD: build
# For each build, in alternating rounds (ROUNDS, default 2; the best round
# of each counts, so load from other work falls on all alike), on a warm
# page cache (the stages, not the disk, are measured):
#   - bench_pn's pn3t and pn4t 2-thread rates on its path (PATHS, default
#     "avx2 avx512", those this CPU has), and bench_chunk's (the pipeline's
#     own search path on a chunk: the same search with the sums, the team's
#     items, the rotation);
#   - pn-quantize SRC at THREADS (default 2) on each path: wall, weights/s,
#     the quantize and rotate stage seconds, the quantize stage's rate
#     (quantized weights / quantize seconds) and its ratio to bench_pn's
#     pn3t rate of the same build and path.
# Environment: THREADS, ROUNDS, PATHS, OUT (default /tmp/pn-bench-stage),
# WAIT (an OMP_WAIT_POLICY for pn-quantize, default unset).
set -euo pipefail
[ $# -ge 1 ] || { echo "usage: bench/bench-stage.sh SRC.gguf [BUILD...]" >&2; exit 2; }
src=$1
shift
builds=("$@")
[ ${#builds[@]} -gt 0 ] || builds=(build)
threads=${THREADS:-2}
rounds=${ROUNDS:-2}
out=${OUT:-/tmp/pn-bench-stage}
mkdir -p "$out"
paths=()
for p in ${PATHS:-avx2 avx512}; do
  grep -qw "$([ "$p" = avx512 ] && echo avx512bw || echo avx2)" /proc/cpuinfo && paths+=("$p")
done
json_num() { grep -o "\"$1\": [0-9.e+-]*" "$2" | head -1 | awk '{print $2}'; }
echo "== $(nproc) cores, $(awk -F: '/model name/{print $2; exit}' /proc/cpuinfo | sed 's/^ *//'), $(grep -qw avx512bw /proc/cpuinfo && echo AVX-512 || echo 'AVX2 only'); source $src ($(stat -c %s "$src") bytes); $threads threads; best of $rounds rounds"
cat "$src" > /dev/null
declare -A best_wall best_q best_rot bp3 bp4 chunk3 chunk4
for r in $(seq "$rounds"); do
  for b in "${builds[@]}"; do
    for p in "${paths[@]}"; do
      k="$b|$p"
      line=$(PN_CPU_PATH=$p OMP_NUM_THREADS=$threads "$b/bin/bench_pn" --seconds 0.5)
      v3=$(echo "$line" | awk -v p="$p" '$1 == "pn3t" && $2 == p {print $4}')
      v4=$(echo "$line" | awk -v p="$p" '$1 == "pn4t" && $2 == p {print $4}')
      c=$(PN_CPU_PATH=$p OMP_NUM_THREADS=$threads "$b/bin/bench_chunk" --types pn3t,pn4t --passes 5 --rows 128)
      c3=$(echo "$c" | awk '$1 == "pn3t" && $2 == "chunk" {print $3}')
      c4=$(echo "$c" | awk '$1 == "pn4t" && $2 == "chunk" {print $3}')
      rep=$out/report.json
      env ${WAIT:+OMP_WAIT_POLICY=$WAIT} PN_CPU_PATH=$p "$b/bin/pn-quantize" --quiet --force --threads "$threads" \
          --backend cpu --report "$rep" "$src" "$out/out.gguf" > /dev/null
      total=$(json_num total "$rep")
      q=$(json_num quantize "$rep")
      rot=$(json_num rotate "$rep")
      weights=$(json_num weights "$rep")
      if [ -z "${best_wall[$k]:-}" ] || awk -v a="$total" -v b="${best_wall[$k]}" 'BEGIN{exit !(a < b)}'; then
        best_wall[$k]=$total; best_q[$k]=$q; best_rot[$k]=$rot
      fi
      for v in bp3:$v3 bp4:$v4 chunk3:$c3 chunk4:$c4; do
        n=${v%%:*}; x=${v#*:}
        declare -n arr=$n
        if [ -z "${arr[$k]:-}" ] || awk -v a="$x" -v b="${arr[$k]}" 'BEGIN{exit !(a > b)}'; then arr[$k]=$x; fi
        unset -n arr
      done
    done
  done
done
printf '%-34s %-7s %11s %11s %11s %11s %8s %8s %8s %12s %7s\n' build path bench_pn3t bench_pn4t chunk_pn3t chunk_pn4t wall_s quant_s rot_s quant_w/s x_pn3t
for b in "${builds[@]}"; do
  for p in "${paths[@]}"; do
    k="$b|$p"
    qr=$(awk -v w="$weights" -v q="${best_q[$k]}" 'BEGIN{printf "%.4g", w/q}')
    printf '%-34s %-7s %11.4g %11.4g %11.4g %11.4g %8s %8s %8s %12s %7.3f\n' "$b" "$p" "${bp3[$k]}" "${bp4[$k]}" \
        "${chunk3[$k]}" "${chunk4[$k]}" "${best_wall[$k]}" "${best_q[$k]}" "${best_rot[$k]}" "$qr" \
        "$(awk -v a="$qr" -v b="${bp3[$k]}" 'BEGIN{print a/b}')"
  done
done
echo "(quant_w/s: all $weights weights / the quantize stage's seconds, which include the k-quants; x_pn3t: that / bench_pn pn3t at $threads threads)"
rm -f "$out/out.gguf" "$out/report.json"
