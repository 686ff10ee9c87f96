#!/usr/bin/env bash
# The pipeline's quantize stage against the search's own benchmark, for one
# or two builds, in one run (docs/pipeline.md, "Speed of the parts").
#   bench/bench-stage.sh SRC.gguf [BUILD...]      default BUILD: build
# For each build, in alternating rounds (ROUNDS, default 2; the best round
# of each counts, so load from other work falls on all alike), on a warm
# page cache (the stages, not the disk, are measured):
#   - bench_pn's pn3t and pn4t 2-thread rates on its path (PATHS, default
#     "avx2 avx512", those this CPU has), and bench_chunk's (the pipeline's
#     own search path on a chunk: the same search with the sums, the team's
#     items, the rotation);
#   - pn-quantize SRC at THREADS (default 2) on each path: wall, CPU
#     seconds (user + system), the quantize and rotate stage seconds, and two
#     ratios to bench_pn of the same build and path: the quantize stage
#     against the search alone at bench_pn's rates (x_search), and the whole
#     run's CPU time against the search's own CPU time for the PN weights
#     (x_cpu). On a shared machine the CPU figures are the steadier ones.
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
# weights of each output type in a report: "pn3t 123 pn4t 456 ..."
type_weights() { grep -o '"shape": \[[0-9, ]*\], "source_type": "[a-z0-9]*", "type": "[a-zA-Z0-9_]*"' "$1" |
  awk -F'[][]' '{ n = split($2, d, ", "); w = 1; for (i = 1; i <= n; i++) w *= d[i];
                  t = $3; sub(/.*"type": "/, "", t); sub(/"$/, "", t); tw[t] += w }
                END { for (t in tw) printf "%s %.0f ", t, tw[t] }'; }
echo "== $(nproc) cores, $(awk -F: '/model name/{print $2; exit}' /proc/cpuinfo | sed 's/^ *//'), $(grep -qw avx512bw /proc/cpuinfo && echo AVX-512 || echo 'AVX2 only'); source $src ($(stat -c %s "$src") bytes); $threads threads; best of $rounds alternating rounds"
cat "$src" > /dev/null
declare -A best_wall best_cpu best_q best_rot bp3 bp4 bc3 bc4 chunk3 chunk4
for r in $(seq "$rounds"); do
  for b in "${builds[@]}"; do
    for p in "${paths[@]}"; do
      k="$b|$p"
      line=$(PN_CPU_PATH=$p OMP_NUM_THREADS=$threads "$b/bin/bench_pn" --seconds 0.5)
      v3=$(echo "$line" | awk -v p="$p" '$1 == "pn3t" && $2 == p {print $4}')
      v4=$(echo "$line" | awk -v p="$p" '$1 == "pn4t" && $2 == p {print $4}')
      w3=$(echo "$line" | awk -v p="$p" '$1 == "pn3t" && $2 == p {print $8}')
      w4=$(echo "$line" | awk -v p="$p" '$1 == "pn4t" && $2 == p {print $8}')
      c=$(PN_CPU_PATH=$p OMP_NUM_THREADS=$threads "$b/bin/bench_chunk" --types pn3t,pn4t --passes 5 --rows 128 --bf16)
      c3=$(echo "$c" | awk '$1 == "pn3t" && $2 == "chunk" {print $3}')
      c4=$(echo "$c" | awk '$1 == "pn4t" && $2 == "chunk" {print $3}')
      rep=$out/report.json
      /usr/bin/time -f "%U %S" -o "$out/time.txt" env ${WAIT:+OMP_WAIT_POLICY=$WAIT} PN_CPU_PATH=$p \
          "$b/bin/pn-quantize" --quiet --force --threads "$threads" --backend cpu --report "$rep" \
          "$src" "$out/out.gguf" > /dev/null
      cpu=$(awk '{print $1 + $2}' "$out/time.txt")
      total=$(json_num total "$rep")
      q=$(json_num quantize "$rep")
      rot=$(json_num rotate "$rep")
      weights=$(json_num weights "$rep")
      tw=$(type_weights "$rep")
      if [ -z "${best_wall[$k]:-}" ] || awk -v a="$total" -v b="${best_wall[$k]}" 'BEGIN{exit !(a < b)}'; then
        best_wall[$k]=$total; best_q[$k]=$q; best_rot[$k]=$rot
      fi
      if [ -z "${best_cpu[$k]:-}" ] || awk -v a="$cpu" -v b="${best_cpu[$k]}" 'BEGIN{exit !(a < b)}'; then
        best_cpu[$k]=$cpu
      fi
      for v in bp3:$v3 bp4:$v4 bc3:$w3 bc4:$w4 chunk3:$c3 chunk4:$c4; do
        n=${v%%:*}; x=${v#*:}
        declare -n arr=$n
        if [ -z "${arr[$k]:-}" ] || awk -v a="$x" -v b="${arr[$k]}" 'BEGIN{exit !(a > b)}'; then arr[$k]=$x; fi
        unset -n arr
      done
    done
  done
done
echo "weights by type: $tw(all $weights)"
read -r n3 n4 < <(echo "$tw" | awk '{ for (i = 1; i < NF; i += 2) w[$i] = $(i+1); print w["pn3t"] + 0, w["pn4t"] + 0 }')
printf '%-28s %-6s | %9s %9s %9s %9s %9s %9s | %7s %7s %7s %6s %9s %9s\n' build path pn3t_w/s pn4t_w/s pn3t_cpu pn4t_cpu chunk3 chunk4 wall_s cpu_s quant_s rot_s x_search x_cpu
for b in "${builds[@]}"; do
  for p in "${paths[@]}"; do
    k="$b|$p"
    # the search alone at bench_pn's rates: n3/bp3 + n4/bp4 seconds (2 threads), n3/bc3 + n4/bc4 CPU seconds
    xs=$(awk -v n3="$n3" -v n4="$n4" -v a="${bp3[$k]}" -v b="${bp4[$k]}" -v q="${best_q[$k]}" 'BEGIN{printf "%.3f", (n3/a + n4/b)/q}')
    xc=$(awk -v n3="$n3" -v n4="$n4" -v a="${bc3[$k]}" -v b="${bc4[$k]}" -v c="${best_cpu[$k]}" 'BEGIN{printf "%.3f", (n3/a + n4/b)/c}')
    printf '%-28s %-6s | %9.3g %9.3g %9.3g %9.3g %9.3g %9.3g | %7s %7s %7s %6s %9s %9s\n' "$b" "$p" "${bp3[$k]}" "${bp4[$k]}" \
        "${bc3[$k]}" "${bc4[$k]}" "${chunk3[$k]}" "${chunk4[$k]}" "${best_wall[$k]}" "${best_cpu[$k]}" \
        "${best_q[$k]}" "${best_rot[$k]}" "$xs" "$xc"
  done
done
cat <<'EOT'
(pn3t_w/s, pn4t_w/s: bench_pn at the thread count; pn3t_cpu, pn4t_cpu: its 1-thread weights per CPU-second;
 chunk3, chunk4: bench_chunk's `chunk` job (the pipeline's rotate + search + sums + CRC on a BF16-valued chunk);
 wall_s, cpu_s (user + system of the process), quant_s, rot_s: pn-quantize's, best round;
 x_search: the PN weights' time at bench_pn's rates / the quantize stage's seconds (1 = the stage at the benchmark's rate; the stage also holds the k-quants);
 x_cpu: the PN weights' CPU time at bench_pn's 1-thread w/cpu-s / the whole run's CPU seconds (1 = the whole model in the search's own CPU time))
EOT
rm -f "$out/out.gguf" "$out/report.json" "$out/time.txt"
