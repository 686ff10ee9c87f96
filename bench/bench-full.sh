#!/usr/bin/env bash
# The issue-13 benchmark: pn-quantize on the full Qwen3.8-27B shape from a
# cold page cache, against the scale search's own speed measured in the same
# run.
#   bench/bench-full.sh
# prints, in one run:
#   - `cat` of the source to /dev/null (the disk's read speed), cold;
#   - bench_pn's pn3t fast throughput at 1 and 2 threads, and bench_chunk's
#     (the pipeline's own path on a chunk) beside it;
#   - for each thread count in THREADS: pn-quantize's wall time, weights/s,
#     peak RSS, its per-stage times (they overlap: each is the time its stage
#     spent working, see docs/pipeline.md), and the ratio
#     (weights / wall) / (bench_pn pn3t fast at that thread count);
#   - pn-check on the output beside `cat` of the output, both cold.
# The goal (issue 13): ratio >= 0.75 at 2 threads, peak RSS < 256 MB.
#
# Environment:
#   BUILD        build folder (default build)
#   BENCH_DIR    where the files go (default /tmp/pn-bench-full)
#   SRC          an existing source to use instead of generating one (kept)
#   LAYERS, VOCAB, WIDTH_SCALE   a smaller pn-synth shape (default: --full,
#                the real 27 B shape, about 54 GB; the output is about 12.6 GB)
#   THREADS      thread counts to run (default "2 1")
#   BACKEND      pn-quantize --backend (default cpu)
#   KEEP=1       keep the generated source and the outputs
#   CACHE=file   drop only the benchmark files' cache even as root (on a
#                shared machine)
# Dropping the page cache: as root, `echo 3 > /proc/sys/vm/drop_caches`
# (after sync); otherwise each file's own cache is dropped with
# `dd iflag=nocache count=0` (posix_fadvise DONTNEED), which the script says.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${BUILD:-build}
dir=${BENCH_DIR:-/tmp/pn-bench-full}
threads_list=${THREADS:-"2 1"}
backend=${BACKEND:-cpu}
bin=$build/bin
[ -x /usr/bin/time ] || { echo "bench-full: /usr/bin/time is missing (apt-get install time)" >&2; exit 2; }
cmake --build "$build" -j"$(nproc)" --target pn_programs bench_pn bench_chunk >/dev/null
mkdir -p "$dir"

now() { date +%s%N; }
secs() { awk -v a="$1" -v b="$2" 'BEGIN{printf "%.2f", (b-a)/1e9}'; }

# ---- page cache --------------------------------------------------------
if [ "${CACHE:-}" != file ] && [ "$(id -u)" = 0 ] && [ -w /proc/sys/vm/drop_caches ]; then
  cache_method="echo 3 > /proc/sys/vm/drop_caches (as root, after sync)"
  drop_cache() { sync; echo 3 > /proc/sys/vm/drop_caches; }
else
  cache_method="dd iflag=nocache count=0 on each file (posix_fadvise DONTNEED)"
  drop_cache() { sync; for f in "$@"; do dd if="$f" iflag=nocache count=0 status=none; done; }
fi

# ---- the source --------------------------------------------------------
generated=0
if [ -n "${SRC:-}" ]; then
  src=$SRC
  shape="SRC=$src"
else
  if [ -n "${LAYERS:-}${VOCAB:-}${WIDTH_SCALE:-}" ]; then
    synth_args=(--layers "${LAYERS:-4}" --vocab "${VOCAB:-248320}" --width-scale "${WIDTH_SCALE:-1}")
    shape="pn-synth ${synth_args[*]}"
    src=$dir/synth-L${LAYERS:-4}-V${VOCAB:-248320}-W${WIDTH_SCALE:-1}.gguf
  else
    synth_args=(--full)
    shape="pn-synth --full (Qwen3.8-27B)"
    src=$dir/synth-full.gguf
    # the source (~54 GB; pn-synth checks it again) and the output (~12.6 GB)
    need_kb=$(( (54 + 13) * 1024 * 1024 ))
    free_kb=$(df -Pk "$dir" | awk 'NR==2{print $4}')
    if [ "$free_kb" -lt "$need_kb" ]; then
      echo "bench-full: $dir has $((free_kb / 1048576)) GiB free; the full shape needs about 67 GB (source 54 + output 12.6)" >&2
      exit 1
    fi
  fi
  if [ ! -f "$src" ]; then
    generated=1
    echo "== generating $src ($shape)"
    "$bin/pn-synth" --quiet "${synth_args[@]}" "$src"
  fi
fi
src_bytes=$(stat -c %s "$src")
out=$dir/out.gguf
# the output must fit too
out_bytes=$("$bin/pn-quantize" --dry-run --quiet "$src" | awk '/^file size/{print $3}')
free_b=$(( $(df -Pk "$dir" | awk 'NR==2{print $4}') * 1024 ))
if [ "$free_b" -lt $(( out_bytes + out_bytes / 20 )) ]; then
  echo "bench-full: $dir has $free_b bytes free; the output needs $out_bytes" >&2
  exit 1
