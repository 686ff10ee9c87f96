#!/usr/bin/env bash
# The figures the docs show for the demo model (scripts/demo's: pn-synth's
# default, 6 layers, width scale 4, vocab 8192, its default seed), each printed as the
# block the docs hold. A block the docs mark `<!-- made by docs/figures.sh
# NAME -->` is exactly what `docs/figures.sh NAME` prints
# (tests/docs/check-figures.sh reruns it and compares); one marked
# `<!-- measured by docs/figures.sh NAME: MACHINE -->` holds timings or
# llama.cpp's figures, which the test compares by shape only.
#   docs/figures.sh NAME
# NAME:
#   demo-plan     pn-quantize's plan totals for the demo model at P0k+19
#   demo-mixes    size and bits per weight of P0k+0, +5, +10, +19, +23 (a table)
#   demo-measure  the promotion measurement file of the demo model (its head)
#   demo-remeasure  the note of a run whose --measurement was made with
#                 another rotation
#   demo-reuse    the reuse line of P0k+23 made with --reuse of P0k+19
#   demo-run      pn-quantize's last two lines on the demo model (timings)
#   compare       pn-compare of the demo model and P0k+0, +3, +7 (llama.cpp;
#                 QUICK=1: a 2-layer model of the same widths, vocab 512)
# Environment: BIN (the programs; default build/bin), WORK (where the model
# and mixes go; default a temporary folder, removed).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bin=$(cd "${BIN:-$root/build/bin}" && pwd)
name=${1:?usage: docs/figures.sh NAME (its opening comment lists them)}
if [ -n "${WORK:-}" ]; then
  work=$WORK
  mkdir -p "$work"
else
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
fi
cd "$work"
model=()
[ "${QUICK:-0}" != 1 ] || model+=(--layers 2 --vocab 512)
[ -f demo-source.gguf ] || "$bin/pn-synth" --quiet ${model[@]+"${model[@]}"} demo-source.gguf

case $name in
demo-plan)
  "$bin/pn-quantize" --dry-run demo-source.gguf 2>&1 | grep -E '^(plan|file size) '
  ;;
demo-mixes)
  echo "| mix | bytes | bpw | bpw PN |"
  echo "|---|---|---|---|"
  for n in 0 5 10 19 23; do
    "$bin/pn-quantize" --quiet --dry-run --measurement demo.measure --promote "$n" demo-source.gguf 2>&1 |
      awk -v n="$n" '/^file size / { bytes = $3; pn = $9; all = $14 }
                     END { printf "| P0k+%s | %s | %s | %s |\n", n, bytes, all, pn }'
  done
  ;;
demo-measure)
  rm -f demo.measure
  "$bin/pn-quantize" --quiet --dry-run --measurement demo.measure demo-source.gguf >/dev/null
  head -7 demo.measure
  echo ...
  tail -1 demo.measure
  ;;
demo-remeasure)
  [ -f demo.measure ] || "$bin/pn-quantize" --quiet --dry-run --measurement demo.measure demo-source.gguf >/dev/null
  "$bin/pn-quantize" --dry-run --rotation none --measurement demo.measure demo-source.gguf 2>&1 >/dev/null |
    grep 'it is not used'
  rm -f demo.measure
  ;;
demo-reuse)
  "$bin/pn-quantize" --quiet --force --measurement demo.measure demo-source.gguf demo-pn.gguf
  "$bin/pn-quantize" --force --measurement demo.measure --promote 23 --reuse demo-pn.gguf \
    demo-source.gguf demo-p23.gguf 2>&1 | grep '^reuse demo-pn.gguf'
  ;;
demo-run)
  "$bin/pn-quantize" --threads 2 --force demo-source.gguf demo-pn.gguf 2>&1 | grep -E '^(wrote|stage seconds) '
  ;;
compare)
  for n in 0 3 7; do
    "$bin/pn-quantize" --quiet --force --measurement demo.measure --promote "$n" \
      demo-source.gguf "demo-p$n.gguf"
  done
  "$bin/pn-compare" --threads 2 demo-source.gguf demo-p0.gguf demo-p3.gguf demo-p7.gguf
  ;;
*)
  echo "docs/figures.sh: no figure '$name'" >&2
  exit 2
  ;;
esac
