#!/usr/bin/env bash
# run-fuzz.sh BUILD_DIR [SECONDS] [LIBFUZZER_ARGS...]
#
# Fuzzes the GGUF reader for SECONDS (default 60), starting from a copy of the
# seed corpus in tests/data/gguf-corpus/ (the committed corpus is never
# changed). Exits non-zero on any crash, sanitizer report, timeout or
# out-of-memory; the input that caused it is kept in BUILD_DIR/fuzz-artifacts/.
#
# BUILD_DIR must be configured for fuzzing, e.g.
#   cmake -S . -B build-fuzz -DCMAKE_C_COMPILER=clang -DPN_FUZZ=ON -DPN_SANITIZE=ON -DPN_TESTS=OFF
# The target is (re)built here first.
set -euo pipefail

if [ $# -lt 1 ]; then
    echo "usage: $0 BUILD_DIR [SECONDS] [LIBFUZZER_ARGS...]" >&2
    exit 2
fi
build=$1
seconds=${2:-60}
shift $(( $# >= 2 ? 2 : 1 ))
here=$(cd "$(dirname "$0")" && pwd)
source_dir=$(cd "$here/../.." && pwd)

cmake --build "$build" --target fuzz_gguf_reader >/dev/null
exe="$build/tests/fuzz/fuzz_gguf_reader"

work=$(mktemp -d "${TMPDIR:-/tmp}/pn-fuzz-XXXXXX")
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/corpus" "$build/fuzz-artifacts"
cp "$source_dir"/tests/data/gguf-corpus/* "$work/corpus/"

set +e
"$exe" "$work/corpus" \
    -dict="$here/gguf.dict" \
    -max_total_time="$seconds" \
    -max_len=8192 \
    -timeout=10 \
    -rss_limit_mb=2048 \
    -artifact_prefix="$build/fuzz-artifacts/" \
    -print_final_stats=1 \
    "$@"
rc=$?
set -e
if [ $rc -ne 0 ]; then
    echo "run-fuzz.sh: the fuzzer found a problem (exit $rc); see $build/fuzz-artifacts/" >&2
    exit 1
fi
echo "run-fuzz.sh: no finding in ${seconds}s"
