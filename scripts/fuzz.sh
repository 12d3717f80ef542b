#!/usr/bin/env bash
# Runs each fuzz target (fuzz/fuzz_targets) under libFuzzer for a bounded time and prints one
# line per target: executions, and crashes (a crash stops that target and keeps its input in
# fuzz/artifacts/<target>/). Exits non-zero if any target crashed.
#
#   scripts/fuzz.sh                      every target, 60 s each
#   FUZZ_SECONDS=300 scripts/fuzz.sh yaml_body json_patch
#
# cargo-fuzz is not needed: the targets are built as it builds them (nightly, coverage
# instrumentation, `--cfg fuzzing`), without AddressSanitizer (the code under test has no
# unsafe; panics, overflows and stack overflows are what is looked for). Corpora grow in
# fuzz/corpus/<target>/ from run to run.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../fuzz"

seconds="${FUZZ_SECONDS:-60}"
if [ "$#" -gt 0 ]; then
  targets=("$@")
else
  mapfile -t targets < <(sed -n 's/^name = "\(.*\)"$/\1/p' Cargo.toml | grep -v '^numaresources-fuzz$')
fi

export RUSTFLAGS="-Cpasses=sancov-module -Cllvm-args=-sanitizer-coverage-level=4 \
-Cllvm-args=-sanitizer-coverage-inline-8bit-counters -Cllvm-args=-sanitizer-coverage-pc-table \
-Cllvm-args=-sanitizer-coverage-trace-compares --cfg fuzzing -Cdebug-assertions -Coverflow-checks"
# An explicit --target keeps the instrumentation off build scripts (they run on the host).
triple="$(rustc +nightly -vV | sed -n 's/^host: //p')"
cargo +nightly build --release --bins --quiet --target "$triple"

status=0
summary=()
for target in "${targets[@]}"; do
  mkdir -p "corpus/$target" "artifacts/$target"
  log="$(mktemp)"
  if ./target/"$triple"/release/"$target" -max_total_time="$seconds" -print_final_stats=1 -rss_limit_mb=2048 \
      -artifact_prefix="artifacts/$target/" "corpus/$target" >"$log" 2>&1; then
    crashes=0
  else
    crashes=1
    status=1
    tail -40 "$log" >&2
  fi
  runs="$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)"
  summary+=("$target: ${runs:-?} executions in ${seconds} s, ${crashes} crashes")
  rm -f "$log"
done
printf '%s\n' "${summary[@]}"
exit "$status"
