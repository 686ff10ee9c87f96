#!/usr/bin/env bash
# The picture of docs/usage.md ("Trying many mixes in one command"): one
# pn-compare --sweep of the demo model (pn-synth's default, as scripts/demo
# makes it), five PN mixes and two stock types, judged by stock llama.cpp on
# a text Debian ships, drawn with gnuplot:
#   bench/sweep-demo.sh
# Environment:
#   BUILD        build folder (default build)
#   DIR          where the model and the kept mixes go (default /tmp/pn-sweep-demo)
#   PROFILE      pn-synth --profile (default gaussian: the demo model)
#   PROMOTE      (default 0,5,10,19,23: the demo model has 23 candidates)
#   STOCK        (default Q3_K_M,Q4_K_M)
#   TEXT         the judging text (default /usr/share/common-licenses/GPL-3)
#   IMATRIX      an imatrix made on another text (llama-imatrix -f
#                /usr/share/common-licenses/Apache-2.0 ...; docs/usage.md)
#   SEQ_LEN, MAX_SEQS   how much of the text (default 256, 8)
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
echo "pn-compare ${args[*]} $src" >&2
"$bin/pn-compare" "${args[@]}" "$src"
