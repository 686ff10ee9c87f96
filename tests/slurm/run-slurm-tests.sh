#!/usr/bin/env bash
# tests/slurm/run-slurm-tests.sh [BUILD]: scripts/slurm-quantize on a real
# Slurm. Uses the cluster that sinfo reaches (SLURM_CONF, as
# `eval "$(scripts/slurm-local start)"` sets it); without one it installs
# slurm-wlm and munge where it can (root, apt-get), starts a local one
# (scripts/slurm-local, 127.0.0.1 only) and stops it at the end.
#
# Checks, on a tiny pn-synth model:
#   1. the array's set equals one pn-quantize run, byte for byte (cmp of
#      each split), and the times of both;
#   2. a second run (--promote 5 --force) whose third task fails: the check
#      job says INCOMPLETE naming that index; the folder holds 4 new splits
#      and the old third one, and pn-check, pn-dequant and --reuse refuse
#      that mixed set naming the old file; --repair reruns just that index
#      (its file exists: --force) and the set is whole: one run's, byte for
#      byte;
#   3. the quick recipe of docs/split.md, run as pasted: one split (DST
#      itself), equal to one run;
#   4. --measure kl spread over an array of 3 measurement tasks: the parts
#      join into the file one process measures (cmp), and the set equals
#      one run with that measurement (needs stock llama.cpp on the node:
#      skipped without it unless PN_REQUIRE_LLAMA=1).
# Skipped, with a message, only where Slurm cannot be installed; with
# PN_REQUIRE_SLURM=1 (CI) that is a failure.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=$(cd "${1:-$root/build}" && pwd)
bin=$build/bin
S=$root/scripts/slurm-quantize
fail() { echo "slurm tests: FAIL: $*" >&2; exit 1; }
skip() {
  [ "${PN_REQUIRE_SLURM:-0}" = 1 ] && fail "$* (PN_REQUIRE_SLURM=1: the Slurm tests must run)"
  echo "slurm tests: SKIPPED: $*" >&2
  exit 0
}
pass() { echo "slurm tests: PASS: $*"; }
for p in pn-synth pn-quantize pn-check pn-dequant; do
  [ -x "$bin/$p" ] || fail "$bin/$p: not built (build first: cmake --build $build)"
done

tmp=$(mktemp -d /tmp/pn-slurm-tests.XXXXXX)
started=0
cleanup() {
  if [ "$started" = 1 ]; then "$root/scripts/slurm-local" stop || true; fi
  rm -rf "$tmp"
}
trap cleanup EXIT
if ! sinfo -h >/dev/null 2>&1; then
  "$root/scripts/slurm-local" install || skip "Slurm (slurm-wlm, munge) is not installed and cannot be installed here"
  export PN_SLURM_DIR=$tmp/slurm
  out=$("$root/scripts/slurm-local" start) || fail "the local Slurm did not start"
  eval "$out"
  started=1
fi
echo "slurm tests: cluster: $(sinfo -h -o '%P %D nodes, %c CPUs, %m MB' | head -1)"

cd "$tmp"
now() { date +%s.%N; }
secs() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.1f", b - a }'; }
"$bin/pn-synth" --quiet --layers 4 --width-scale 16 --vocab 2048 src.gguf
R=$root/recipes/test-fallback.mix
Q=(--recipe "$R" --split-max-tensors 12)
RES=(--cpus 2 --mem 500M --time 00:10:00)
split() { printf '%s-%05d-of-00005.gguf' "$1" "$2"; }

# ---- 1. the set equals one run --------------------------------------------
t0=$(now)
"$S" "${RES[@]}" --wait "${Q[@]}" src.gguf a/m.gguf > run1.log 2>&1 \
  || { cat run1.log; fail "1: the array run did not end VALID"; }
t1=$(now)
grep -q '^VALID' run1.log || { cat run1.log; fail "1: no VALID verdict"; }
mkdir ref1
t2=$(now)
"$bin/pn-quantize" --quiet --backend cpu --threads 2 "${Q[@]}" src.gguf ref1/m.gguf 2>/dev/null \
  || fail "1: the single run failed"
