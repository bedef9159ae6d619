#!/usr/bin/env bash
# Manage the throwaway Redis servers the integration tests run against:
#
#   * one standalone Redis   on 127.0.0.1:${SLUICE_REDIS_PORT:-6390}
#   * a 6-node Redis Cluster on 127.0.0.1:${SLUICE_CLUSTER_BASE_PORT:-7100}..+5
#     (3 masters + 3 replicas; cluster bus on port + 10000)
#
# Usage: scripts/redis-servers.sh install|start|stop|status
#
# Everything lives under $SLUICE_RUN_DIR (default <repo>/.run/redis, which is
# gitignored), one sub-directory per port holding that server's pidfile, log
# and nodes.conf. The servers are disposable: no RDB/AOF persistence, and
# `stop` deletes their directories.
#
# Environment:
#   SLUICE_RUN_DIR             where pidfiles, logs and data go
#   SLUICE_REDIS_PORT          standalone port            (default 6390)
#   SLUICE_CLUSTER_BASE_PORT   first cluster port         (default 7100)
#   SLUICE_REDIS_START_TIMEOUT seconds to wait for ready  (default 60)
#
# After `start`, $SLUICE_RUN_DIR/env holds the variables the tests read:
#   SLUICE_REDIS_URL=redis://127.0.0.1:6390
#   SLUICE_REDIS_CLUSTER_NODES=127.0.0.1:7100,...,127.0.0.1:7105
set -euo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source-path=SCRIPTDIR source=lib/daemon.sh
. "$REPO_ROOT/scripts/lib/daemon.sh"
LOG_TAG=redis-servers
RUN_DIR="${SLUICE_RUN_DIR:-$REPO_ROOT/.run/redis}"
HOST=127.0.0.1
STANDALONE_PORT="${SLUICE_REDIS_PORT:-6390}"
CLUSTER_BASE_PORT="${SLUICE_CLUSTER_BASE_PORT:-7100}"
CLUSTER_SIZE=6 # 3 masters + 1 replica each
START_TIMEOUT="${SLUICE_REDIS_START_TIMEOUT:-60}"
# How long a server gets to exit after SIGTERM before we SIGKILL it. Without
# persistence shutdown is near-instant; the bound only matters if a process is
# wedged, and then we would rather kill it than hang CI.
STOP_TIMEOUT=10

CLUSTER_PORTS=()
for ((i = 0; i < CLUSTER_SIZE; i++)); do
  CLUSTER_PORTS+=("$((CLUSTER_BASE_PORT + i))")
done
ALL_PORTS=("$STANDALONE_PORT" "${CLUSTER_PORTS[@]}")

# redis-cli against one local port. stdin is closed so that nothing can ever
# block waiting for input (CI has no stdin).
rcli() {
  local port="$1"
  shift
  redis-cli -h "$HOST" -p "$port" "$@" </dev/null
}

# ---------------------------------------------------------------------------
# install
# ---------------------------------------------------------------------------

have_redis() {
  command -v redis-server >/dev/null && command -v redis-cli >/dev/null
}

cmd_install() {
  if have_redis; then
    log "redis already installed: $(redis-server --version | head -n1)"
    return 0
  fi
  command -v apt-get >/dev/null ||
    die "redis-server/redis-cli not found and apt-get is unavailable; install Redis >= 7 manually"

  apt_install redis "redis-server and redis-tools" redis-server redis-tools
  have_redis || die "apt-get finished but redis-server/redis-cli are still not on PATH"
  log "installed: $(redis-server --version | head -n1)"
}

# The server flags below (--enable-debug-command in particular) only exist
# from Redis 7.0; older servers refuse to start with a cryptic config error,
# so check up front and say so plainly.
require_redis7() {
  have_redis || die "redis-server/redis-cli not found; run: bash scripts/redis-servers.sh install"
  local version major
  version="$(redis-server --version | sed -n 's/.*v=\([0-9][0-9.]*\).*/\1/p')"
  major="${version%%.*}"
  [[ -n "$major" && "$major" -ge 7 ]] ||
    die "Redis >= 7.0 is required, found '${version:-unknown}' ($(command -v redis-server))"
}

# ---------------------------------------------------------------------------
# stop
# ---------------------------------------------------------------------------

