#!/usr/bin/env bash
# Provide Prometheus and promtool for the monitoring tests (test/integration/prometheus.test.ts
# checks deploy/prometheus/sluice-alerts.yaml with promtool and evaluates every query of
# deploy/grafana/sluice.json and of the alert rules on a real Prometheus scraping `sluice serve`).
# Each test starts its own Prometheus with its own configuration, so no daemon runs here:
# `start` only publishes where the binaries are.
#
# Usage: scripts/prometheus.sh install|start|stop|status
#
# Environment:
#   SLUICE_RUN_DIR  where prometheus.env goes (default <repo>/.run/redis; gitignored)
#
# After `start`, $SLUICE_RUN_DIR/prometheus.env holds the variables the tests read:
#   SLUICE_PROMETHEUS_BIN=/usr/bin/prometheus
#   SLUICE_PROMTOOL_BIN=/usr/bin/promtool
set -euo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source-path=SCRIPTDIR source=lib/daemon.sh
. "$REPO_ROOT/scripts/lib/daemon.sh"
LOG_TAG=prometheus
RUN_DIR="${SLUICE_RUN_DIR:-$REPO_ROOT/.run/redis}"
ENV_FILE="$RUN_DIR/prometheus.env"

# Both binaries on PATH (Debian's `prometheus` package ships both), one path a line.
binaries() {
  command -v prometheus 2>/dev/null && command -v promtool 2>/dev/null
}

cmd_install() {
  if binaries >/dev/null; then
    log "prometheus already installed: $(prometheus --version 2>&1 | head -n 1)"
    return 0
  fi
  command -v apt-get >/dev/null || die "prometheus or promtool not found and apt-get is unavailable; install Prometheus >= 2.42 (with promtool) manually"
  apt_install prometheus "prometheus and promtool" prometheus
  binaries >/dev/null || die "apt-get finished but prometheus or promtool is still not on PATH"
  log "installed: $(prometheus --version 2>&1 | head -n 1)"
}

cmd_start() {
  local paths
  paths="$(binaries)" || die "prometheus or promtool not found; run: bash scripts/prometheus.sh install"
  mkdir -p "$RUN_DIR"
  publish_env "$ENV_FILE" "prometheus found" <<EOT
SLUICE_PROMETHEUS_BIN=$(sed -n 1p <<<"$paths")
SLUICE_PROMTOOL_BIN=$(sed -n 2p <<<"$paths")
EOT
}

cmd_stop() {
  remove_run_state "$RUN_DIR" "$ENV_FILE"
  log "stopped"
}

cmd_status() {
  if binaries >/dev/null; then
    echo "prometheus at $(command -v prometheus), promtool at $(command -v promtool)"
  else
    echo "prometheus not installed (run: bash scripts/prometheus.sh install)"
  fi
  print_env_indented "$ENV_FILE"
}

daemon_main "$@"
