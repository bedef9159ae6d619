# shellcheck shell=bash
# Process management shared by the server scripts (redis-servers.sh, nats-server.sh,
# temporal-server.sh, rocketmq-server.sh). Sourcing this file only defines functions; it
# runs nothing, sets no options and defines no variables.
#
# What the sourcing script provides:
#   LOG_TAG    prefix of every log line, e.g. "redis-servers"
#   HOST       loopback address the servers bind (port_in_use probes it)
#   cmd_install, cmd_start, cmd_stop, cmd_status
#              the four commands daemon_main dispatches to; fail_start calls cmd_stop
#   dump_start_logs (optional)
#              prints the log tails that explain a failed start (see log_tail)

# log MESSAGE... — one line "[$LOG_TAG] MESSAGE" on stderr.
log() { printf '[%s] %s\n' "$LOG_TAG" "$*" >&2; }

# die MESSAGE... — logs "ERROR: MESSAGE" and exits 1.
die() {
  log "ERROR: $*"
  exit 1
}

# port_in_use PORT — true if something accepts TCP connections on $HOST:PORT. Uses bash's
# /dev/tcp so it works without ss/netstat/lsof being installed.
port_in_use() {
  (exec 3<>"/dev/tcp/$HOST/$1") 2>/dev/null
}

# free_port — prints a free loopback port picked by the kernel (python3 is not guaranteed;
# node is, since the tests need it).
free_port() {
  node -e 'const s=require("net").createServer();s.listen(0,"127.0.0.1",()=>{console.log(s.address().port);s.close();});'
}

# is_running PID — true if PID is a running process. A zombie does not count: an exited
# daemon is reparented to PID 1, and until PID 1 reaps it (which some container init
# processes do lazily, taking seconds) `kill -0` still succeeds even though the server is
# gone and its ports are free.
is_running() {
  local state
  kill -0 "$1" 2>/dev/null || return 1
  state="$(ps -o stat= -p "$1" 2>/dev/null || true)"
  [[ -n "$state" && "$state" != Z* ]]
}

# pidfile_pid PIDFILE PATTERN — prints the PID recorded in PIDFILE if that process is alive
# *and* its command line matches the glob PATTERN (e.g. '*redis-server*'); fails otherwise.
# The command check guards against a stale pidfile whose PID the OS has since handed to an
# unrelated process (e.g. after a SIGKILL, when the server could not remove its pidfile).
pidfile_pid() {
  local pidfile="$1" pattern="$2" pid cmd
  [[ -f "$pidfile" ]] || return 1
  pid="$(tr -dc '0-9' <"$pidfile")"
  [[ -n "$pid" ]] || return 1
  is_running "$pid" || return 1
  cmd="$(ps -p "$pid" -o args= 2>/dev/null || true)"
  # shellcheck disable=SC2053 # PATTERN is a glob on purpose
  [[ "$cmd" == $pattern ]] || return 1
  printf '%s\n' "$pid"
}

