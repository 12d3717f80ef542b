#!/usr/bin/env bash
# Runs every test of the workspace, after installing whatever this machine lacks.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
. scripts/setup.sh

# Doc examples first, so the closing summary below is the one of the whole suite.
cargo test --workspace --locked --doc --quiet "$@"

if cargo nextest --version >/dev/null 2>&1; then
  cargo nextest run --workspace --locked --no-fail-fast "$@"
else
  # Without nextest: plain cargo test, then one closing line that sums every test binary.
  log="$(mktemp)"
  trap 'rm -f "$log"' EXIT
  status=0
  cargo test --workspace --locked --lib --bins --tests --no-fail-fast "$@" 2>&1 | tee "$log" || status=$?
  awk '/^test result:/ { for (i = 1; i <= NF; i++) { if ($(i+1) ~ /^passed/) p += $i; if ($(i+1) ~ /^failed/) f += $i } }
       END { printf "cargo test: %d passed, %d failed\n", p, f }' "$log"
  exit "$status"
fi
