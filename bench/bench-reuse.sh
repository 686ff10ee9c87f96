#!/usr/bin/env bash
# The issue-14 benchmark: another mix of one source in seconds, by copying
# what an earlier output already holds (pn-quantize --reuse, docs/reuse.md).
#   bench/bench-reuse.sh
# runs, on one source:
#   1. P0k+19 from scratch, saving the promotion measurement (--measurement);
#   2. P0k+40 (--promote 40) with --reuse of 1's output;
#   3. a --target-size mix (by default halfway between the sizes of 1 and 2)
#      with --reuse of 2's output, written in place over it (PREV = DST,
#      --force), so the disk holds at most two outputs at a time;
# each from the same page-cache state (see below), and prints for each run
# its wall time, peak RSS, the tensors and bytes copied, the tensors
# quantized, its per-stage seconds, and the speed-up over run 1.
# With CHECK=1 it also quantizes 2's and 3's mixes from scratch and compares
# the files byte for byte (cmp): they must be equal.
# Goal (issue 14, full shape, 2 cores): a new mix in under 30 s and at least
# 8x faster than from scratch.
#
# Environment:
#   BUILD        build folder (default build)
#   BENCH_DIR    where the files go (default /tmp/pn-bench-reuse)
#   SRC          an existing source to use instead of generating one (kept)
#   LAYERS, VOCAB, WIDTH_SCALE   a smaller pn-synth shape (default: --full,
#                the real 27 B shape, about 54 GB, as bench/bench-full.sh;
#                the outputs are about 12.6 GB each)
#   RECIPE       --recipe for all runs (default: the built-in P0k; a shape of
#                WIDTH_SCALE > 4 needs recipes/test-fallback.mix)
#   PROMOTE1, PROMOTE2   the promotions of runs 1 and 2 (default 19 and 40;
#                a small shape has fewer candidates)
#   TARGET       --target-size of run 3 (default halfway between 1 and 2)
#   THREADS      pn-quantize --threads (default 2)
#   CHECK=1      the from-scratch comparisons above
#   KEEP=1       keep the generated source and the outputs
#   CACHE=file   drop only the benchmark files' cache even as root
# Page cache: as root, `echo 3 > /proc/sys/vm/drop_caches` (after sync)
# before each run; otherwise each file's own cache is dropped with
# `dd iflag=nocache count=0` (posix_fadvise DONTNEED). The script says which.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${BUILD:-build}
dir=${BENCH_DIR:-/tmp/pn-bench-reuse}
threads=${THREADS:-2}
p1=${PROMOTE1:-19}
p2=${PROMOTE2:-40}
bin=$build/bin
[ -x /usr/bin/time ] || { echo "bench-reuse: /usr/bin/time is missing (apt-get install time)" >&2; exit 2; }
cmake --build "$build" -j"$(nproc)" --target pn_programs >/dev/null
mkdir -p "$dir"
recipe_args=()
[ -n "${RECIPE:-}" ] && recipe_args=(--recipe "$RECIPE")

now() { date +%s%N; }

if [ "${CACHE:-}" != file ] && [ "$(id -u)" = 0 ] && [ -w /proc/sys/vm/drop_caches ]; then
  cache_method="echo 3 > /proc/sys/vm/drop_caches (as root, after sync)"
  drop_cache() { sync; echo 3 > /proc/sys/vm/drop_caches; }
else
  cache_method="dd iflag=nocache count=0 on each file (posix_fadvise DONTNEED)"
  drop_cache() { sync; for f in "$@"; do [ -f "$f" ] && dd if="$f" iflag=nocache count=0 status=none; done; true; }
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
    need_kb=$(( (54 + 2 * 13) * 1024 * 1024 ))
    free_kb=$(df -Pk "$dir" | awk 'NR==2{print $4}')
    if [ "$free_kb" -lt "$need_kb" ]; then
      echo "bench-reuse: $dir has $((free_kb / 1048576)) GiB free; the full shape needs about 80 GB (source 54 + two outputs of 12.6)" >&2
      exit 1
    fi
  fi
  if [ ! -f "$src" ]; then
    generated=1
    echo "== generating $src ($shape)"
    "$bin/pn-synth" --quiet "${synth_args[@]}" "$src"
  fi
fi

out1=$dir/mix1.gguf
out2=$dir/mix2.gguf
meas=$dir/source.measure
size_of_plan() {   # the file size of a plan, from --dry-run
  "$bin/pn-quantize" --dry-run --quiet "${recipe_args[@]}" "$@" "$src" | awk '/^file size/{print $3}'
}
size1=$(size_of_plan --promote "$p1")
size2=$(size_of_plan --promote "$p2")
free_b=$(( $(df -Pk "$dir" | awk 'NR==2{print $4}') * 1024 ))
# at most two outputs at once (run 1's is removed before run 3 writes beside
# run 2's); CHECK=1 keeps two more
need=$(( size1 + size2 + size2 / 20 ))
[ "${CHECK:-0}" = 1 ] && need=$(( need + 2 * size2 ))
if [ "$free_b" -lt "$need" ]; then
  echo "bench-reuse: $dir has $free_b bytes free; the outputs need about $need" >&2
  exit 1
