#!/usr/bin/env bash
# Which cheap promotion order ranks like the KL gains (issue 41 item 4;
# docs/usage.md, "Choosing promotions without a KL measurement").
#   bench/proxy-study.sh            the grid below, then the table
#   bench/proxy-study.sh gains      only steps 1 and 2
#   bench/proxy-study.sh table      only the table, from what DIR holds
# For every generated model (pn-synth, PROFILES x LAYERS x SEEDS):
#  1. the promotion measurement (pn-quantize --dry-run --measurement) and the
#     weight statistics of every candidate (bench_proxy_stats: the
#     measurement's own sums over the same rotated rows, plain, weighted by
#     the square of the RMS-norm gain in front of the tensor, and by IMATRIX);
#  2. each candidate's KL gain on CALIB as issue 41 defines it: the base mix
#     (--promote 0) and the base with that one candidate (--promote-list),
#     each decoded as pn-compare decodes it (pn-dequant, f32), run by the
#     harness pn-compare runs (tools/llama/pn-llama-logits.mjs) on the same
#     tokens, and the KL of every position computed by pn-compare's own
#     pn_compare_kl (bench_proxy_kl: its mean is pn-compare's kl_mean to the
#     last digit, CHECK=1 asserts it; unlike pn-compare it keeps the
#     per-position KLs, for the standard errors);
#     gain = KL(base) - KL(base + candidate), with the standard error of the
#     paired per-position differences;
#  3. per proxy, the Spearman correlation of its order with the KL gains,
#     and the mixes P0k+N (N in COUNTS) it chooses, judged on TEXT (held
#     out: not CALIB) with the same harness.
# Environment:
#   BUILD      build folder (default build)
#   DIR        where the files go (default /tmp/pn-proxy-study; kept: a rerun
#              reuses every file already there)
#   PROFILES   pn-synth profiles (default "gaussian trained")
#   LAYERS     depths (default "4 8")
#   SEEDS      seeds (default "1 2 3")
#   WIDTH      --width-scale (default 8: n_embd 640, which the shipped recipe's
#              q3_K token_embd cannot hold, hence RECIPE)
#   VOCAB      --vocab (default 2048)
#   RECIPE     (default test-fallback: P0k with q8_0 for token_embd and output)
#   CALIB      the text the gains are measured on (default Apache-2.0)
#   TEXT       the held-out judging text (default GPL-3)
#   SEQ_LEN, MAX_SEQS        how much of CALIB (default 128, 4)
#   TEXT_SEQ_LEN, TEXT_SEQS  how much of TEXT (default 128, 4)
#   COUNTS     promotions judged on TEXT (default "5 10")
#   IMATRIX    an imatrix of MODEL (with SRC): the weighted proxies too
#   SRC        one given source instead of the grid (name it with NAME)
#   THREADS    (default 2)
#   CHECK=1    compare bench_proxy_kl's base KL with one pn-compare run (the
#              first model's; once per DIR)
set -euo pipefail
cd "$(dirname "$0")/.."
build=${BUILD:-build}
bin=$build/bin
dir=${DIR:-/tmp/pn-proxy-study}
threads=${THREADS:-2}
calib=${CALIB:-/usr/share/common-licenses/Apache-2.0}
text=${TEXT:-/usr/share/common-licenses/GPL-3}
recipe=${RECIPE:-test-fallback}
script=$build/share/pn-quantize/llama/pn-llama-logits.mjs
mkdir -p "$dir"

# logits FILE.gguf OUT.logits TEXT LEN SEQS: the harness, as pn-compare runs it
logits() {
  [ -s "$2" ] && return 0
  nice node "$script" "$1" --threads "$threads" --text "$3" --seq-len "$4" --max-seqs "$5" \
    3>"$2.tmp" >/dev/null 2>"$2.log" || { tail -5 "$2.log" >&2; rm -f "$2.tmp"; exit 1; }
  mv "$2.tmp" "$2"
}

# judge SRC PN.gguf OUT.logits TEXT LEN SEQS: decode (f32), run, remove the decode
judge() {
  [ -s "$3" ] && return 0
  local f32=$dir/decoded.f32.gguf
  nice "$bin/pn-dequant" --quiet --force --threads "$threads" "$2" "$f32"
  logits "$f32" "$3" "$4" "$5" "$6"
  rm -f "$f32"
}

# mix SRC OUT.gguf [LIST]: the recipe with no promotion, or with LIST's
mix() {
  [ -s "$2" ] && return 0
  if [ -n "${3:-}" ]; then
    nice "$bin/pn-quantize" --quiet --recipe "$recipe" --threads "$threads" ${imx:+--imatrix "$imx"} \
      --promote-list "$3" "$1" "$2"
  else
    nice "$bin/pn-quantize" --quiet --recipe "$recipe" --threads "$threads" ${imx:+--imatrix "$imx"} \
      --promote 0 "$1" "$2"
  fi
}

