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
RUN_DIR="${SLUICE_RUN_DIR:-$REPO_ROOT/.run/redis}"
STATE_DIR="$RUN_DIR/temporal"
TOOLS_DIR="${SLUICE_TOOLS_DIR:-$HOME/.cache/sluice/tools}"
TEMPORAL_BIN="$TOOLS_DIR/temporal"
TEMPORAL_VERSION=v1.5.1 # v1.6+ cannot be built with `go install` (replace directive)
HOST=127.0.0.1
PORT="${SLUICE_TEMPORAL_PORT:-7233}"
START_TIMEOUT="${SLUICE_TEMPORAL_START_TIMEOUT:-60}"
STOP_TIMEOUT=10

log() { printf '[temporal-server] %s\n' "$*" >&2; }
die() {
  log "ERROR: $*"
  exit 1
}

port_in_use() {
  (exec 3<>"/dev/tcp/$HOST/$1") 2>/dev/null
}

# A free loopback port, picked by the kernel (python3 is not guaranteed; node is,
# since the tests need it).
free_port() {
  node -e 'const s=require("net").createServer();s.listen(0,"127.0.0.1",()=>{console.log(s.address().port);s.close();});'
}

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

is_running() {
  local state
  kill -0 "$1" 2>/dev/null || return 1
  state="$(ps -o stat= -p "$1" 2>/dev/null || true)"
  [[ -n "$state" && "$state" != Z* ]]
}

# The recorded pid, if that process is alive and is a temporal binary (guards
# against a stale pidfile whose pid was reused).
live_pid() {
  local pid cmd
  [[ -f "$STATE_DIR/pid" ]] || return 1
  pid="$(tr -dc '0-9' <"$STATE_DIR/pid")"
  [[ -n "$pid" ]] || return 1
  is_running "$pid" || return 1
  cmd="$(ps -p "$pid" -o args= 2>/dev/null || true)"
  [[ "$cmd" == *temporal* ]] || return 1
  printf '%s\n' "$pid"
}

cmd_stop() {
  local pid
  if pid="$(live_pid)"; then
    log "stopping temporal pid $pid"
    kill -TERM "$pid" 2>/dev/null || true
    local deadline=$((SECONDS + STOP_TIMEOUT))
    while is_running "$pid" && ((SECONDS < deadline)); do sleep 0.1; done
    if is_running "$pid"; then
      log "still running after ${STOP_TIMEOUT}s, sending SIGKILL"
      kill -KILL "$pid" 2>/dev/null || true
      deadline=$((SECONDS + 5))
      while is_running "$pid" && ((SECONDS < deadline)); do sleep 0.05; done
    fi
  fi
  rm -rf -- "$STATE_DIR"
  rm -f -- "$RUN_DIR/temporal.env"
  rmdir -- "$RUN_DIR" 2>/dev/null || true
  log "stopped"
}

# ---------------------------------------------------------------------------
# start
# ---------------------------------------------------------------------------

fail_start() {
  log "ERROR: $*"
  if [[ -f "$STATE_DIR/temporal.log" ]]; then
    log "---- last lines of $STATE_DIR/temporal.log ----"
    tail -n 40 "$STATE_DIR/temporal.log" >&2 || true
  fi
  cmd_stop || true
  exit 1
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

  cat >"$RUN_DIR/temporal.env.tmp" <<EOF
SLUICE_TEMPORAL_ADDRESS=$HOST:$PORT
EOF
  mv -f -- "$RUN_DIR/temporal.env.tmp" "$RUN_DIR/temporal.env"
  log "ready (pid $pid); environment (also in $RUN_DIR/temporal.env):"
  cat "$RUN_DIR/temporal.env"
}

cmd_status() {
  local pid
  if pid="$(live_pid)"; then
    echo "temporal pid $pid on $HOST:$PORT"
  else
    echo "temporal not running (run dir $RUN_DIR)"
  fi
  [[ -f "$RUN_DIR/temporal.env" ]] && sed 's/^/  /' "$RUN_DIR/temporal.env"
  return 0
}

usage() {
  echo "usage: $0 install|start|stop|status" >&2
  exit 2
}

[[ $# -eq 1 ]] || usage
case "$1" in
  install) cmd_install ;;
  start) cmd_start ;;
  stop) cmd_stop ;;
  status) cmd_status ;;
  *) usage ;;
esac
