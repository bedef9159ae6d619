#!/usr/bin/env bash
# Provide the helm binary the chart tests use (test/integration/helm-chart.test.ts lints and
# renders deploy/helm/sluice). Helm is built once from its Go module into the tools cache; it is
# not a daemon, so `start` only publishes where the binary is.
#
# Usage: scripts/helm.sh install|start|stop|status
#
# Environment:
#   SLUICE_RUN_DIR    where helm.env goes (default <repo>/.run/redis; gitignored)
#   SLUICE_TOOLS_DIR  where the binary lives (default ~/.cache/sluice/tools)
#
# After `start`, $SLUICE_RUN_DIR/helm.env holds the variable the tests read:
#   SLUICE_HELM=<tools>/helm-v4.3.2/helm
set -euo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source-path=SCRIPTDIR source=lib/daemon.sh
. "$REPO_ROOT/scripts/lib/daemon.sh"
LOG_TAG=helm
RUN_DIR="${SLUICE_RUN_DIR:-$REPO_ROOT/.run/redis}"
ENV_FILE="$RUN_DIR/helm.env"
TOOLS_DIR="${SLUICE_TOOLS_DIR:-$HOME/.cache/sluice/tools}"
HELM_VERSION=v4.3.2
HELM_DIR="$TOOLS_DIR/helm-$HELM_VERSION"
HELM_BIN="$HELM_DIR/helm"

cmd_install() {
  if [[ -x "$HELM_BIN" ]]; then
    log "helm already installed: $("$HELM_BIN" version --short 2>/dev/null || echo "$HELM_BIN")"
    return 0
  fi
  command -v go >/dev/null || die "go is required to build helm (apt-get install -y golang-go)"
  mkdir -p "$HELM_DIR"
  log "building helm $HELM_VERSION into $HELM_DIR (a few minutes cold)"
  CGO_ENABLED=0 GOBIN="$HELM_DIR" go install "helm.sh/helm/v4/cmd/helm@$HELM_VERSION" </dev/null
  [[ -x "$HELM_BIN" ]] || die "go install finished but $HELM_BIN is missing"
  log "installed: $("$HELM_BIN" version --short)"
}

cmd_start() {
  [[ -x "$HELM_BIN" ]] || die "helm not found; run: bash scripts/helm.sh install"
  mkdir -p "$RUN_DIR"
  publish_env "$ENV_FILE" "helm found at $HELM_BIN" <<EOT
SLUICE_HELM=$HELM_BIN
EOT
}

cmd_stop() {
  remove_run_state "$RUN_DIR" "$ENV_FILE"
}

cmd_status() {
  if [[ -x "$HELM_BIN" ]]; then
    log "helm installed at $HELM_BIN"
    print_env_indented "$ENV_FILE"
  else
    log "helm not installed"
    return 1
  fi
}

daemon_main "$@"
