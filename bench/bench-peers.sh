#!/usr/bin/env bash
# pn-quantize next to stock llama.cpp's quantizer, on the same source in the
# same run (issue 21):
#   bench/bench-peers.sh
# quantizes one pn-synth source with
#   1. pn-quantize, the built-in P0k+19 mix (--backend cpu);
#   2. stock llama_model_quantize at Q4_K_M, Q3_K_M and Q3_K_S: the libllama
#      of node-llama-cpp that scripts/install-deps installs, called by
#      the harness pn-llama-quantize (tools/llama/pn_llama_quantize.c);
# each from a warm page cache (the source is read once before each run), at
# the same thread count, and prints per run: wall time, CPU (user + sys),
# peak RSS (/usr/bin/time), output bytes, bits per weight (8 x output bytes
# / source weights), and on the default (small) model the mean KL of each
# output's next-token distributions from the source's through pn-compare's
# llama.cpp runner (stock files are run as they are). Markdown table.
#
# Environment:
#   BUILD        build folder (default build)
#   BENCH_DIR    where the files go (default /tmp/pn-bench-peers)
#   SRC          an existing float source to use instead of generating one
#   LAYERS, WIDTH_SCALE, VOCAB   the pn-synth shape (default 8 layers, width
#                scale 4, vocab 8192: about 0.3 B weights, a few minutes on
#                2 cores)
#   FULL=1       the full-width 8-layer shape instead (width scale 1, vocab
#                32768: 3.38 B weights, 6.8 GB of BF16; stock Q4_K_M takes
#                minutes); no KL unless KL=1
#   KL=0|1       the KL column (default 1, 0 with FULL=1)
#   THREADS      threads of every quantizer and of llama.cpp (default 2)
#   TYPES        the stock types (default "Q4_K_M Q3_K_M Q3_K_S")
#   LIBLLAMA     libllama.so (default: node-llama-cpp's, under tools/llama)
#   KEEP=1       keep the source and the outputs
set -euo pipefail
cd "$(dirname "$0")/.."
build=${BUILD:-build}
dir=${BENCH_DIR:-/tmp/pn-bench-peers}
threads=${THREADS:-2}
types=${TYPES:-Q4_K_M Q3_K_M Q3_K_S}
lib=${LIBLLAMA:-tools/llama/node_modules/@node-llama-cpp/linux-x64/bins/linux-x64/libllama.v0.5.0.so}
if [ "${FULL:-0}" = 1 ]; then
  layers=${LAYERS:-8} width=${WIDTH_SCALE:-1} vocab=${VOCAB:-32768} kl=${KL:-0}
else
  layers=${LAYERS:-8} width=${WIDTH_SCALE:-4} vocab=${VOCAB:-8192} kl=${KL:-1}
fi
bin=$build/bin
[ -x /usr/bin/time ] || { echo "bench-peers: /usr/bin/time is missing (apt-get install time)" >&2; exit 2; }
[ -r "$lib" ] || { echo "bench-peers: no libllama at $lib: run scripts/install-deps, or set LIBLLAMA" >&2; exit 2; }
cmake --build "$build" -j"$(nproc)" --target pn_programs pn-llama-quantize >/dev/null
mkdir -p "$dir"

src=${SRC:-$dir/src-L$layers-W$width-V$vocab.gguf}
if [ ! -f "$src" ]; then
  echo "generating $src (pn-synth --layers $layers --width-scale $width --vocab $vocab)" >&2
  "$bin/pn-synth" --quiet --layers "$layers" --width-scale "$width" --vocab "$vocab" "$src"
fi
# the source's weights, from pn-quantize's plan
weights=$("$bin/pn-quantize" --dry-run --backend cpu "$src" 2>/dev/null |
          sed -n 's/.* tensors, \([0-9]*\) weights.*/\1/p' | head -1)
[ -n "$weights" ] || { echo "bench-peers: cannot count the weights of $src" >&2; exit 1; }

warm() { cat "$src" > /dev/null; }
# run NAME OUT CMD...: one row's figures into rows[]
rows=() outs=() names=()
run() {
  local name=$1 out=$2; shift 2
  rm -f "$out"
  warm
  local tf=$dir/time.txt
  /usr/bin/time -o "$tf" -f "%e %U %S %M" "$@" >"$dir/log.txt" 2>&1 || {
    echo "bench-peers: $name failed:" >&2; tail -5 "$dir/log.txt" >&2; exit 1; }
  read -r wall user sys rss < "$tf"
  local bytes; bytes=$(stat -c %s "$out")
  rows+=("$(awk -v w="$wall" -v u="$user" -v s="$sys" -v r="$rss" -v b="$bytes" -v n="$weights" \
    'BEGIN { printf "%.1f s | %.1f s | %.0f MB | %.3f GB | %.2f", w, u + s, r / 1024, b / 1e9, 8 * b / n }')")
  outs+=("$out"); names+=("$name")
  echo "done: $name" >&2
}

run "pn-quantize P0k+19" "$dir/pn.gguf" \
  "$bin/pn-quantize" --quiet --force --backend cpu --threads "$threads" "$src" "$dir/pn.gguf"
for t in $types; do
  run "stock $t" "$dir/stock-$t.gguf" \
    "$bin/pn-llama-quantize" --lib "$lib" --threads "$threads" "$src" "$dir/stock-$t.gguf" "$t"
done

kls=()
if [ "$kl" = 1 ]; then
  echo "pn-compare: KL of each output from the source (llama.cpp, $threads threads)" >&2
  json=$("$bin/pn-compare" --quiet --json --threads "$threads" "$src" "${outs[@]}")
  mapfile -t kls < <(grep -o '"kl_mean": [-0-9.eE+]*' <<<"$json" | awk '{ printf "%.4f\n", $2 }')
fi

echo
echo "source: $src ($weights weights; pn-synth --layers $layers --width-scale $width --vocab $vocab), $threads threads, warm cache, $(nproc) cores ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'))"
echo
if [ "$kl" = 1 ]; then
  echo "| run | wall | CPU (user+sys) | peak RSS | output | bits/weight | mean KL |"
  echo "|---|---|---|---|---|---|---|"
else
  echo "| run | wall | CPU (user+sys) | peak RSS | output | bits/weight |"
  echo "|---|---|---|---|---|---|"
fi
for i in "${!rows[@]}"; do
  if [ "$kl" = 1 ]; then
    echo "| ${names[$i]} | ${rows[$i]} | ${kls[$i]:-?} |"
  else
    echo "| ${names[$i]} | ${rows[$i]} |"
  fi
done
if [ "${KEEP:-0}" != 1 ]; then
  rm -f "${outs[@]}" "$dir/time.txt" "$dir/log.txt"
  [ -n "${SRC:-}" ] || rm -f "$src"
fi
