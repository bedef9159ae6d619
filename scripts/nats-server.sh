#!/usr/bin/env bash
# Manage the throwaway NATS server (with JetStream) the stream transport tests run against:
#
#   nats-server -a 127.0.0.1 -p ${SLUICE_NATS_PORT:-4222} -js -sd <store dir>
#
# Usage: scripts/nats-server.sh install|start|stop|status
#
# Everything lives under $SLUICE_RUN_DIR/nats (default <repo>/.run/redis/nats; the run dir is
# gitignored): pidfile, log and the JetStream store. The server is disposable: `stop` deletes
# its directory.
#
# Environment:
#   SLUICE_RUN_DIR            where the nats/ directory and nats.env go
#   SLUICE_NATS_PORT          client port               (default 4222)
#   SLUICE_NATS_START_TIMEOUT seconds to wait for ready (default 30)
#
# After `start`, $SLUICE_RUN_DIR/nats.env holds the variable the tests read:
#   SLUICE_NATS_URL=nats://127.0.0.1:4222
set -euo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source-path=SCRIPTDIR source=lib/daemon.sh
. "$REPO_ROOT/scripts/lib/daemon.sh"
LOG_TAG=nats-server
RUN_DIR="${SLUICE_RUN_DIR:-$REPO_ROOT/.run/redis}"
NATS_DIR="$RUN_DIR/nats"
HOST=127.0.0.1
PORT="${SLUICE_NATS_PORT:-4222}"
START_TIMEOUT="${SLUICE_NATS_START_TIMEOUT:-30}"
STOP_TIMEOUT=10

cmd_install() {
  if command -v nats-server >/dev/null; then
    log "nats-server already installed: $(nats-server --version)"
    return 0
  fi
  command -v apt-get >/dev/null || die "nats-server not found and apt-get is unavailable; install nats-server >= 2.9 manually"
  apt_install nats-server nats-server nats-server
  command -v nats-server >/dev/null || die "apt-get finished but nats-server is still not on PATH"
  log "installed: $(nats-server --version)"
}

# The PID in our pidfile if that process is alive and is a nats-server.
live_pid() {
  pidfile_pid "$NATS_DIR/pid" '*nats-server*'
}

cmd_stop() {
  local pid
  if pid="$(live_pid)"; then
    log "stopping nats-server pid $pid"
    terminate_pids "$STOP_TIMEOUT" plain "$pid"
  fi
  remove_run_state "$RUN_DIR" "$NATS_DIR" "$RUN_DIR/nats.env"
  log "stopped"
}

# What fail_start shows before it stops the server.
dump_start_logs() {
  log_tail "$NATS_DIR/nats.log" 30
}

# Ready = the log says the server (with JetStream) is up and it answers PING with PONG on
# the client port. Runs in a subshell so the probe connection's descriptor never leaks.
nats_ready() {
  grep -q 'Server is ready' "$NATS_DIR/nats.log" 2>/dev/null || return 1
  (
    exec 3<>"/dev/tcp/$HOST/$PORT" || exit 1
    printf 'CONNECT {"verbose":false}\r\nPING\r\n' >&3
    while IFS= read -r -t 2 line <&3; do
      [[ "${line%$'\r'}" == PONG ]] && exit 0
    done
    exit 1
  ) 2>/dev/null
}

cmd_start() {
  command -v nats-server >/dev/null || die "nats-server not found; run: bash scripts/nats-server.sh install"
  cmd_stop
  port_in_use "$PORT" && die "port $PORT is in use by a process this script did not start; set SLUICE_NATS_PORT"
  mkdir -p "$NATS_DIR/store"
  log "starting nats-server (JetStream) on $HOST:$PORT"
  # -a: loopback only; -js -sd: JetStream with its store inside the run dir; -P: pidfile.
  nats-server -a "$HOST" -p "$PORT" -js -sd "$NATS_DIR/store" -P "$NATS_DIR/pid" -l "$NATS_DIR/nats.log" \
    </dev/null >/dev/null 2>&1 &
  disown || true
  local deadline=$((SECONDS + START_TIMEOUT))
  until nats_ready; do
    ((SECONDS < deadline)) || fail_start "nats-server did not become ready within ${START_TIMEOUT}s"
    sleep 0.1
  done
  publish_env "$RUN_DIR/nats.env" ready <<EOT
SLUICE_NATS_URL=nats://$HOST:$PORT
EOT
}

cmd_status() {
  local pid
  if pid="$(live_pid)"; then
    echo "nats-server pid $pid on $HOST:$PORT"
  else
    echo "nats-server not running (run dir $NATS_DIR)"
  fi
  print_env_indented "$RUN_DIR/nats.env"
}

daemon_main "$@"