fi
target=${TARGET:-$(( (size1 + size2) / 2 ))}
cleanup() {
  rm -f "$dir"/check*.gguf
  if [ "${KEEP:-0}" != 1 ]; then
    rm -f "$out1" "$out2" "$meas" "$dir"/report-*.json "$dir"/time-*.txt "$dir"/run-*.txt
    if [ "$generated" = 1 ]; then rm -f "$src"; fi
  fi
}
trap cleanup EXIT

echo "== machine: $(nproc) cores, $(awk -F: '/model name/{print $2; exit}' /proc/cpuinfo | sed 's/^ *//'); page cache: $cache_method"
echo "== shape: $shape; source $(stat -c %s "$src") bytes; threads $threads"

json_num() { grep -o "\"$1\": [0-9.e+-]*" "$2" | head -1 | awk '{print $2}'; }
# run NAME ARGS...: pn-quantize from a dropped page cache, under /usr/bin/time
run() {
  local name=$1
  shift
  drop_cache "$src" "$out1" "$out2" "$meas"
  local rep=$dir/report-$name.json
  /usr/bin/time -v -o "$dir/time-$name.txt" "$bin/pn-quantize" --threads "$threads" \
      --backend cpu --force "${recipe_args[@]}" --report "$rep" "$@" > "$dir/run-$name.txt" 2>&1 || {
    echo "bench-reuse: run $name failed:" >&2; cat "$dir/run-$name.txt" >&2; exit 1; }
}
total1=
row() {
  local name=$1 what=$2
  local rep=$dir/report-$name.json
  local total rss reused bytes quantized
  total=$(json_num total "$rep")
  rss=$(awk -F: '/Maximum resident set size/{gsub(/ /,"",$2); printf "%.0f", $2/1024}' "$dir/time-$name.txt")
  reused=$(grep -o '"reuse": {[^,]*, "tensors": [0-9]*' "$rep" | awk '{print $NF}' || true)
  bytes=$(grep -o '"reuse": {[^,]*, "tensors": [0-9]*, "bytes": [0-9]*' "$rep" | awk '{print $NF}' || true)
  if [ -n "$reused" ]; then
    quantized=$(grep -o '"because"' "$rep" | wc -l)
  else
    quantized=$(grep -o '"source_type"' "$rep" | wc -l)
  fi
  [ -z "$total1" ] && total1=$total
  local phases
  phases=$(grep -o '"seconds": {[^}]*}' "$rep" | sed 's/"seconds": {//; s/}//; s/"//g; s/total: [0-9.]*, //')
  printf '%-4s %-34s %8s %8s %8s %14s %9s %8s  %s\n' "$name" "$what" "$total" "$rss" "${reused:--}" \
      "${bytes:--}" "$quantized" "$(awk -v a="$total1" -v b="$total" 'BEGIN{printf "%.1fx", a/b}')" "$phases"
}

echo "== the runs (each from a dropped page cache)"
run 1 --promote "$p1" --measurement "$meas" "$src" "$out1"
run 2 --promote "$p2" --measurement "$meas" --reuse "$out1" "$src" "$out2"
rm -f "$out1"    # at most two outputs on the disk
run 3 --target-size "$target" --measurement "$meas" --reuse "$out2" "$src" "$out2"
printf '%-4s %-34s %8s %8s %8s %14s %9s %8s  %s\n' run mix wall_s rss_MB reused reused_bytes quantized speedup "stage seconds (they overlap)"
row 1 "P0k+$p1 from scratch"
row 2 "P0k+$p2 --reuse of run 1"
row 3 "--target-size $target --reuse of 2, in place"
grep -h '^reuse \|^reuse:' "$dir/run-2.txt" "$dir/run-3.txt" | cut -c1-200 || true

if [ "${CHECK:-0}" = 1 ]; then
  echo "== CHECK=1: the same mixes from scratch"
  "$bin/pn-quantize" --quiet --threads "$threads" --force "${recipe_args[@]}" --promote "$p2" \
      --measurement "$meas" "$src" "$dir/check2.gguf"
  "$bin/pn-quantize" --quiet --threads "$threads" --force "${recipe_args[@]}" --target-size "$target" \
      --measurement "$meas" "$src" "$dir/check3.gguf"
  cmp "$dir/check3.gguf" "$out2" && echo "run 3's output is byte for byte the from-scratch one"
  # run 2's output was replaced in place by run 3: quantize it again with --reuse to compare
  "$bin/pn-quantize" --quiet --threads "$threads" --force "${recipe_args[@]}" --promote "$p2" \
      --measurement "$meas" --reuse "$out2" "$src" "$dir/check2r.gguf"
  cmp "$dir/check2.gguf" "$dir/check2r.gguf" && echo "P0k+$p2 with --reuse is byte for byte the from-scratch one"
fi
