#!/usr/bin/env bash
# Manage the throwaway Temporal server the integration tests run against: the
# Temporal CLI's dev server (the real server, in-memory SQLite, one process)
# on 127.0.0.1:${SLUICE_TEMPORAL_PORT:-7233}.
#
# Usage: scripts/temporal-server.sh install|start|stop|status
#
#   install  builds the Temporal CLI into $SLUICE_TOOLS_DIR if it is missing
#            (go install; a cold build takes minutes and ~1 GB of module cache)
#   start    (re)starts the dev server headless (no web UI), waits until its
#            frontend answers, and writes $SLUICE_RUN_DIR/temporal.env
#   stop     kills the server started by `start` (by its recorded pid)
#
# Environment:
#   SLUICE_RUN_DIR                where the pidfile, log and env file go
#                                 (default <repo>/.run/redis, shared with
#                                 redis-servers.sh so test-all.sh finds every
#                                 *.env in one place)
#   SLUICE_TOOLS_DIR              where the binary lives (default ~/.cache/sluice/tools)
#   SLUICE_TEMPORAL_PORT          frontend gRPC port                 (default 7233)
#   SLUICE_TEMPORAL_START_TIMEOUT seconds to wait for ready          (default 60)
#
# After `start`, $SLUICE_RUN_DIR/temporal.env holds:
#   SLUICE_TEMPORAL_ADDRESS=127.0.0.1:7233
set -euo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source-path=SCRIPTDIR source=lib/daemon.sh
. "$REPO_ROOT/scripts/lib/daemon.sh"
LOG_TAG=temporal-server
RUN_DIR="${SLUICE_RUN_DIR:-$REPO_ROOT/.run/redis}"
STATE_DIR="$RUN_DIR/temporal"
TOOLS_DIR="${SLUICE_TOOLS_DIR:-$HOME/.cache/sluice/tools}"
TEMPORAL_BIN="$TOOLS_DIR/temporal"
TEMPORAL_VERSION=v1.5.1 # v1.6+ cannot be built with `go install` (replace directive)
HOST=127.0.0.1
PORT="${SLUICE_TEMPORAL_PORT:-7233}"
START_TIMEOUT="${SLUICE_TEMPORAL_START_TIMEOUT:-60}"
STOP_TIMEOUT=10

# ---------------------------------------------------------------------------
# install
# ---------------------------------------------------------------------------

cmd_install() {
  if [[ -x "$TEMPORAL_BIN" ]]; then
    log "temporal already installed: $("$TEMPORAL_BIN" --version 2>/dev/null | head -n1)"
    return 0
  fi
  command -v go >/dev/null || die "go is required to build the Temporal CLI (apt-get install -y golang-go, Go >= 1.23)"
  mkdir -p "$TOOLS_DIR"
  log "building temporal CLI $TEMPORAL_VERSION into $TOOLS_DIR (takes a few minutes cold)"
  CGO_ENABLED=0 GOBIN="$TOOLS_DIR" go install "github.com/temporalio/cli/cmd/temporal@$TEMPORAL_VERSION" </dev/null
  [[ -x "$TEMPORAL_BIN" ]] || die "go install finished but $TEMPORAL_BIN is missing"
  log "installed: $("$TEMPORAL_BIN" --version | head -n1)"
}

# ---------------------------------------------------------------------------
# stop
# ---------------------------------------------------------------------------

# The recorded pid, if that process is alive and is a temporal binary.
live_pid() {
  pidfile_pid "$STATE_DIR/pid" '*temporal*'
}

cmd_stop() {
  local pid
  if pid="$(live_pid)"; then
    log "stopping temporal pid $pid"
    terminate_pids "$STOP_TIMEOUT" plain "$pid"
  fi
  remove_run_state "$RUN_DIR" "$STATE_DIR" "$RUN_DIR/temporal.env"
  log "stopped"
}

# ---------------------------------------------------------------------------
# start
# ---------------------------------------------------------------------------

# What fail_start shows before it stops the server.
dump_start_logs() {
  log_tail "$STATE_DIR/temporal.log" 40
}

# Ready = the frontend answers a namespace call for "default" (created at
# launch); a listening port alone comes earlier than the services behind it.
server_ready() {
  "$TEMPORAL_BIN" operator namespace describe --address "$HOST:$PORT" --namespace default \
    --command-timeout 2s >/dev/null 2>&1 </dev/null
}

cmd_start() {
  [[ -x "$TEMPORAL_BIN" ]] || die "$TEMPORAL_BIN not found; run: bash scripts/temporal-server.sh install"
  # Always a fresh server with no workflows.
  cmd_stop
  port_in_use "$PORT" && die "port $PORT is already in use by a process this script did not start; set SLUICE_TEMPORAL_PORT"

  mkdir -p "$STATE_DIR"
  local http_port metrics_port
  http_port="$(free_port)"
  metrics_port="$(free_port)"
  log "starting temporal dev server on $HOST:$PORT (http $http_port, metrics $metrics_port, no UI)"
  # setsid: the server gets its own session, so a Ctrl-C in the caller's
  # terminal does not reach it; stop kills it by pid. No --db-filename: state
  # is in memory and dies with the process.
  setsid "$TEMPORAL_BIN" server start-dev \
    --headless \
    --ip "$HOST" \
    --port "$PORT" \
    --http-port "$http_port" \
    --metrics-port "$metrics_port" \
    --log-level warn \
    </dev/null >"$STATE_DIR/temporal.log" 2>&1 &
  echo $! >"$STATE_DIR/pid"

  local deadline=$((SECONDS + START_TIMEOUT)) pid
  pid="$(cat "$STATE_DIR/pid")"
  until server_ready; do
    is_running "$pid" || fail_start "temporal exited during start"
    ((SECONDS < deadline)) || fail_start "temporal did not become ready within ${START_TIMEOUT}s"
    sleep 0.2
  done

  publish_env "$RUN_DIR/temporal.env" "ready (pid $pid)" <<EOF
SLUICE_TEMPORAL_ADDRESS=$HOST:$PORT
EOF
}

cmd_status() {
  local pid
  if pid="$(live_pid)"; then
    echo "temporal pid $pid on $HOST:$PORT"
  else
    echo "temporal not running (run dir $RUN_DIR)"
  fi
  print_env_indented "$RUN_DIR/temporal.env"
}

daemon_main "$@"
