#!/usr/bin/env bash
# The whole test suite: formatting, lints, unit, integration and doc tests.
# Everything the tests need is built by cargo; no service has to run yet.
set -euo pipefail
cd "$(dirname "$0")/.."

cargo fmt --all -- --check
cargo clippy --all-targets --locked -- -D warnings

log=$(mktemp)
trap 'rm -f "$log"' EXIT
cargo test --locked 2>&1 | tee "$log"

# One closing line over every test binary (cargo prints one line per binary).
awk '/^test result:/ { for (i = 1; i <= NF; i++) { if ($(i+1) ~ /^passed/) p += $i; if ($(i+1) ~ /^failed/) f += $i; if ($(i+1) ~ /^ignored/) s += $i } }
     END { printf "\ntests: %d passed, %d failed, %d skipped\n", p, f, s }' "$log"
