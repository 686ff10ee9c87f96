#!/usr/bin/env bash
# The picture of docs/usage.md ("Trying many mixes in one command"): one
# pn-compare --sweep of the demo model (pn-synth's default, as scripts/demo
# makes it), five PN mixes and two stock types, judged by stock llama.cpp on
# a text Debian ships, drawn with gnuplot:
#   bench/sweep-demo.sh
# and the trained profile's both promotion orders, one curve each, the KL
# measurement made earlier (pn-quantize --measure kl, below) so that the
# sweep reads it rather than measuring for an hour:
#   PROFILE=trained MEASURE=error,kl \
#   CALIBRATION=/usr/share/common-licenses/Apache-2.0 MEASUREMENT_KL=FILE \
#   PLOT=docs/sweep-trained-kl.svg bench/sweep-demo.sh
# Environment:
#   BUILD        build folder (default build)
#   DIR          where the model and the kept mixes go (default /tmp/pn-sweep-demo)
#   PROFILE      pn-synth --profile (default gaussian: the demo model)
#   PROMOTE      (default 0,5,10,19,23: the demo model has 23 candidates)
#   STOCK        (default Q3_K_M,Q4_K_M)
#   TEXT         the judging text (default /usr/share/common-licenses/GPL-3)
#   IMATRIX      an imatrix made on another text (llama-imatrix -f
#                /usr/share/common-licenses/Apache-2.0 ...; docs/usage.md)
#   SEQ_LEN, MAX_SEQS   how much of the text (default 256, 8); also of the
#                calibration text
#   MEASURE      pn-compare --measure: the promotion orders, comma-separated
#                (error, forward, kl; default: pn-compare's, error); each PN
#                mix is made once per order
#   CALIBRATION  pn-compare --calibration: the text kl measures on (needed
#                with kl; not TEXT)
#   MEASUREMENT_KL  a KL measurement made earlier, copied into the keep
#                folder as measurement.kl before the sweep, which then reads
#                it instead of measuring: made by
#                  pn-quantize --measure kl --calibration CALIBRATION
#                    --seq-len SEQ_LEN --max-seqs MAX_SEQS
#                    --measurement FILE [--imatrix IMATRIX] SOURCE OUT.gguf
#                on this script's SOURCE ($DIR/demo-$PROFILE.gguf), with the
#                default recipe. One of another source, text, positions,
#                judge, base or imatrix is refused by the sweep (naming what
#                differs), not measured again.
#   BUDGET       the line on the picture (default 90MB)
#   PLOT         the picture (default docs/sweep-demo.svg)
#   THREADS      (default 2)
set -euo pipefail
cd "$(dirname "$0")/.."
build=${BUILD:-build}
dir=${DIR:-/tmp/pn-sweep-demo}
profile=${PROFILE:-gaussian}
text=${TEXT:-/usr/share/common-licenses/GPL-3}
plot=${PLOT:-docs/sweep-demo.svg}
bin=$build/bin
cmake --build "$build" -j"$(nproc)" --target pn_programs pn-llama-quantize >/dev/null
mkdir -p "$dir"
src=$dir/demo-$profile.gguf
[ -f "$src" ] || "$bin/pn-synth" --quiet --profile "$profile" "$src"
keep=$dir/mixes-$profile
rm -rf "$keep"
args=(--sweep --promote "${PROMOTE:-0,5,10,19,23}" --stock "${STOCK:-Q3_K_M,Q4_K_M}"
      --text "$text" --seq-len "${SEQ_LEN:-256}" --max-seqs "${MAX_SEQS:-8}"
      --threads "${THREADS:-2}" --keep "$keep" --plot "$plot" --force
      --budget "${BUDGET:-90MB}")
[ -n "${IMATRIX:-}" ] && args+=(--imatrix "$IMATRIX")
[ -n "${MEASURE:-}" ] && args+=(--measure "$MEASURE")
[ -n "${CALIBRATION:-}" ] && args+=(--calibration "$CALIBRATION")
if [ -n "${MEASUREMENT_KL:-}" ]; then
    mkdir -p "$keep"
    cp "$MEASUREMENT_KL" "$keep/measurement.kl"
fi
echo "pn-compare ${args[*]} $src" >&2
"$bin/pn-compare" "${args[@]}" "$src"
