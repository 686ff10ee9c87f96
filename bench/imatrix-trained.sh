#!/usr/bin/env bash
# What an importance matrix buys on the trained-statistics model (docs/usage.md,
# "What the imatrix buys"): P0k+19 chosen without and with the imatrix, beside
# stock Q3_K_M without and with the same imatrix, all judged in ONE pn-compare
# run on held-out text.
#   LLAMA_IMATRIX=/path/to/llama-imatrix bench/imatrix-trained.sh
# The imatrix is made by llama.cpp's own llama-imatrix (build it once from the
# bundle node-llama-cpp ships: tools/llama/node_modules/node-llama-cpp/llama/
# gitRelease.bundle, `git clone` it, `cmake -B b -DLLAMA_CURL=OFF && cmake
# --build b --target llama-imatrix`: about 24 minutes on 2 cores) on one text,
# and the mixes are judged on another (both texts ship with Debian).
# Environment:
#   LLAMA_IMATRIX  the llama-imatrix program (required unless IMATRIX is given)
#   IMATRIX        an imatrix already made for this model (skips llama-imatrix)
#   BUILD          build folder (default build)
#   DIR            where the files go (default /tmp/pn-imatrix-trained)
#   PROFILE        pn-synth --profile (default trained)
#   PROMOTE        promotions (default 19)
#   STOCK          the stock type (default Q3_K_M)
#   CALIB          the imatrix's text (default /usr/share/common-licenses/Apache-2.0)
#   TEXT           the judging text (default /usr/share/common-licenses/GPL-3)
#   CHUNK          llama-imatrix -c (default 256)
#   SEQ_LEN, MAX_SEQS   how much of the judging text (default 256, 8)
#   THREADS        (default 2)
set -euo pipefail
cd "$(dirname "$0")/.."
build=${BUILD:-build}
dir=${DIR:-/tmp/pn-imatrix-trained}
profile=${PROFILE:-trained}
promote=${PROMOTE:-19}
stock=${STOCK:-Q3_K_M}
calib=${CALIB:-/usr/share/common-licenses/Apache-2.0}
text=${TEXT:-/usr/share/common-licenses/GPL-3}
threads=${THREADS:-2}
bin=$build/bin
cmake --build "$build" -j"$(nproc)" --target pn_programs pn-llama-quantize >/dev/null
mkdir -p "$dir"
src=$dir/demo-$profile.gguf
[ -f "$src" ] || "$bin/pn-synth" --quiet --profile "$profile" "$src"

imatrix=${IMATRIX:-$dir/demo-$profile.imatrix.gguf}
if [ -z "${IMATRIX:-}" ] && [ ! -f "$imatrix" ]; then
  [ -n "${LLAMA_IMATRIX:-}" ] || { echo "imatrix-trained: set LLAMA_IMATRIX (llama.cpp's llama-imatrix) or IMATRIX" >&2; exit 2; }
  echo "== $LLAMA_IMATRIX -m $src -f $calib -c ${CHUNK:-256} -t $threads -o $imatrix" >&2
  "$LLAMA_IMATRIX" -m "$src" -f "$calib" -c "${CHUNK:-256}" -t "$threads" -o "$imatrix" \
    >"$dir/llama-imatrix.log" 2>&1 || { tail -20 "$dir/llama-imatrix.log" >&2; exit 1; }
fi

lib=tools/llama/node_modules/@node-llama-cpp/linux-x64/bins/linux-x64/libllama.v0.5.0.so
plain=$dir/p$promote-plain.gguf
weighted=$dir/p$promote-imatrix.gguf
default=$dir/p$promote-imatrix-default.gguf
stock_plain=$dir/stock-$stock-plain.gguf
stock_weighted=$dir/stock-$stock-imatrix.gguf
rm -f "$plain" "$weighted" "$default" "$stock_plain" "$stock_weighted"
"$bin/pn-quantize" --quiet --threads "$threads" --promote "$promote" "$src" "$plain"
# the promotions measured weighted by the imatrix (what every build did
# before --imatrix-promotion), and pn-quantize's default with an imatrix
# (the promotions unweighted, the q4_K output weighted)
"$bin/pn-quantize" --quiet --threads "$threads" --promote "$promote" --imatrix "$imatrix" \
  --imatrix-promotion weighted "$src" "$weighted"
"$bin/pn-quantize" --quiet --threads "$threads" --promote "$promote" --imatrix "$imatrix" "$src" "$default"
"$bin/pn-llama-quantize" --lib "$lib" --threads "$threads" "$src" "$stock_plain" "$stock"
"$bin/pn-llama-quantize" --lib "$lib" --threads "$threads" --imatrix "$imatrix" "$src" "$stock_weighted" "$stock"

# which tensors each PN mix promoted
for f in "$plain" "$weighted" "$default"; do
  echo "== promoted in $(basename "$f"):" >&2
  "$bin/pn-check" --dump "$f" | grep -E 'pn\.mix\.promoted|pn\.promoted' >&2 || true
done
echo "== pn-compare --threads $threads --text $text --seq-len ${SEQ_LEN:-256} --max-seqs ${MAX_SEQS:-8} $src (5 files)" >&2
"$bin/pn-compare" --threads "$threads" --text "$text" --seq-len "${SEQ_LEN:-256}" \
  --max-seqs "${MAX_SEQS:-8}" "$src" "$plain" "$weighted" "$default" "$stock_plain" "$stock_weighted"
