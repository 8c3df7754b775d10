#!/usr/bin/env bash
# Runs each fuzz target for a number of executions (default 10^6) on its committed corpus,
# with libFuzzer through libfuzzer-sys. Needs a nightly toolchain (`rustup toolchain
# install nightly`); uses `cargo fuzz` when installed, else the same build by hand.
#   fuzz/run.sh [RUNS] [TARGET...]
set -euo pipefail
cd "$(dirname "$0")"
runs=${1:-1000000}
shift || true
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
    targets=(artifact_reader checkpoint_config tokenizer_json prompt_ids chat_prompt gguf_reader chat_template http_request json_schema request_body)
fi
# What cargo-fuzz passes: SanitizerCoverage for libFuzzer's feedback, `--cfg fuzzing`.
export RUSTFLAGS="${RUSTFLAGS:-} -Cpasses=sancov-module -Cllvm-args=-sanitizer-coverage-level=4 \
 -Cllvm-args=-sanitizer-coverage-inline-8bit-counters -Cllvm-args=-sanitizer-coverage-pc-table \
 -Cllvm-args=-sanitizer-coverage-trace-compares --cfg fuzzing -Cdebug-assertions -Coverflow-checks"
# An explicit --target keeps the flags off build scripts and proc macros (as cargo-fuzz does).
triple=$(rustc +nightly -vV | sed -n 's/^host: //p')
cargo +nightly build --release --bins --target "$triple"
for t in "${targets[@]}"; do
    mkdir -p "corpus/$t" "artifacts/$t"
    # Interesting new inputs go to a scratch folder: the committed corpus stays small
    # (minimise with `-merge=1` before committing additions).
    scratch=$(mktemp -d)
    echo "== $t: $runs runs"
    ./target/"$triple"/release/"$t" -runs="$runs" -max_len=65536 -timeout=10 -rss_limit_mb=4096 \
        -artifact_prefix="artifacts/$t/" -print_final_stats=1 "$scratch" "corpus/$t" 2>&1 |
        grep -E "^(#[0-9]+ *DONE|Done|stat::number_of_executed_units|stat::average_exec_per_sec|stat::peak_rss_mb|==[0-9]+== ERROR|SUMMARY)" || true
    rm -rf "$scratch"
done
