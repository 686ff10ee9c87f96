#!/usr/bin/env bash
# The KL measurement on the trained profile's demo model (docs/usage.md#kl):
# pn-quantize --measure kl on one text, the mixes it chooses judged by
# pn-compare on another, and what it costs.
#   bench/kl-measure.sh
# Environment:
#   BUILD        build folder (default build)
#   DIR          the model, the measurement and the mixes (default /tmp/pn-kl-measure)
#   CALIBRATION  the text the candidates are judged on (default Apache-2.0)
#   TEXT         the held-out text the mixes are judged on (default GPL-3)
#   SEQ_LEN, MAX_SEQS   positions of both (default 256, 8)
#   PROMOTE      the --promote counts chosen by KL (default "2 5 10 19")
#   TARGET       a --target-size (default: the bytes of the error-ranked P0k+19)
#   THREADS      (default 2)
# Prints: the measurement's wall time and its per-candidate time (from its
# progress lines), the time of one pn-compare run of one file, the mixes'
# table (pn-compare, each KL with its standard error), and one mix decoded
# in bf16 beside f32.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${BUILD:-build}
dir=${DIR:-/tmp/pn-kl-measure}
cal=${CALIBRATION:-/usr/share/common-licenses/Apache-2.0}
text=${TEXT:-/usr/share/common-licenses/GPL-3}
pos=(--seq-len "${SEQ_LEN:-256}" --max-seqs "${MAX_SEQS:-8}")
threads=${THREADS:-2}
bin=$build/bin
cmake --build "$build" -j"$(nproc)" --target pn_programs >/dev/null
mkdir -p "$dir"
src=$dir/demo-trained.gguf
[ -f "$src" ] || "$bin/pn-synth" --quiet --profile trained "$src"
kl=(--measure kl --calibration "$cal" "${pos[@]}" --measurement "$dir/trained.kl" --threads "$threads")
t0=$(date +%s.%N)
"$bin/pn-quantize" "${kl[@]}" --dry-run "$src" > "$dir/measure.out" 2> "$dir/measure.err"
t1=$(date +%s.%N)
echo "measurement: $(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.0f", b - a }') s wall ($dir/trained.kl; nothing judged when it was there already)"
grep -E 'KL measurement: [0-9]+ of' "$dir/measure.err" | tail -3 || true
"$bin/pn-quantize" --quiet --promote 19 --threads "$threads" --force "$src" "$dir/err-19.gguf"
target=${TARGET:-$(stat -c %s "$dir/err-19.gguf")}
files=()
for n in ${PROMOTE:-2 5 10 19}; do
  "$bin/pn-quantize" --quiet "${kl[@]}" --promote "$n" --force "$src" "$dir/kl-$n.gguf"
  files+=("$dir/kl-$n.gguf")
done
"$bin/pn-quantize" --quiet "${kl[@]}" --target-size "$target" --force "$src" "$dir/kl-target.gguf"
files+=("$dir/kl-target.gguf")
t0=$(date +%s.%N)
"$bin/pn-compare" --threads "$threads" --text "$text" "${pos[@]}" "$src" "${files[@]}"
t1=$(date +%s.%N)
echo "pn-compare of the source and ${#files[@]} files: $(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.0f", b - a }') s wall"
echo "one mix decoded in bf16 (the measurement's precision for a bf16 source) against the f32 above:"
"$bin/pn-compare" --threads "$threads" --decode-type bf16 --text "$text" "${pos[@]}" "$src" "$dir/kl-10.gguf"