# terminate_pids TIMEOUT KILL_LOG PID... — sends SIGTERM to every PID, waits (collectively)
# up to TIMEOUT seconds for them to exit, then SIGKILLs the ones still running and waits up
# to 5 s more for the kernel to let them go, so an immediate restart can bind their ports.
# A wedged server is killed rather than left to hang CI. KILL_LOG words the SIGKILL log line:
#   plain  "still running after TIMEOUTs, sending SIGKILL"
#   list   "still running after TIMEOUTs, sending SIGKILL: PID PID..."
#   each   "pid PID still running after TIMEOUTs, sending SIGKILL", one line per PID
terminate_pids() {
  local timeout="$1" kill_log="$2" pid
  shift 2
  (($# > 0)) || return 0
  kill -TERM "$@" 2>/dev/null || true
  local remaining=("$@") deadline=$((SECONDS + timeout))
  while ((${#remaining[@]} > 0 && SECONDS < deadline)); do
    sleep 0.1
    local still=()
    for pid in "${remaining[@]}"; do
      is_running "$pid" && still+=("$pid")
    done
    remaining=("${still[@]+"${still[@]}"}")
  done
  ((${#remaining[@]} > 0)) || return 0
  case "$kill_log" in
    list) log "still running after ${timeout}s, sending SIGKILL: ${remaining[*]}" ;;
    each) for pid in "${remaining[@]}"; do log "pid $pid still running after ${timeout}s, sending SIGKILL"; done ;;
    *) log "still running after ${timeout}s, sending SIGKILL" ;;
  esac
  kill -KILL "${remaining[@]}" 2>/dev/null || true
  deadline=$((SECONDS + 5))
  for pid in "${remaining[@]}"; do
    while is_running "$pid" && ((SECONDS < deadline)); do sleep 0.05; done
  done
  return 0
}

# remove_run_state RUN_DIR PATH... — deletes the given state paths (directories or files),
# then RUN_DIR itself only if that emptied it: foreign files there are never deleted.
remove_run_state() {
  local run_dir="$1"
  shift
  (($# == 0)) || rm -rf -- "$@"
  rmdir -- "$run_dir" 2>/dev/null || true
}

# log_tail FILE LINES — if FILE exists, logs a header and copies its last LINES lines to stderr.
log_tail() {
  if [[ -f "$1" ]]; then
    log "---- last lines of $1 ----"
    tail -n "$2" "$1" >&2 || true
  fi
}

# fail_start MESSAGE... — for a start that cannot complete: logs "ERROR: MESSAGE", shows why
# (dump_start_logs, if the script defines it), then runs cmd_stop so that a failed start
# never leaks background servers, and exits 1.
fail_start() {
  log "ERROR: $*"
  if declare -F dump_start_logs >/dev/null; then dump_start_logs; fi
  cmd_stop || true
  exit 1
}

# publish_env FILE READY_TEXT — writes stdin to FILE via a temp file + rename (so a reader
# never sees a half-written env file), logs "READY_TEXT; environment (also in FILE):" and
# prints FILE on stdout.
publish_env() {
  local file="$1" ready="$2"
  cat >"$file.tmp"
  mv -f -- "$file.tmp" "$file"
  log "$ready; environment (also in $file):"
  cat "$file"
}

# print_env_indented FILE — prints FILE indented by two spaces, if it exists. Always succeeds.
print_env_indented() {
  [[ -f "$1" ]] && sed 's/^/  /' "$1"
  return 0
}

# apt_install WHAT DESCRIPTION PACKAGE... — installs PACKAGEs with apt-get, through sudo when
# not root (dies with "need root or sudo to install WHAT" when neither is available), after
# logging "installing DESCRIPTION via apt-get". DEBIAN_FRONTEND=noninteractive: no debconf
# prompts (there is no stdin in CI). The lock timeout makes apt wait for, rather than fail
# on, another apt process (e.g. unattended-upgrades on a fresh VM). env(1) is used so the
# variable survives sudo.
apt_install() {
  local what="$1" description="$2" sudo=()
  shift 2
  if [[ "$(id -u)" -ne 0 ]]; then
    command -v sudo >/dev/null || die "need root or sudo to install $what"
    sudo=(sudo)
  fi
  log "installing $description via apt-get"
  "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive \
    apt-get -o DPkg::Lock::Timeout=300 update </dev/null
  "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive \
    apt-get -o DPkg::Lock::Timeout=300 install -y --no-install-recommends "$@" </dev/null
}

# daemon_usage — prints the usage line and exits 2.
daemon_usage() {
  echo "usage: $0 install|start|stop|status" >&2
  exit 2
}

# daemon_main ARG... — runs cmd_install/cmd_start/cmd_stop/cmd_status for the single
# argument install|start|stop|status; anything else prints the usage and exits 2.
daemon_main() {
  [[ $# -eq 1 ]] || daemon_usage
  case "$1" in
    install) cmd_install ;;
    start) cmd_start ;;
    stop) cmd_stop ;;
    status) cmd_status ;;
    *) daemon_usage ;;
  esac
}
