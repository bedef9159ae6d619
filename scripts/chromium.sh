#!/usr/bin/env bash
# Provide the headless Chromium the dashboard browser tests drive (through playwright-core,
# which downloads no browser of its own). Chromium is not a daemon: each test launches and
# closes its own browser, so `start` only publishes where the binary is.
#
# Usage: scripts/chromium.sh install|start|stop|status
#
# Environment:
#   SLUICE_RUN_DIR  where chromium.env goes (default <repo>/.run/redis; gitignored)
#
# After `start`, $SLUICE_RUN_DIR/chromium.env holds the variable the tests read:
#   SLUICE_CHROMIUM_PATH=/usr/bin/chromium
set -euo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source-path=SCRIPTDIR source=lib/daemon.sh
. "$REPO_ROOT/scripts/lib/daemon.sh"
LOG_TAG=chromium
RUN_DIR="${SLUICE_RUN_DIR:-$REPO_ROOT/.run/redis}"
ENV_FILE="$RUN_DIR/chromium.env"

# The Chromium binary on PATH, if any (Debian calls it chromium, Ubuntu chromium-browser).
chromium_path() {
  command -v chromium 2>/dev/null || command -v chromium-browser 2>/dev/null
}

cmd_install() {
  local path sudo=()
  if path="$(chromium_path)"; then
    log "chromium already installed: $("$path" --version 2>/dev/null || echo "$path")"
    return 0
  fi
  command -v apt-get >/dev/null || die "chromium not found and apt-get is unavailable; install Chromium manually"
  if [[ "$(id -u)" -ne 0 ]]; then
    command -v sudo >/dev/null || die "need root or sudo to install chromium"
    sudo=(sudo)
  fi
  # Refresh the package lists only when apt does not know the package yet (a fresh image).
  if ! apt-cache policy chromium 2>/dev/null | grep -q 'Candidate: [0-9]'; then
    log "chromium unknown to apt; running apt-get update"
    "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=300 update </dev/null
  fi
  log "installing chromium via apt-get"
  "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive \
    apt-get -o DPkg::Lock::Timeout=300 install -y chromium </dev/null
  path="$(chromium_path)" || die "apt-get finished but chromium is still not on PATH"
  log "installed: $("$path" --version 2>/dev/null || echo "$path")"
}

cmd_start() {
  local path
  path="$(chromium_path)" || die "chromium not found; run: bash scripts/chromium.sh install"
  mkdir -p "$RUN_DIR"
  publish_env "$ENV_FILE" "chromium found at $path" <<EOT
SLUICE_CHROMIUM_PATH=$path
EOT
}

cmd_stop() {
  remove_run_state "$RUN_DIR" "$ENV_FILE"
  log "stopped"
}

cmd_status() {
  local path
  if path="$(chromium_path)"; then
    echo "chromium at $path"
  else
    echo "chromium not installed (run: bash scripts/chromium.sh install)"
  fi
  print_env_indented "$ENV_FILE"
}

daemon_main "$@"
