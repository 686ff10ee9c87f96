#!/usr/bin/env bash
# The README's commands, as a newcomer reads them.
#   tests/readme/check-readme.sh BIN_DIR
# 1. Every example of the programs table names only options that program's
#    --help lists (each program's help is checked against its option table
#    by cli_usage/*).
# 2. The first example, `pn-quantize ./Qwen3.8-27B/ qwen3.8-27b-pn3.gguf`,
#    runs as written on a Hugging Face folder (a small pn-synth --hf model
#    under that name), pn-check finds the output valid, and it is the
#    shipped recipe's file, without the folder's MTP layer.
# Prints "readme: N passed, N failed" and exits 1 on any failure.
set -u
root=$(cd "$(dirname "$0")/../.." && pwd)
bin=$(cd "${1:?usage: check-readme.sh BIN_DIR}" && pwd)
readme=$root/README.md
passed=0 failed=0
ok() { passed=$((passed + 1)); }
bad() { echo "FAIL: $*"; failed=$((failed + 1)); }

# 1. the examples' options
examples=$(grep -o '`pn-[a-z]* [^`]*`' "$readme" | tr -d '`')
[ -n "$examples" ] || bad "no example found in README.md"
while IFS= read -r ex; do
  prog=${ex%% *}
  if [ ! -x "$bin/$prog" ]; then bad "README example '$ex': no program $prog"; continue; fi
  help=$("$bin/$prog" --help 2>&1)
  for opt in $(grep -o -- '--[a-z][a-z0-9-]*' <<<"$ex"); do
    if grep -q -- "$opt\b" <<<"$help"; then ok; else bad "README example '$ex': $prog --help has no $opt"; fi
  done
done <<<"$examples"

# 2. the first example, as written, in a scratch folder
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
first=$(grep -m1 -E '^pn-quantize \./' "$readme")
[ "$first" = "pn-quantize ./Qwen3.8-27B/ qwen3.8-27b-pn3.gguf" ] \
  || bad "the README's first example changed: '$first' (update this test)"
if (cd "$work" && "$bin/pn-synth" --quiet --hf --mtp --layers 2 --width-scale 4 --vocab 512 Qwen3.8-27B >/dev/null); then
  if (cd "$work" && PATH="$bin:$PATH" eval "$first" >out.txt 2>err.txt); then
    ok
    if "$bin/pn-check" "$work/qwen3.8-27b-pn3.gguf" >"$work/check.txt" 2>&1; then ok
    else bad "pn-check of the first example's output: $(tail -3 "$work/check.txt")"; fi
    # the format's file: the shipped recipe drops the folder's MTP layer
    if "$bin/pn-check" --strict --recipe "$root/recipes/qwen3.8-27b-pn3.mix" \
         "$work/qwen3.8-27b-pn3.gguf" >"$work/check.txt" 2>&1 \
       && ! grep -q 'nextn' "$work/check.txt"; then ok
    else bad "the first example's output is not the recipe's file without the MTP layer: $(grep -m3 -E 'RECIPE|nextn|invalid' "$work/check.txt")"; fi
  else
    bad "the first example failed: $(tail -3 "$work/err.txt")"
  fi
else
  bad "pn-synth --hf could not make the example's folder"
fi

echo "readme: $passed passed, $failed failed"
[ "$failed" = 0 ]
