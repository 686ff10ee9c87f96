#!/usr/bin/env bash
# Every command block of README.md, docs/*.md and recipes/README.md runs as
# it is written.
#   tests/docs/check-docs.sh BIN_DIR
# The convention (docs/layout.md, "Commands and figures in the docs"):
# - a block fenced ```sh holds commands: it is run, as pasted, by bash -e
#   -o pipefail, with BIN_DIR first on PATH, in a scratch folder of its page
#   (the blocks of one page run in order in one folder, so a later block may
#   use what an earlier one wrote);
# - a ```sh block right after a line `<!-- not run: WHY -->` (among the HTML
#   comment lines just before it) is not run: it is listed, with its reason,
#   and counted;
# - every other block (``` or ```text) is output, a synopsis or a file: not
#   run; one that holds a command line (a line that starts with a program of
#   the project, scripts/, cmake, llama- or python and has no `[`) fails, so
#   a command is never fenced as text and silently left out.
# The scratch folder holds small stand-ins under the names the docs use:
# Qwen3.8-27B/ (a pn-synth --hf checkpoint, MTP layer included), SRC.gguf
# (a float GGUF; both of 6 layers at width scale 4, the smallest the docs'
# --promote 23 and the PN3 recipe's q4_K output take: 23 candidates),
# SOURCE.gguf with MIX1.gguf and MIX2.gguf (PN files of it) and MIX.gguf,
# my-list.txt (tensor names), my.mix (a recipe), and links to the
# checkout's recipes/ and scripts/. A block that runs pn-compare needs
# stock llama.cpp (tools/llama): without it the block is listed as skipped,
# and under PN_REQUIRE_LLAMA=1 it fails.
# And every link of a page to a file of the checkout leads to a file there.
# Prints each block's page:line and verdict, then
# "docs: N run, N failed, N not run, N skipped" and exits 1 on any failure.
set -u
root=$(cd "$(dirname "$0")/../.." && pwd)
bin=$(cd "${1:?usage: check-docs.sh BIN_DIR}" && pwd)
cd "$root"   # the pages are named from the checkout
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
ran=0 failed=0 norun=0 skipped=0
fail() { echo "FAIL: $*"; failed=$((failed + 1)); }

# 1. the blocks: NNN.meta (page, line, language, the HTML comment lines right
#    before it) and NNN.body
mkdir "$work/blocks"
n=0
for page in README.md docs/*.md recipes/README.md; do
  n=$(awk -v out="$work/blocks" -v page="$page" -v n="$n" '
    /^ *```/ {
      if (!inb) {
        inb = 1; n++; fn = sprintf("%s/%04d", out, n)
        lang = $0; sub(/^ *```/, "", lang)
        printf "%s\t%d\t%s\t%s\n", page, NR, lang, prev > (fn ".meta")
        printf "" > (fn ".body")
        close(fn ".meta")
      } else { inb = 0; close(fn ".body") }
      prev = ""; next
    }
    inb { print >> (fn ".body"); next }
    /^<!--.*-->$/ { prev = prev $0; next }
    NF { prev = "" }
    END { if (inb) printf "%s:%d: a block that is never closed\n", page, NR > "/dev/stderr"; print n }
  ' "$root/$page")
done
[ "$n" -gt 0 ] || fail "no block found in the docs"

# the pages' links to files of the checkout lead to files that are there
for page in README.md docs/*.md recipes/README.md; do
  for link in $(grep -o '](\([^)( ]*\))' "$root/$page" | sed 's/^](//; s/)$//; s/#.*//' | grep -v -e '^[a-z]*:' -e '^$' | sort -u); do
    [ -e "$root/$(dirname "$page")/$link" ] || fail "$page: a link to $link, which is not there"
  done
done

# 2. the stand-ins, made once
fx=$work/fixture
mkdir "$fx"
llama_missing=
if ! node "$bin/../share/pn-quantize/llama/pn-llama-logits.mjs" --version 2>/dev/null | grep -q llama_cpp; then
  llama_missing="stock llama.cpp (node-llama-cpp in tools/llama) does not run here; scripts/install-deps installs it"
fi
if ! (cd "$fx" &&
      "$bin/pn-synth" --quiet --hf --mtp --layers 6 --vocab 512 Qwen3.8-27B &&
      "$bin/pn-synth" --quiet --layers 6 --vocab 512 SRC.gguf &&
      "$bin/pn-synth" --quiet --layers 2 --width-scale 16 --vocab 512 SOURCE.gguf &&
      "$bin/pn-quantize" --quiet --recipe test-fallback --promote 0 SOURCE.gguf MIX1.gguf &&
      "$bin/pn-quantize" --quiet --recipe test-fallback --promote 1 SOURCE.gguf MIX2.gguf &&
      cp MIX2.gguf MIX.gguf &&
      printf '%s\n' blk.0.ffn_up.weight blk.1.ffn_gate.weight blk.3.ffn_up.weight > my-list.txt &&
      sed -e 's/^mix P0k$/mix mine/' -e 's/^\(rule output\.weight .*=>\) q4_K$/\1 q8_0/' \
          "$root/recipes/qwen3.8-27b-pn3.mix" > my.mix && grep -q 'q8_0$' my.mix &&
      ln -s "$root/recipes" recipes && ln -s "$root/scripts" scripts) >"$work/fixture.log" 2>&1; then
  fail "the stand-ins could not be made: $(tail -3 "$work/fixture.log")"
  echo "docs: $ran run, $failed failed, $norun not run, $skipped skipped"
  exit 1
fi

# 3. each block, in page order
command_line='^(pn-[a-z]+|scripts/[a-z-]+|cmake|ctest|llama-[a-z]+|python3?|tests/[a-z/-]+\.sh)( |$)'
for meta in "$work"/blocks/*.meta; do
  body=${meta%.meta}.body
  IFS=$'\t' read -r page line lang before <"$meta"
  where="$page:$line"
  if [ "$lang" != sh ]; then
    bad=$(grep -E "$command_line" "$body" | grep -v '\[' | head -1)
    [ -z "$bad" ] || fail "$where: a command in a block that is not fenced sh (never run): $bad"
    continue
  fi
  if [[ $before =~ \<!--\ not\ run:\ ([^>]*)\ --\> ]]; then
    echo "not run: $where: ${BASH_REMATCH[1]}"
    norun=$((norun + 1))
    continue
  fi
  if grep -q 'pn-compare' "$body" && [ -n "$llama_missing" ]; then
    if [ "${PN_REQUIRE_LLAMA:-0}" = 1 ]; then
      fail "$where: runs pn-compare and $llama_missing (PN_REQUIRE_LLAMA=1)"
    else
      echo "skipped: $where: runs pn-compare and $llama_missing"
      skipped=$((skipped + 1))
    fi
    continue
  fi
  dir=$work/pages/${page//\//_}
  if [ ! -d "$dir" ]; then
    mkdir -p "$work/pages" && cp -al "$fx" "$dir" \
      || { fail "$where: the page's scratch folder could not be made"; continue; }
  fi
  start=$(date +%s)
  if (cd "$dir" && PATH="$bin:$PATH" timeout 300 bash -e -o pipefail "$body") >"$body.log" 2>&1; then
    echo "ran: $where ($(($(date +%s) - start)) s)"
  else
    rc=$?
    fail "$where: exit $rc: $(tail -5 "$body.log")"
  fi
  ran=$((ran + 1))
done

echo "docs: $ran run, $failed failed, $norun not run, $skipped skipped"
[ "$ran" -gt 0 ] || { echo "FAIL: no block was run"; exit 1; }
[ "$failed" = 0 ]
