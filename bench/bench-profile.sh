#!/usr/bin/env bash
# What pn-synth --profile trained changes for PN (issue 31):
#   bench/bench-profile.sh
# generates one model per profile (gaussian, the default; trained), quantizes
# each with the built-in recipe at P0k+1 twice, with the recipe's rotation
# (Hadamard) and with --rotation none, and prints in Markdown
#   1. per tensor kind, the mean pn3t relative error (sum (w - dq)^2 /
#      sum w^2, from --report) with the rotation and without, per profile;
#   2. the spread of the promotion candidates' gains (relative error at pn3t
#      less at pn4t, from --measurement) per profile: min, median, max and
#      (max - min) / median.
# Environment:
#   BUILD        build folder (default build)
#   BENCH_DIR    where the files go (default /tmp/pn-bench-profile)
#   LAYERS, WIDTH_SCALE, VOCAB   the shape (default 4, 4, 2048: n_embd 1280,
#                about 0.1 B weights, a minute on 2 cores)
#   THREADS      (default 2)
set -euo pipefail
cd "$(dirname "$0")/.."
build=${BUILD:-build}
dir=${BENCH_DIR:-/tmp/pn-bench-profile}
layers=${LAYERS:-4} width=${WIDTH_SCALE:-4} vocab=${VOCAB:-2048} threads=${THREADS:-2}
bin=$build/bin
command -v jq >/dev/null || { echo "bench-profile: jq is missing (apt-get install jq)" >&2; exit 2; }
cmake --build "$build" -j"$(nproc)" --target pn-synth pn-quantize >/dev/null
mkdir -p "$dir"
for p in gaussian trained; do
  src=$dir/$p.gguf
  [ -f "$src" ] || "$bin/pn-synth" --quiet --force --profile "$p" --layers "$layers" \
      --width-scale "$width" --vocab "$vocab" "$src"
  for rot in hadamard none; do
    rm -f "$dir/$p-$rot.pnm"
    "$bin/pn-quantize" --quiet --force --backend cpu --threads "$threads" --promote 1 \
      --rotation "$rot" --report "$dir/$p-$rot.json" --measurement "$dir/$p-$rot.pnm" \
      "$src" "$dir/$p-$rot.gguf"
    rm -f "$dir/$p-$rot.gguf"
  done
done
# per kind: mean relative error of the pn3t tensors
kind_err() {
  jq -r '.tensors[] | select(.type == "pn3t") |
         [(.name | sub("^blk\\.[0-9]+\\."; "")), .relative_error] | @tsv' "$1" |
    awk -F'\t' '{ s[$1] += $2; n[$1]++ } END { for (k in s) printf "%s\t%.5f\n", k, s[k] / n[k] }' |
    sort
}
echo "model: pn-synth --layers $layers --width-scale $width --vocab $vocab; pn-quantize --promote 1, built-in recipe"
echo
echo "| tensor kind (pn3t) | gaussian, Hadamard | gaussian, none | trained, Hadamard | trained, none |"
echo "|---|---|---|---|---|"
join -t$'\t' <(kind_err "$dir/gaussian-hadamard.json") <(kind_err "$dir/gaussian-none.json") |
  join -t$'\t' - <(kind_err "$dir/trained-hadamard.json") |
  join -t$'\t' - <(kind_err "$dir/trained-none.json") |
  awk -F'\t' '{ printf "| %s | %s | %s | %s | %s |\n", $1, $2, $3, $4, $5 }'
echo
echo "| profile, rotation | candidates | gain min | median | max | (max - min) / median |"
echo "|---|---|---|---|---|---|"
for p in gaussian trained; do
  for rot in hadamard none; do
    awk -F'\t' -v name="$p, $rot" '
      $1 ~ /\.weight$/ && NF >= 4 { g[n++] = $2 - $3 }
      END {
        if (n == 0) { printf "| %s | 0 | - | - | - | - |\n", name; exit }
        for (i = 1; i < n; i++) { v = g[i]; for (j = i - 1; j >= 0 && g[j] > v; j--) g[j + 1] = g[j]; g[j + 1] = v }
        med = g[int(n / 2)]
        printf "| %s | %d | %.5f | %.5f | %.5f | %.3f |\n", name, n, g[0], med, g[n - 1], (g[n - 1] - g[0]) / med
      }' "$dir/$p-$rot.pnm"
  done
done