# study NAME SRC: steps 1 and 2 for one model, into $dir/NAME/
study() {
  local name=$1 src=$2 d=$dir/$1
  mkdir -p "$d/cand"
  echo "== $name: measurement and statistics" >&2
  [ -s "$d/measure" ] || nice "$bin/pn-quantize" --quiet --dry-run --recipe "$recipe" \
    ${imx:+--imatrix "$imx"} --promote 1 --measurement "$d/measure" "$src" >/dev/null
  "$bin/bench_proxy_stats" "$src" "$d/measure" ${imx:+"$imx"} >"$d/stats.tsv" # cheap: always
  echo "== $name: KL gains on $(basename "$calib")" >&2
  logits "$src" "$d/src.calib.logits" "$calib" "${SEQ_LEN:-128}" "${MAX_SEQS:-4}"
  mix "$src" "$d/base.gguf"
  judge "$src" "$d/base.gguf" "$d/base.calib.logits" "$calib" "${SEQ_LEN:-128}" "${MAX_SEQS:-4}"
  local files=("$d/base.calib.logits")
  while read -r cand; do
    echo "$cand" >"$d/cand/$cand.list"
    if [ ! -s "$d/cand/$cand.calib.logits" ]; then
      mix "$src" "$d/cand/$cand.gguf" "$d/cand/$cand.list"
      judge "$src" "$d/cand/$cand.gguf" "$d/cand/$cand.calib.logits" "$calib" \
        "${SEQ_LEN:-128}" "${MAX_SEQS:-4}"
      rm -f "$d/cand/$cand.gguf"
    fi
    files+=("$d/cand/$cand.calib.logits")
  done < <(awk -F'\t' 'NR > 1 { print $1 }' "$d/stats.tsv")
  "$bin/bench_proxy_kl" "$d/src.calib.logits" "${files[@]}" >"$d/gains.tsv"
  if [ "${CHECK:-0}" = 1 ] && [ ! -e "$dir/checked" ]; then
    local want got
    want=$(awk -F'\t' 'NR == 2 { print $3 }' "$d/gains.tsv")
    got=$(nice "$bin/pn-compare" --json --threads "$threads" --text "$calib" \
      --seq-len "${SEQ_LEN:-128}" --max-seqs "${MAX_SEQS:-4}" "$src" "$d/base.gguf" |
      sed -n 's/.*"kl_mean": \([0-9.e+-]*\),.*/\1/p')
    [ "$want" = "$got" ] || { echo "proxy-study: $name: pn-compare gives $got, bench_proxy_kl $want" >&2; exit 1; }
    echo "== $name: pn-compare's kl_mean $got equals bench_proxy_kl's" | tee "$dir/checked" >&2
  fi
}

# heldout NAME SRC: step 3's mixes (the lists proxy-study.py's choose wrote)
heldout() {
  local name=$1 src=$2 d=$dir/$1
  echo "== $name: chosen mixes judged on $(basename "$text")" >&2
  logits "$src" "$d/src.text.logits" "$text" "${TEXT_SEQ_LEN:-128}" "${TEXT_SEQS:-4}"
  judge "$src" "$d/base.gguf" "$d/base.text.logits" "$text" "${TEXT_SEQ_LEN:-128}" "${TEXT_SEQS:-4}"
  local files=("$d/base.text.logits") l
  for l in "$d"/choice/*.list; do
    local out=${l%.list}.text.logits
    if [ ! -s "$out" ]; then
      mix "$src" "${l%.list}.gguf" "$l"
      judge "$src" "${l%.list}.gguf" "$out" "$text" "${TEXT_SEQ_LEN:-128}" "${TEXT_SEQS:-4}"
      stat -c %s "${l%.list}.gguf" >"${l%.list}.bytes"
      rm -f "${l%.list}.gguf"
    fi
    files+=("$out")
  done
  "$bin/bench_proxy_kl" "$d/src.text.logits" "${files[@]}" >"$d/heldout.tsv"
}

models=()
if [ -n "${SRC:-}" ]; then
  models=("${NAME:?name the source: NAME=...}")
else
  for layers in ${LAYERS:-4 8}; do
    for profile in ${PROFILES:-gaussian trained}; do
      for seed in ${SEEDS:-1 2 3}; do
        models+=("$profile-l$layers-s$seed")
      done
    done
  done
fi
source_of() { # the model's source file, made when absent
  if [ -n "${SRC:-}" ]; then echo "$SRC"; return; fi
  local p=${1%%-*} rest=${1#*-l} s=$dir/$1.gguf
  local layers=${rest%%-*} seed=${1##*-s}
  [ -s "$s" ] || nice "$bin/pn-synth" --quiet --threads "$threads" --profile "$p" --layers "$layers" \
    --width-scale "${WIDTH:-8}" --vocab "${VOCAB:-2048}" --seed "$seed" "$s"
  echo "$s"
}
imx=${IMATRIX:-}
py=bench/proxy-study.py

if [ "${1:-}" != table ]; then
  cmake --build "$build" -j"$(nproc)" --target pn_programs bench_proxy_stats bench_proxy_kl >/dev/null
  for m in "${models[@]}"; do study "$m" "$(source_of "$m")"; done
  [ "${1:-}" = gains ] && exit 0
  for m in "${models[@]}"; do
    python3 "$py" choose "$dir/$m" ${COUNTS:-5 10}
    heldout "$m" "$(source_of "$m")"
  done
fi
python3 "$py" table "$dir" "${models[@]}"