# Per-port directories this script created: numeric names under RUN_DIR.
# Globbing (instead of looping over the configured ports) means a stop still
# cleans up a previous start that used different SLUICE_*_PORT values.
server_dirs() {
  local d
  [[ -d "$RUN_DIR" ]] || return 0
  for d in "$RUN_DIR"/*/; do
    d="${d%/}"
    [[ "$(basename "$d")" =~ ^[0-9]+$ ]] && printf '%s\n' "$d"
  done
  return 0
}

# Prints the PID recorded in $1/pid if that process is still alive *and* is a
# redis-server.
live_pid() {
  pidfile_pid "$1/pid" '*redis-server*'
}

cmd_stop() {
  local dir pid pids=() dirs=()

  while IFS= read -r dir; do
    if pid="$(live_pid "$dir")"; then
      pids+=("$pid")
    fi
  done < <(server_dirs)

  if ((${#pids[@]} > 0)); then
    log "stopping redis-server pids: ${pids[*]}"
    # Signal everything first and wait collectively, so stopping 7 servers
    # costs one wait rather than seven.
    terminate_pids "$STOP_TIMEOUT" list "${pids[@]}"
  fi

  # Remove data dirs (pidfiles, logs, nodes.conf) so the next start is fresh.
  while IFS= read -r dir; do
    dirs+=("$dir")
  done < <(server_dirs)
  remove_run_state "$RUN_DIR" "${dirs[@]+"${dirs[@]}"}" "$RUN_DIR/env"

  log "stopped"
}

# ---------------------------------------------------------------------------
# start
# ---------------------------------------------------------------------------

# What fail_start shows before it takes down whatever did start.
dump_start_logs() {
  local dir
  while IFS= read -r dir; do
    log_tail "$dir/redis.log" 30
  done < <(server_dirs)
  log "cluster view from :${CLUSTER_BASE_PORT}:"
  rcli "$CLUSTER_BASE_PORT" cluster nodes >&2 2>/dev/null || true
}

check_ports_free() {
  local p busy=()
  for p in "$STANDALONE_PORT" "${CLUSTER_PORTS[@]}"; do
    port_in_use "$p" && busy+=("$p")
  done
  for p in "${CLUSTER_PORTS[@]}"; do
    port_in_use "$((p + 10000))" && busy+=("$((p + 10000))")
  done
  ((${#busy[@]} == 0)) && return 0

  # Not ours (we just stopped everything our pidfiles know about). Try to say
  # who it is, since "address in use" in a daemon log is easy to miss.
  for p in "${busy[@]}"; do
    local owner
    owner="$(rcli "$p" info server 2>/dev/null | tr -d '\r' |
      sed -n 's/^process_id:/redis-server pid /p' || true)"
    log "port $p is already in use${owner:+ by $owner}"
  done
  die "ports in use by processes this script did not start; stop them or set SLUICE_REDIS_PORT / SLUICE_CLUSTER_BASE_PORT"
}

# Launch one daemonized redis-server in $RUN_DIR/$port with extra flags.
launch() {
  local port="$1" dir="$RUN_DIR/$1"
  shift
  mkdir -p "$dir"
  # Flags shared by every server:
  #   --bind 127.0.0.1                 never reachable from outside the host
  #   --save '' --appendonly no        no persistence; test data is disposable
  #   --enable-debug-command local     tests may use DEBUG (e.g. SLEEP) to
  #                                    simulate slow/failed nodes
  #   --dir                            keeps all artifacts inside the run dir
  redis-server \
    --port "$port" \
    --bind "$HOST" \
    --save '' \
    --appendonly no \
    --enable-debug-command local \
    --daemonize yes \
    --pidfile "$dir/pid" \
    --dir "$dir" \
    --logfile "$dir/redis.log" \
    "$@" </dev/null
}

# True if every node sees a healthy cluster: all slots served
# (cluster_state:ok), all 6 nodes known, and every replica's replication link
# up. Checking every node (not just one) matters because cluster state
# propagates by gossip, and clients may bootstrap from any node.
cluster_ready() {
  local p info repl
  for p in "${CLUSTER_PORTS[@]}"; do
    info="$(rcli "$p" cluster info 2>/dev/null | tr -d '\r')" || return 1
    grep -qx 'cluster_state:ok' <<<"$info" || return 1
    grep -qx "cluster_known_nodes:$CLUSTER_SIZE" <<<"$info" || return 1
    repl="$(rcli "$p" info replication 2>/dev/null | tr -d '\r')" || return 1
    if grep -qx 'role:slave' <<<"$repl"; then
      grep -qx 'master_link_status:up' <<<"$repl" || return 1
    fi
  done
  # And the topology is what we asked for: 3 masters, 3 replicas.
  [[ "$(rcli "$CLUSTER_BASE_PORT" cluster nodes 2>/dev/null | grep -c 'slave')" -eq 3 ]]
}

# Wall clock in microseconds: bash >= 5 has EPOCHREALTIME (whose decimal
# separator follows the locale, hence stripping non-digits); older bash falls
# back to whole seconds. Only used to report how long start took.
now_us() {
  if [[ -n "${EPOCHREALTIME:-}" ]]; then
    echo "${EPOCHREALTIME//[!0-9]/}"
  else
    echo "$((SECONDS * 1000000))"
  fi
}

elapsed_since() {
  local tenths=$((($(now_us) - $1) / 100000))
  echo "$((tenths / 10)).$((tenths % 10))"
}

cmd_start() {
  require_redis7
  local t0 deadline=$((SECONDS + START_TIMEOUT)) p
  t0="$(now_us)"

  local q
  for p in "${CLUSTER_PORTS[@]}"; do
    [[ "$p" == "$STANDALONE_PORT" ]] &&
      die "SLUICE_REDIS_PORT ($STANDALONE_PORT) overlaps the cluster ports ${CLUSTER_PORTS[0]}-${CLUSTER_PORTS[-1]}"
    for q in "$STANDALONE_PORT" "${CLUSTER_PORTS[@]}"; do
      [[ "$q" == "$((p + 10000))" ]] &&
        die "port $q collides with the cluster bus port of $p (port + 10000)"
    done
  done

  # A previous start (maybe from an aborted test run) may still be up: take
  # it down first so start is always "fresh servers, empty data".
  cmd_stop
  check_ports_free

  mkdir -p "$RUN_DIR"
  # Stale nodes.conf would make nodes rejoin an old cluster identity and
  # break `--cluster create`; stop already removed the dirs, this is a belt
  # for the case where a dir survived (e.g. permissions).
  for p in "${ALL_PORTS[@]}"; do
    rm -f -- "$RUN_DIR/$p/nodes.conf"
  done

  log "starting standalone redis on $HOST:$STANDALONE_PORT"
  launch "$STANDALONE_PORT" || fail_start "redis-server failed to launch on $STANDALONE_PORT"

  log "starting cluster nodes on $HOST:${CLUSTER_PORTS[0]}-${CLUSTER_PORTS[-1]}"
  for p in "${CLUSTER_PORTS[@]}"; do
    # --cluster-node-timeout 2000: fail over within a couple of seconds so
    #   failover tests do not take the default 15 s.
    # --repl-diskless-sync-delay 0: replicas sync immediately instead of the
    #   default 5 s batching delay, which otherwise dominates start time.
    launch "$p" \
      --cluster-enabled yes \
      --cluster-config-file nodes.conf \
      --cluster-node-timeout 2000 \
      --repl-diskless-sync-delay 0 ||
      fail_start "redis-server failed to launch on $p"
  done

  # --daemonize returns before the server listens; wait until each answers.
  for p in "${ALL_PORTS[@]}"; do
    until [[ "$(rcli "$p" ping 2>/dev/null)" == PONG ]]; do
      ((SECONDS < deadline)) ||
        fail_start "redis on port $p did not answer PING within ${START_TIMEOUT}s"
      sleep 0.1
    done
  done

  log "creating cluster (3 masters + 3 replicas)"
  local nodes=() create_out
  for p in "${CLUSTER_PORTS[@]}"; do nodes+=("$HOST:$p"); done
  # `timeout` bounds the create step too: it polls until the nodes agree and
  # could otherwise wait forever on a broken node.
  if ! create_out="$(timeout "$((deadline - SECONDS > 1 ? deadline - SECONDS : 1))" \
    redis-cli --cluster create "${nodes[@]}" --cluster-replicas 1 --cluster-yes \
    </dev/null 2>&1)"; then
    printf '%s\n' "$create_out" >&2
    fail_start "redis-cli --cluster create failed"
  fi

  log "waiting for all nodes to agree and replicas to sync"
  until cluster_ready; do
    ((SECONDS < deadline)) ||
      fail_start "cluster not ready within ${START_TIMEOUT}s (need cluster_state:ok on all nodes and master_link_status:up on all replicas)"
    sleep 0.2
  done

  local cluster_nodes
  cluster_nodes="$(
    IFS=,
    echo "${nodes[*]}"
  )"
  publish_env "$RUN_DIR/env" "ready in $(elapsed_since "$t0")s" <<EOF
SLUICE_REDIS_URL=redis://$HOST:$STANDALONE_PORT
SLUICE_REDIS_CLUSTER_NODES=$cluster_nodes
EOF
}

# ---------------------------------------------------------------------------
# status
# ---------------------------------------------------------------------------

cmd_status() {
  local dir port pid role found=0
  echo "run dir: $RUN_DIR"
  while IFS= read -r dir; do
    found=1
    port="$(basename "$dir")"
    if pid="$(live_pid "$dir")"; then
      role="$(rcli "$port" info replication 2>/dev/null | tr -d '\r' |
        sed -n 's/^role://p' || true)"
      if rcli "$port" info cluster 2>/dev/null | tr -d '\r' | grep -qx 'cluster_enabled:1'; then
        role="cluster ${role:-?}, $(rcli "$port" cluster info 2>/dev/null | tr -d '\r' |
          grep '^cluster_state:' || echo 'cluster_state:?')"
      else
        role="standalone ${role:-?}"
      fi
      printf '  %-5s pid %-7s %s\n' "$port" "$pid" "$role"
    else
      printf '  %-5s not running (stale dir)\n' "$port"
    fi
  done < <(server_dirs)
  ((found)) || echo "  no servers started by this script"
  if [[ -f "$RUN_DIR/env" ]]; then
    echo "env ($RUN_DIR/env):"
    print_env_indented "$RUN_DIR/env"
  fi
}

# ---------------------------------------------------------------------------

daemon_main "$@"