t3=$(now)
[ "$(ls a/m-*-of-00005.gguf | wc -l)" = 5 ] || fail "1: expected 5 splits, found: $(ls a)"
for s in 1 2 3 4 5; do
  cmp "$(split a/m "$s")" "$(split ref1/m "$s")" || fail "1: split $s differs from the single run's"
done
# CPU tasks run --backend cpu: no CUDA line in their logs
if grep -l 'no usable GPU' a/m.slurm/logs/*; then fail "1: a CPU task printed the CUDA line"; fi
pass "1: the array's 5 splits equal one pn-quantize run byte for byte (cmp); submit to verdict $(secs "$t0" "$t1") s (5 tasks, 2 CPUs each, and the check job), single run $(secs "$t2" "$t3") s"

# ---- a request no node can meet is refused before anything is submitted ----
if "$S" --cpus 4096 "${Q[@]}" src.gguf big/m.gguf > big.log 2>&1; then fail "--cpus 4096 was submitted"; fi
grep -q -- '--cpus 4096: the largest node has' big.log || { cat big.log; fail "--cpus 4096: no reason given"; }
[ ! -e big/m.slurm/jobs.sh ] || fail "--cpus 4096: a job was submitted"
pass "--cpus above every node's CPUs is refused before submitting, naming the largest node"

# ---- 2. a failed task, the mixed set, the repair ----------------------------
cp "$(split a/m 3)" old3.gguf
if PN_SLURM_TEST_FAIL=2 "$S" "${RES[@]}" --wait --force "${Q[@]}" --promote 5 src.gguf a/m.gguf \
     > run2.log 2>&1; then
  cat run2.log; fail "2: a set with a failed task was judged VALID"
fi
grep -q '^INCOMPLETE: split index(es) 2 of 0-4 failed' run2.log \
  || { cat run2.log; fail "2: the verdict does not name the failed index 2"; }
"$S" --status a/m.gguf > status.txt 2>&1 || { cat status.txt; fail "2: --status failed"; }
grep -q 'not done (failed, running or pending): 2 ' status.txt \
  || { cat status.txt; fail "2: --status does not list index 2"; }
cmp -s "$(split a/m 3)" old3.gguf || fail "2: the old third split should still be there"
# the issue's hole: 4 new splits and 1 old one
set +e
"$bin/pn-check" "$(split a/m 1)" > check.txt 2>&1; rc=$?
set -e
[ "$rc" = 1 ] || { cat check.txt; fail "2: pn-check exit $rc on the mixed set, expected 1"; }
grep -q "SPLIT-MIXED file $(split a/m 3):" check.txt || { cat check.txt; fail "2: pn-check does not name the old split"; }
for cmd in "$bin/pn-dequant --threads 2 $(split a/m 2) out.gguf" \
           "$bin/pn-quantize --quiet --backend cpu --recipe $R --reuse $(split a/m 1) src.gguf out.gguf"; do
  if $cmd > refuse.txt 2>&1; then fail "2: accepted the mixed set: $cmd"; fi
  grep -q "$(split a/m 3): this split is from another run" refuse.txt \
    || { cat refuse.txt; fail "2: the refusal does not name the old split: $cmd"; }
  [ ! -e out.gguf ] || fail "2: $cmd wrote out.gguf"
done
pass "2: the failed task is reported (INCOMPLETE, index 2); the mixed set (4 new splits, 1 old) is refused by pn-check, pn-dequant and --reuse naming $(split m 3)"
t0=$(now)
"$S" --repair --wait a/m.gguf > repair.log 2>&1 || { cat repair.log; fail "2: the repair did not end VALID"; }
t1=$(now)
mkdir ref2
"$bin/pn-quantize" --quiet --backend cpu --threads 2 "${Q[@]}" --promote 5 src.gguf ref2/m.gguf 2>/dev/null
for s in 1 2 3 4 5; do
  cmp "$(split a/m "$s")" "$(split ref2/m "$s")" || fail "2: after the repair, split $s differs from one run's"
done
pass "2: --repair reran index 2 alone (its old file replaced) in $(secs "$t0" "$t1") s; the set equals one --promote 5 run byte for byte"

# ---- 3. docs/split.md's quick recipe, as pasted -----------------------------
mkdir doc doc/models
ln -s "$root/scripts" doc/scripts
ln -s "$build" doc/build
"$bin/pn-synth" --quiet --layers 2 --width-scale 4 --vocab 2048 doc/models/MODEL-BF16.gguf
awk '/<!-- tested: slurm quick recipe -->/ { want = 1; next }
     want && /^```sh$/ { inside = 1; next }
     inside && /^```$/ { exit }
     inside { print }' "$root/docs/split.md" > doc/recipe.sh
[ -s doc/recipe.sh ] || fail "3: no quick recipe block in docs/split.md"
(cd doc && bash -e recipe.sh) > doc.log 2>&1 || { cat doc/recipe.sh doc.log; fail "3: the quick recipe failed as pasted"; }
grep -q '^VALID' doc.log || { cat doc.log; fail "3: the quick recipe gave no VALID verdict"; }
[ -f doc/out/MODEL-PN3.gguf ] || fail "3: one split: DST itself should be written"
ls doc/out | grep -q -- '-of-' && fail "3: one split written as a split name: $(ls doc/out)"
"$bin/pn-quantize" --quiet --backend cpu --threads 2 --split-max-size 8G doc/models/MODEL-BF16.gguf one.gguf 2>/dev/null
cmp doc/out/MODEL-PN3.gguf one.gguf || fail "3: the one-split set differs from one run"
pass "3: docs/split.md's quick recipe ran as pasted: one split (DST itself), equal to one run"
# ---- 4. the KL measurement as an array job ---------------------------------
if [ ! -f "$root/tools/llama/node_modules/node-llama-cpp/package.json" ]; then
  [ "${PN_REQUIRE_LLAMA:-0}" = 1 ] && fail "4: stock llama.cpp is not installed (scripts/install-deps)"
  echo "slurm tests: 4 SKIPPED: stock llama.cpp is not installed (scripts/install-deps)"
else
  KL=(--measure kl --calibration /usr/share/common-licenses/GPL-3 --seq-len 8 --max-seqs 2)
  t0=$(now)
  "$S" "${RES[@]}" --wait --measure-tasks 3 "${Q[@]}" "${KL[@]}" --promote 2 src.gguf k/m.gguf \
    > run4.log 2>&1 || { cat run4.log k/m.slurm/logs/* 2>/dev/null; fail "4: the measured array run did not end VALID"; }
  t1=$(now)
  grep -q '^VALID' run4.log || { cat run4.log; fail "4: no VALID verdict"; }
  for i in 1 2 3; do
    [ -f "k/m.slurm/measurement.kl.part-0000$i-of-00003" ] || fail "4: part $i of the measurement is missing: $(ls k/m.slurm)"
  done
  "$bin/pn-quantize" --quiet --recipe "$R" --threads 2 "${KL[@]}" --measurement one.kl --dry-run src.gguf \
    > /dev/null 2>&1 || fail "4: the one-process measurement failed"
  cmp one.kl k/m.slurm/measurement.kl || fail "4: the joined parts differ from one process's measurement"
  mkdir ref4
  "$bin/pn-quantize" --quiet --backend cpu --threads 2 "${Q[@]}" "${KL[@]}" --measurement one.kl --promote 2 \
    src.gguf ref4/m.gguf 2>/dev/null || fail "4: the single run failed"
  for s in 1 2 3 4 5; do
    cmp "$(split k/m "$s")" "$(split ref4/m "$s")" || fail "4: split $s differs from one run's"
  done
  pass "4: --measure kl in 3 array tasks: the parts join into one process's measurement (cmp) and the set equals one run; submit to verdict $(secs "$t0" "$t1") s"
fi
echo "slurm tests: all passed"
