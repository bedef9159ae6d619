#!/usr/bin/env bash
# Provide the OpenTelemetry Collector the OTLP tests send to (test/integration/otel.test.ts runs
# `sluice serve` with its OTLP settings pointed at a collector and reads what the collector
# forwards). The collector is built once with the collector's own builder (ocb) from the Go
# module proxy, with just the pieces the tests use: the OTLP receiver and the OTLP/HTTP exporter
# (which the tests set to JSON). Each test starts its own collector with its own pipeline, so no
# daemon runs here: `start` only publishes where the binary is.
#
# Usage: scripts/otelcol.sh install|start|stop|status
#
# Environment:
#   SLUICE_RUN_DIR         where otelcol.env goes (default <repo>/.run/redis; gitignored)
#   SLUICE_OTELCOL_CACHE   where the binary is built (default ~/.cache/sluice-otel)
#
# After `start`, $SLUICE_RUN_DIR/otelcol.env holds the variable the tests read:
#   SLUICE_OTELCOL_BIN=<cache>/otelcol-v0.165.0/sluice-otelcol
set -euo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source-path=SCRIPTDIR source=lib/daemon.sh
. "$REPO_ROOT/scripts/lib/daemon.sh"
LOG_TAG=otelcol
RUN_DIR="${SLUICE_RUN_DIR:-$REPO_ROOT/.run/redis}"
ENV_FILE="$RUN_DIR/otelcol.env"
CACHE_DIR="${SLUICE_OTELCOL_CACHE:-$HOME/.cache/sluice-otel}"
# The builder and the components are released together, under one version.
OTELCOL_VERSION=v0.165.0
BUILD_DIR="$CACHE_DIR/otelcol-$OTELCOL_VERSION"
OTELCOL_BIN="$BUILD_DIR/sluice-otelcol"

cmd_install() {
  if [[ -x "$OTELCOL_BIN" ]]; then
    log "collector already built: $OTELCOL_BIN"
    return 0
  fi
  command -v go >/dev/null || die "go is required to build the collector (apt-get install -y golang-go)"
  mkdir -p "$BUILD_DIR"
  log "building the collector $OTELCOL_VERSION into $BUILD_DIR (about 5 minutes cold)"
  CGO_ENABLED=0 GOBIN="$BUILD_DIR/bin" go install "go.opentelemetry.io/collector/cmd/builder@$OTELCOL_VERSION" </dev/null
  cat >"$BUILD_DIR/manifest.yaml" <<EOT
dist:
  name: sluice-otelcol
  description: OpenTelemetry Collector for Sluice's tests (OTLP in, OTLP/HTTP out)
  output_path: $BUILD_DIR/src
receivers:
  - gomod: go.opentelemetry.io/collector/receiver/otlpreceiver $OTELCOL_VERSION
exporters:
  - gomod: go.opentelemetry.io/collector/exporter/otlphttpexporter $OTELCOL_VERSION
EOT
  CGO_ENABLED=0 "$BUILD_DIR/bin/builder" --config "$BUILD_DIR/manifest.yaml" </dev/null
  mv "$BUILD_DIR/src/sluice-otelcol" "$OTELCOL_BIN"
  [[ -x "$OTELCOL_BIN" ]] || die "the builder finished but $OTELCOL_BIN is missing"
  rm -rf "$BUILD_DIR/src" "$BUILD_DIR/bin"
  log "built: $OTELCOL_BIN"
}

cmd_start() {
  [[ -x "$OTELCOL_BIN" ]] || die "collector not built; run: bash scripts/otelcol.sh install"
  mkdir -p "$RUN_DIR"
  publish_env "$ENV_FILE" "collector found at $OTELCOL_BIN" <<EOT
SLUICE_OTELCOL_BIN=$OTELCOL_BIN
EOT
}

cmd_stop() {
  remove_run_state "$RUN_DIR" "$ENV_FILE"
}

cmd_status() {
  if [[ -x "$OTELCOL_BIN" ]]; then
    log "collector built at $OTELCOL_BIN"
    print_env_indented "$ENV_FILE"
  else
    log "collector not built"
    return 1
  fi
}

daemon_main "$@"