fi
cleanup() {
  if [ "${KEEP:-0}" != 1 ]; then
    rm -f "$out" "$dir"/report-T*.json "$dir"/time-T*.txt "$dir"/run-T*.txt "$dir"/check.txt
    if [ "$generated" = 1 ]; then rm -f "$src"; fi
  fi
}
trap cleanup EXIT

echo "== machine: $(nproc) cores, $(awk -F: '/model name/{print $2; exit}' /proc/cpuinfo | sed 's/^ *//'); page cache: $cache_method"
echo "== shape: $shape; source $src_bytes bytes; output $out_bytes bytes"

# ---- the disk ----------------------------------------------------------
drop_cache "$src"
t0=$(now); cat "$src" > /dev/null; t1=$(now)
cat_src=$(secs "$t0" "$t1")
echo "cat source (cold): $cat_src s ($(awk -v b="$src_bytes" -v s="$cat_src" 'BEGIN{printf "%.0f", b/s/1e6}') MB/s)"

# ---- the search's own speed ---------------------------------------------
# the pn3t line of the best path ("pn3t  avx2  <1 thread>  <all threads> ...")
bp=$(OMP_NUM_THREADS=2 "$bin/bench_pn" --seconds 2)
read -r bp1 bp2 < <(echo "$bp" | awk 'NR == 1 { for (i = 1; i < NF; i++) if ($i == "best" && $(i+1) == "path") best = $(i+2); sub(/,$/, "", best) }
           $1 == "pn3t" && $2 == best { print $3, $4 }\')
[ -n "${bp2:-}" ] || { echo "bench-full: cannot read bench_pn's pn3t line:" >&2; echo "$bp" >&2; exit 1; }
echo "bench_pn pn3t fast: 1 thread $bp1 w/s, 2 threads $bp2 w/s ($(echo "$bp" | head -1 | sed 's/^bench_pn: //'))"
# the pipeline's own search path on a chunk (rotation, fused sums, the
# team's items, CRC) beside bench_pn's loop, at 2 threads
bc=$(OMP_NUM_THREADS=2 "$bin/bench_chunk" --types pn3t,pn4t --bf16 --passes 5 --rows 128)
echo "bench_chunk (2 threads, BF16-valued, w/s, x bench_pn's loop):" $(echo "$bc" | awk '$2 == "row" || $2 == "chunk" {printf "%s %s %s (%s); ", $1, $2, $3, $4}')

# ---- pn-quantize -----------------------------------------------------------
json_num() { grep -o "\"$1\": [0-9.e+-]*" "$2" | head -1 | awk '{print $2}'; }
walls=""
printf '%-7s %10s %12s %11s %8s  %s\n' threads wall_s weights/s peak_rss_MB ratio "stage seconds (they overlap)"
for T in $threads_list; do
  rm -f "$out"
  drop_cache "$src"
  rep=$dir/report-T$T.json
  /usr/bin/time -v -o "$dir/time-T$T.txt" "$bin/pn-quantize" --quiet --force --threads "$T" \
      --backend "$backend" --report "$rep" "$src" "$out" > "$dir/run-T$T.txt"
  rss_kb=$(awk -F: '/Maximum resident set size/{gsub(/ /,"",$2); print $2}' "$dir/time-T$T.txt")
  weights=$(json_num weights "$rep")
  total=$(json_num total "$rep")
  ref=$bp2
  [ "$T" = 1 ] && ref=$bp1
  phases=$(grep -o '"seconds": {[^}]*}' "$rep" | sed 's/"seconds": {//; s/}//; s/"//g; s/total: [0-9.]*, //')
  printf '%-7s %10s %12.4g %11.0f %8.3f  %s\n' "$T" "$total" \
      "$(awk -v w="$weights" -v t="$total" 'BEGIN{print w/t}')" \
      "$(awk -v k="$rss_kb" 'BEGIN{print k/1024}')" \
      "$(awk -v w="$weights" -v t="$total" -v r="$ref" 'BEGIN{print (w/t)/r}')" "$phases"
  walls="$walls $T:$total"
done
echo "(ratio: (weights / wall) / bench_pn pn3t fast at the same thread count; weights = $weights)"
for tw in $walls; do
  echo "wall / cold cat of the source, ${tw%%:*} threads: $(awk -v w="${tw#*:}" -v c="$cat_src" 'BEGIN{printf "%.2f", w/c}')x (goal: at most 1.5x at 2 threads)"
done

# ---- the output --------------------------------------------------------
drop_cache "$out"
t0=$(now); cat "$out" > /dev/null; t1=$(now)
cat_out=$(secs "$t0" "$t1")
drop_cache "$out"
t0=$(now); "$bin/pn-check" "$out" > "$dir/check.txt" || true; t1=$(now)
check_s=$(secs "$t0" "$t1")
echo "pn-check output (cold): $check_s s ($(tail -1 "$dir/check.txt")); cat output (cold): $cat_out s"
