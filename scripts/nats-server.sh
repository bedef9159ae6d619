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
RUN_DIR="${SLUICE_RUN_DIR:-$REPO_ROOT/.run/redis}"
NATS_DIR="$RUN_DIR/nats"
HOST=127.0.0.1
PORT="${SLUICE_NATS_PORT:-4222}"
START_TIMEOUT="${SLUICE_NATS_START_TIMEOUT:-30}"
STOP_TIMEOUT=10

log() { printf '[nats-server] %s\n' "$*" >&2; }
die() {
  log "ERROR: $*"
  exit 1
}

# True if something accepts TCP connections on 127.0.0.1:$1 (bash /dev/tcp, no ss/lsof needed).
port_in_use() {
  (exec 3<>"/dev/tcp/$HOST/$1") 2>/dev/null
}

cmd_install() {
  if command -v nats-server >/dev/null; then
    log "nats-server already installed: $(nats-server --version)"
    return 0
  fi
  command -v apt-get >/dev/null || die "nats-server not found and apt-get is unavailable; install nats-server >= 2.9 manually"
  local sudo=()
  if [[ "$(id -u)" -ne 0 ]]; then
    command -v sudo >/dev/null || die "need root or sudo to install nats-server"
    sudo=(sudo)
  fi
  log "installing nats-server via apt-get"
  "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=300 update </dev/null
  "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive \
    apt-get -o DPkg::Lock::Timeout=300 install -y --no-install-recommends nats-server </dev/null
  command -v nats-server >/dev/null || die "apt-get finished but nats-server is still not on PATH"
  log "installed: $(nats-server --version)"
}

# True if $1 is a live (non-zombie) process.
is_running() {
  local state
  kill -0 "$1" 2>/dev/null || return 1
  state="$(ps -o stat= -p "$1" 2>/dev/null || true)"
  [[ -n "$state" && "$state" != Z* ]]
}

# The PID in our pidfile if that process is alive and is a nats-server (a stale pidfile's PID
# may belong to an unrelated process by now).
live_pid() {
  local pid cmd
  [[ -f "$NATS_DIR/pid" ]] || return 1
  pid="$(tr -dc '0-9' <"$NATS_DIR/pid")"
  [[ -n "$pid" ]] || return 1
  is_running "$pid" || return 1
  cmd="$(ps -p "$pid" -o args= 2>/dev/null || true)"
  [[ "$cmd" == *nats-server* ]] || return 1
  printf '%s\n' "$pid"
}

cmd_stop() {
  local pid
  if pid="$(live_pid)"; then
    log "stopping nats-server pid $pid"
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
  rm -rf -- "$NATS_DIR"
  rm -f -- "$RUN_DIR/nats.env"
  rmdir -- "$RUN_DIR" 2>/dev/null || true
  log "stopped"
}

fail_start() {
  log "ERROR: $*"
  if [[ -f "$NATS_DIR/nats.log" ]]; then
    log "---- last lines of $NATS_DIR/nats.log ----"
    tail -n 30 "$NATS_DIR/nats.log" >&2 || true
  fi
  cmd_stop || true
  exit 1
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
  cat >"$RUN_DIR/nats.env.tmp" <<EOT
SLUICE_NATS_URL=nats://$HOST:$PORT
EOT
  mv -f -- "$RUN_DIR/nats.env.tmp" "$RUN_DIR/nats.env"
  log "ready; environment (also in $RUN_DIR/nats.env):"
  cat "$RUN_DIR/nats.env"
}

cmd_status() {
  local pid
  if pid="$(live_pid)"; then
    echo "nats-server pid $pid on $HOST:$PORT"
  else
    echo "nats-server not running (run dir $NATS_DIR)"
  fi
  [[ -f "$RUN_DIR/nats.env" ]] && sed 's/^/  /' "$RUN_DIR/nats.env"
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
