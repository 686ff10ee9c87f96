#!/usr/bin/env bash
# run-fuzz.sh BUILD_DIR [SECONDS] [LIBFUZZER_ARGS...]
#
# Fuzzes a reader for SECONDS (default 60), starting from a copy of its seed
# corpus (the committed corpus is never changed). FUZZ_TARGET picks it:
#   gguf (default)  fuzz_gguf_reader, corpus tests/data/gguf-corpus/ and a whole
#                   qwen35 model with its tokenizer (the converter's golden output)
#   recipe          fuzz_recipe,      corpus tests/data/recipe-corpus/
#   pn_blocks       fuzz_pn_blocks,   corpus tests/data/golden/pn*.out.bin
#   safetensors     fuzz_safetensors_header, corpus tests/data/hf-qwen35-tiny/hf/*.safetensors
#   hf_config       fuzz_hf_config,   corpus tests/data/hf-qwen35-tiny/hf/config.json
#   hf_tokenizer    fuzz_hf_tokenizer, corpus tests/data/hf-qwen35-tiny/hf/tokenizer.json
#   hf_index        fuzz_hf_index,    corpus tests/data/hf-qwen35-tiny/hf/model.safetensors.index.json
#   imatrix         fuzz_imatrix_dat, corpus tests/data/imatrix-corpus/*.dat
#   kl              fuzz_kl_file,     corpus tests/data/kl-corpus/*.kl
# Exits non-zero on any crash, sanitizer report, timeout or
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

target=${FUZZ_TARGET:-gguf}
case $target in
    gguf) exe_name=fuzz_gguf_reader; seeds=("$source_dir"/tests/data/gguf-corpus/* "$source_dir"/tests/data/hf-qwen35-tiny/converted.bf16.no-mtp.gguf); dict=(-dict="$here/gguf.dict") ;;
    recipe) exe_name=fuzz_recipe; seeds=("$source_dir"/tests/data/recipe-corpus/*); dict=() ;;
    pn_blocks) exe_name=fuzz_pn_blocks; seeds=("$source_dir"/tests/data/golden/pn3t.out.bin "$source_dir"/tests/data/golden/pn4t.out.bin); dict=() ;;
    safetensors) exe_name=fuzz_safetensors_header; seeds=("$source_dir"/tests/data/hf-qwen35-tiny/hf/*.safetensors); dict=() ;;
    hf_config) exe_name=fuzz_hf_config; seeds=("$source_dir"/tests/data/hf-qwen35-tiny/hf/config.json); dict=() ;;
    hf_tokenizer) exe_name=fuzz_hf_tokenizer; seeds=("$source_dir"/tests/data/hf-qwen35-tiny/hf/tokenizer.json); dict=() ;;
    hf_index) exe_name=fuzz_hf_index; seeds=("$source_dir"/tests/data/hf-qwen35-tiny/hf/model.safetensors.index.json); dict=() ;;
    imatrix) exe_name=fuzz_imatrix_dat; seeds=("$source_dir"/tests/data/imatrix-corpus/*.dat); dict=() ;;
    kl) exe_name=fuzz_kl_file; seeds=("$source_dir"/tests/data/kl-corpus/*.kl); dict=() ;;
    *) echo "run-fuzz.sh: unknown FUZZ_TARGET '$target' (gguf, recipe, pn_blocks, safetensors, hf_config, hf_tokenizer, hf_index, imatrix, kl)" >&2; exit 2 ;;
esac
cmake --build "$build" --target "$exe_name" >/dev/null
exe="$build/tests/fuzz/$exe_name"

work=$(mktemp -d "${TMPDIR:-/tmp}/pn-fuzz-XXXXXX")
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/corpus" "$build/fuzz-artifacts"
cp "${seeds[@]}" "$work/corpus/"

set +e
"$exe" "$work/corpus" \
    ${dict[@]+"${dict[@]}"} \
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
echo "run-fuzz.sh: $exe_name: no finding in ${seconds}s"
