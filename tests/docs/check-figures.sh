#!/usr/bin/env bash
# The figures of README.md, docs/*.md and recipes/README.md come from the
# scripts their markers name (docs/layout.md, "Commands and figures in the
# docs").
#   tests/docs/check-figures.sh BIN_DIR
# - `<!-- made by docs/figures.sh NAME -->` before a fenced block or a table:
#   the block is exactly what `docs/figures.sh NAME` prints now, for the
#   demo model (each NAME run once, its output diffed with the block);
# - `<!-- measured by PATH: MACHINE -->` before a block, table or paragraph
#   of timings or llama.cpp figures: PATH is a script or a bench program's
#   source in the tree and a machine is named; when PATH is docs/figures.sh
#   NAME, NAME is rerun (QUICK=1: a smaller model for pn-compare) and its
#   output has the block's shape: the same lines with every number masked;
#   one that runs pn-compare is skipped, and listed, when stock llama.cpp
#   is missing (it fails under PN_REQUIRE_LLAMA=1).
# Prints each marker's page:line and verdict, then
# "figures: N passed, N failed, N skipped" and exits 1 on any failure.
set -u
root=$(cd "$(dirname "$0")/../.." && pwd)
bin=$(cd "${1:?usage: check-figures.sh BIN_DIR}" && pwd)
cd "$root"   # the pages are named from the checkout
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
passed=0 failed=0 skipped=0
ok() { echo "ok: $*"; passed=$((passed + 1)); }
bad() { echo "FAIL: $*"; failed=$((failed + 1)); }
llama_missing=
if ! node "$bin/../share/pn-quantize/llama/pn-llama-logits.mjs" --version 2>/dev/null | grep -q llama_cpp; then
  llama_missing="stock llama.cpp (node-llama-cpp in tools/llama) does not run here"
fi

# the block after each marker: NNNN.meta (page, line, kind, what) and NNNN.body
# (a fenced block's lines, or a table's, or a paragraph's)
mkdir "$work/marks"
n=0
for page in README.md docs/*.md recipes/README.md; do
  n=$(awk -v out="$work/marks" -v page="$page" -v n="$n" '
    function done_block() { if (state) close(fn ".body"); state = 0 }
    state == 0 && match($0, /^<!-- (made|measured) by [^ ]+( [a-z0-9-]+)?(: [^>]*)? -->$/) {
      n++; fn = sprintf("%s/%04d", out, n)
      kind = ($0 ~ /^<!-- made/) ? "made" : "measured"
      what = $0; sub(/^<!-- (made|measured) by /, "", what); sub(/ -->$/, "", what)
      printf "%s\t%d\t%s\t%s\n", page, NR, kind, what > (fn ".meta"); close(fn ".meta")
      printf "" > (fn ".body"); state = 1; next
    }
    state == 1 && /^```/ { state = 2; next }            # a fenced block
    state == 1 && NF { state = 3 }                       # a table or a paragraph
    state == 2 && /^```/ { done_block(); next }
    state == 2 { print >> (fn ".body"); next }
    state == 3 && !NF { done_block(); next }
    state == 3 { print >> (fn ".body"); next }
    END { done_block(); print n }
  ' "$root/$page")
done
[ "$n" -gt 0 ] || bad "no figure marker found in the docs"

mask() { sed -E 's/[0-9]+([.,][0-9]+)*(e[+-]?[0-9]+)?/#/g; s/[[:space:]]+/ /g; s/ $//'; }
fig=$work/figures
mkdir "$fig"
for meta in "$work"/marks/*.meta; do
  body=${meta%.meta}.body
  IFS=$'\t' read -r page line kind what <"$meta"
  where="$page:$line"
  [ -s "$body" ] || { bad "$where: the marker is followed by no block"; continue; }
  path=${what%%[ :]*}
  rest=${what#"$path"}
  args=${rest%%:*}
  args=${args# }
  machine=${rest#*:}
  [ "$machine" != "$rest" ] || machine=
  if [ "$kind" = made ]; then
    if [ "$path" != docs/figures.sh ] || [ -z "$args" ]; then
      bad "$where: 'made by' names '$what', not docs/figures.sh NAME"
      continue
    fi
    if [ ! -f "$fig/$args.out" ]; then
      (cd "$root" && BIN="$bin" WORK="$fig/work" docs/figures.sh "$args") \
        >"$fig/$args.out" 2>"$fig/$args.err" || echo "exit $?" >>"$fig/$args.err"
    fi
    if [ -s "$fig/$args.err" ]; then
      bad "$where: docs/figures.sh $args failed: $(tail -3 "$fig/$args.err")"
    elif diff "$fig/$args.out" "$body" >"$fig/$args.diff"; then
      ok "$where: docs/figures.sh $args prints the block"
    else
      bad "$where: the block is not what docs/figures.sh $args prints (< the script, > the doc):"
      cat "$fig/$args.diff"
    fi
    continue
  fi
  # measured
  if [ ! -e "$root/$path" ]; then bad "$where: '$path' is not in the tree"; continue; fi
  case $path in
    *.c) ;;
    *) [ -x "$root/$path" ] || { bad "$where: '$path' is not executable"; continue; } ;;
  esac
  [ -n "${machine// /}" ] || { bad "$where: no machine named after '$path:'"; continue; }
  if [ "$path" != docs/figures.sh ]; then ok "$where: measured by $path, on$machine"; continue; fi
  if [ "$args" = compare ] && [ -n "$llama_missing" ]; then
    if [ "${PN_REQUIRE_LLAMA:-0}" = 1 ]; then bad "$where: $llama_missing (PN_REQUIRE_LLAMA=1)"
    else echo "skipped: $where: docs/figures.sh compare: $llama_missing"; skipped=$((skipped + 1)); fi
    continue
  fi
  # the demo model made once (in the made figures' folder), the 2-layer
  # model of QUICK=1 in its own
  quick=0 shape_work=$fig/work
  [ "$args" = compare ] && quick=1 shape_work=$fig/shape-$args
  if ! (cd "$root" && QUICK=$quick BIN="$bin" WORK="$shape_work" docs/figures.sh "$args") \
         >"$fig/shape-$args.out" 2>"$fig/shape-$args.err"; then
    bad "$where: docs/figures.sh $args failed: $(tail -3 "$fig/shape-$args.err")"
  elif diff <(mask <"$fig/shape-$args.out") <(mask <"$body") >"$fig/shape-$args.diff"; then
    ok "$where: docs/figures.sh $args prints a block of this shape"
  else
    bad "$where: docs/figures.sh $args prints another shape (numbers masked; < the script, > the doc):"
    cat "$fig/shape-$args.diff"
  fi
done

echo "figures: $passed passed, $failed failed, $skipped skipped"
[ "$failed" = 0 ]
