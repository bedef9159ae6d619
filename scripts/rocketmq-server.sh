#!/usr/bin/env bash
# Manage the throwaway Apache RocketMQ 5.5 the stream transport tests run against: a name
# server, a broker and a gRPC proxy in cluster mode, on loopback. (The proxy's local mode,
# with the broker inside its JVM, cannot serve LiteTopic subscriptions in 5.5.0: its
# LocalServiceManager has no LiteSubscriptionService, and subscribing fails with a
# NullPointerException. Cluster mode has one.)
#
# Usage: scripts/rocketmq-server.sh install|start|stop|status
#        scripts/rocketmq-server.sh groups <name>[,<name>...]
#
#   install  fetches the 5.5.x jars from Maven Central (mvn dependency:copy-dependencies on
#            scripts/rocketmq/pom.xml) into $SLUICE_TOOLS_DIR/rocketmq-<version>/lib, only if
#            that directory is missing
#   start    starts namesrv, broker and proxy, creates the topics and groups, waits until a topic route
#            answers, writes $SLUICE_RUN_DIR/rocketmq.env
#   stop     stops the three JVMs by pid and deletes their run directory
#   groups   creates (or updates) lite consumer groups on the running broker: orderly, bound
#            to the LITE parent topic, exclusive (a new subscriber of a lite topic takes it
#            over from the group's previous one); what the transport's lite mode needs
#
# Environment:
#   SLUICE_RUN_DIR                where rocketmq/ (logs, store, pids) and rocketmq.env go
#   SLUICE_TOOLS_DIR              jar cache (default ~/.cache/sluice/tools)
#   SLUICE_ROCKETMQ_NAMESRV_PORT  name server port        (default 19876)
#   SLUICE_ROCKETMQ_PROXY_PORT    proxy gRPC port, clients (default 18081)
#   SLUICE_ROCKETMQ_REMOTING_PORT proxy remoting port     (default 18082)
#   SLUICE_ROCKETMQ_BROKER_PORT   broker port; it also binds port-2 and port+1 (default 18085)
#   SLUICE_ROCKETMQ_TOPIC         topic prefix: partition topics <topic>-p-<n> (normal) and the
#                                 LITE parent topic <topic>      (default sluice-events)
#   SLUICE_ROCKETMQ_PARTITIONS    partition topics to create     (default 16)
#   SLUICE_ROCKETMQ_DECISIONS     normal topic for decisions     (default sluice-decisions)
#   SLUICE_ROCKETMQ_GROUPS        comma-separated lite groups created at start (default sluice-aggregators)
#   SLUICE_ROCKETMQ_START_TIMEOUT seconds to wait for ready (default 180)
#
# After `start`, $SLUICE_RUN_DIR/rocketmq.env holds:
#   SLUICE_ROCKETMQ_ENDPOINTS=127.0.0.1:<proxy port>
#   SLUICE_ROCKETMQ_NAMESRV=127.0.0.1:<namesrv port>
#   SLUICE_ROCKETMQ_TOPIC=..., SLUICE_ROCKETMQ_DECISIONS=...
#   SLUICE_ROCKETMQ_PROXY_PID=<pid of the proxy JVM> (outage drills stop and resume it)
set -euo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source-path=SCRIPTDIR source=lib/daemon.sh
. "$REPO_ROOT/scripts/lib/daemon.sh"
LOG_TAG=rocketmq-server
RUN_DIR="${SLUICE_RUN_DIR:-$REPO_ROOT/.run/redis}"
MQ_DIR="$RUN_DIR/rocketmq"
TOOLS_DIR="${SLUICE_TOOLS_DIR:-$HOME/.cache/sluice/tools}"
POM="$REPO_ROOT/scripts/rocketmq/pom.xml"
VERSION="$(sed -n 's:.*<rocketmq.version>\(.*\)</rocketmq.version>.*:\1:p' "$POM")"
HOME_DIR="$TOOLS_DIR/rocketmq-$VERSION"
HOST=127.0.0.1
NAMESRV_PORT="${SLUICE_ROCKETMQ_NAMESRV_PORT:-19876}"
PROXY_PORT="${SLUICE_ROCKETMQ_PROXY_PORT:-18081}"
REMOTING_PORT="${SLUICE_ROCKETMQ_REMOTING_PORT:-18082}"
BROKER_PORT="${SLUICE_ROCKETMQ_BROKER_PORT:-18085}"
TOPIC="${SLUICE_ROCKETMQ_TOPIC:-sluice-events}"
DECISIONS="${SLUICE_ROCKETMQ_DECISIONS:-sluice-decisions}"
PARTITIONS="${SLUICE_ROCKETMQ_PARTITIONS:-16}"
# Lite consumer groups created at start (the aggregators' default group).
GROUPS_CSV="${SLUICE_ROCKETMQ_GROUPS:-sluice-aggregators}"
START_TIMEOUT="${SLUICE_ROCKETMQ_START_TIMEOUT:-180}"
STOP_TIMEOUT=20

# ---------------------------------------------------------------------------
# install
# ---------------------------------------------------------------------------

cmd_install() {
  command -v java >/dev/null || die "java (>= 8) is required; on Debian: apt-get install -y openjdk-17-jre-headless"
  if [[ -f "$HOME_DIR/lib/rocketmq-proxy-$VERSION.jar" ]]; then
    log "RocketMQ $VERSION already installed in $HOME_DIR"
    return 0
  fi
  command -v mvn >/dev/null || die "mvn is required to fetch the RocketMQ jars; on Debian: apt-get install -y maven"
  log "fetching RocketMQ $VERSION jars from Maven Central into $HOME_DIR/lib"
  local tmp="$HOME_DIR.tmp.$$"
  rm -rf -- "$tmp"
  mvn -q -B -f "$POM" dependency:copy-dependencies -Dmdep.includeScope=runtime \
    -DoutputDirectory="$tmp/lib" </dev/null || {
    rm -rf -- "$tmp"
    die "mvn dependency:copy-dependencies failed"
  }
  # Rename into place only when complete, so an interrupted install is retried next time.
  rm -rf -- "$HOME_DIR"
  mv -- "$tmp" "$HOME_DIR"
  log "installed $(find "$HOME_DIR/lib" -name '*.jar' | wc -l) jars"
}

# ---------------------------------------------------------------------------
# stop
# ---------------------------------------------------------------------------

# PID from $MQ_DIR/$1.pid if alive and a java process started for this role (roles are
# plain words, so they are safe inside the glob).
live_pid() {
  pidfile_pid "$MQ_DIR/$1.pid" "*java*-Dsluice.role=$1*"
}

cmd_stop() {
  local role pid pids=()
  for role in proxy broker namesrv; do
    if pid="$(live_pid "$role")"; then pids+=("$pid"); fi
  done
  if ((${#pids[@]} > 0)); then
    log "stopping pids: ${pids[*]}"
    terminate_pids "$STOP_TIMEOUT" each "${pids[@]}"
  fi
  remove_run_state "$RUN_DIR" "$MQ_DIR" "$RUN_DIR/rocketmq.env"
  log "stopped"
}

# ---------------------------------------------------------------------------
# start
# ---------------------------------------------------------------------------

# What fail_start shows before it stops the three JVMs.
dump_start_logs() {
  local f
  for f in "$MQ_DIR"/namesrv.out "$MQ_DIR"/broker.out "$MQ_DIR"/proxy.out "$MQ_DIR"/home/logs/rocketmqlogs/proxy.log \
    "$MQ_DIR"/home/logs/rocketmqlogs/broker.log "$MQ_DIR"/home/logs/rocketmqlogs/namesrv.log; do
    log_tail "$f" 25
  done
}

classpath() {
  printf '%s/lib/*' "$HOME_DIR"
}

# Starts one JVM in the background. -Dsluice.role lets stop recognise it by its command line.
# -Duser.home keeps RocketMQ's logs and default store paths inside the run dir.
launch() {
  local role="$1" heap="$2" main="$3"
  shift 3
  # shellcheck disable=SC2086
  ROCKETMQ_HOME="$HOME_DIR" nohup java -server $heap -XX:+UseG1GC -Xss512k \
    -Dsluice.role="$role" -Duser.home="$MQ_DIR/home" -Drocketmq.home.dir="$HOME_DIR" \
    -Djava.net.preferIPv4Stack=true \
    -cp "$(classpath)" "$main" "$@" </dev/null >"$MQ_DIR/$role.out" 2>&1 &
  echo $! >"$MQ_DIR/$role.pid"
}

admin() {
  ROCKETMQ_HOME="$HOME_DIR" java -Xmx128m -XX:TieredStopAtLevel=1 -XX:+UseSerialGC -Duser.home="$MQ_DIR/home" -Drocketmq.home.dir="$HOME_DIR" \
    -cp "$(classpath)" org.apache.rocketmq.tools.command.MQAdminStartup "$@" -n "$HOST:$NAMESRV_PORT" </dev/null
}

# Waits until `role` listens on `port`: 0 once it does, 1 if it exited first; a deadline passed
# or another role exiting fails the start.
wait_listening() {
  local port="$1" role="$2" deadline="$3" other
  until port_in_use "$port"; do
    ((SECONDS < deadline)) || fail_start "$role did not listen on $HOST:$port in time"
    # The role's own JVM, launched just now: alive while its pid runs. live_pid would also want
    # its command line to name the role, which it does only once the launch has exec'd java;
    # checked before that, a JVM still starting looked as if it had exited, was launched a
    # second time beside itself, and the second could not bind the port.
    is_running "$(tr -dc '0-9' <"$MQ_DIR/$role.pid")" || return 1
    for other in namesrv broker proxy; do
      [[ "$other" != "$role" && -f "$MQ_DIR/$other.pid" ]] && ! live_pid "$other" >/dev/null && fail_start "$other exited"
    done
    sleep 0.5
  done
}

# Starts a role and waits for its port. A JVM that exits before it listens (seen with the name
# server: at launch, nothing in its output) is started again, up to three times.
start_role() {
  local role="$1" heap="$2" main="$3" port="$4" attempt
  shift 4
  for attempt in 1 2 3; do
    launch "$role" "$heap" "$main" "$@"
    wait_listening "$port" "$role" "$deadline" && return 0
    log "$role exited before listening (attempt $attempt of 3); last output: $(tail -c 1000 "$MQ_DIR/$role.out" 2>/dev/null)"
    rm -f "$MQ_DIR/$role.pid"
    sleep 1
  done
  fail_start "$role exited"
}

launch_proxy() {
  launch proxy "-Xms128m -Xmx384m -XX:MaxDirectMemorySize=256m" org.apache.rocketmq.proxy.ProxyStartup \
    -pm cluster -pc "$MQ_DIR/rmq-proxy.json" -n "$HOST:$NAMESRV_PORT"
}

# Waits for the proxy launched while the topics were being created. On a loaded machine it can
# exit at start (seen: "create topic DefaultHeartBeatSyncerTopic failed" while the broker was still
# registering); it is started again, up to three launches in all, as start_role does for the others.
await_proxy() {
  local attempt
  for attempt in 1 2 3; do
    wait_listening "$PROXY_PORT" proxy "$deadline" && return 0
    log "proxy exited before listening (attempt $attempt of 3); last output: $(tail -c 1000 "$MQ_DIR/proxy.out" 2>/dev/null)"
    rm -f "$MQ_DIR/proxy.pid"
    ((attempt < 3)) || break
    sleep 1
    launch_proxy
  done
  fail_start "proxy exited"
}

cmd_start() {
  [[ -f "$HOME_DIR/lib/rocketmq-proxy-$VERSION.jar" ]] ||
    die "RocketMQ $VERSION not installed; run: bash scripts/rocketmq-server.sh install"
  cmd_stop
  local p free_by=$((SECONDS + 15))
  for p in "$NAMESRV_PORT" "$PROXY_PORT" "$REMOTING_PORT" "$BROKER_PORT" "$((BROKER_PORT - 2))" "$((BROKER_PORT + 1))"; do
    # A broker just killed by stop can hold a port for a moment longer.
    while port_in_use "$p" && ((SECONDS < free_by)); do sleep 0.5; done
    port_in_use "$p" && die "port $p is in use by a process this script did not start; set SLUICE_ROCKETMQ_*_PORT"
  done
  mkdir -p "$MQ_DIR/home" "$MQ_DIR/store"
  local t0=$SECONDS deadline=$((SECONDS + START_TIMEOUT))

  cat >"$MQ_DIR/namesrv.conf" <<EOT
listenPort=$NAMESRV_PORT
EOT
  # brokerIP1: the default is the first non-loopback address, which must never be used here.
  # Small mapped files and a high disk ratio keep a test broker working on a small disk.
  cat >"$MQ_DIR/broker.conf" <<EOT
brokerClusterName=DefaultCluster
brokerName=broker-a
brokerId=0
brokerIP1=$HOST
listenPort=$BROKER_PORT
namesrvAddr=$HOST:$NAMESRV_PORT
storePathRootDir=$MQ_DIR/store
storePathCommitLog=$MQ_DIR/store/commitlog
mappedFileSizeCommitLog=67108864
mappedFileSizeConsumeQueue=600000
diskMaxUsedSpaceRatio=95
autoCreateTopicEnable=false
autoCreateSubscriptionGroup=true
enableLmq=true
enableMultiDispatch=true
deleteWhen=04
fileReservedTime=1
EOT
  # A short minimum long-polling time lets consumers stop within about a second.
  cat >"$MQ_DIR/rmq-proxy.json" <<EOT
{
  "rocketMQClusterName": "DefaultCluster",
  "namesrvAddr": "$HOST:$NAMESRV_PORT",
  "grpcServerPort": $PROXY_PORT,
  "remotingListenPort": $REMOTING_PORT,
  "proxyMode": "cluster",
  "grpcClientConsumerMinLongPollingTimeoutMillis": 500
}
EOT

  log "starting namesrv on $HOST:$NAMESRV_PORT"
  start_role namesrv "-Xms128m -Xmx256m" org.apache.rocketmq.namesrv.NamesrvStartup "$NAMESRV_PORT" -c "$MQ_DIR/namesrv.conf"

  log "starting broker on $HOST:$BROKER_PORT"
  start_role broker "-Xms256m -Xmx768m -XX:MaxDirectMemorySize=512m" \
    org.apache.rocketmq.broker.BrokerStartup "$BROKER_PORT" -c "$MQ_DIR/broker.conf"

  log "starting proxy (cluster mode) gRPC $HOST:$PROXY_PORT, remoting $REMOTING_PORT"
  launch_proxy

  # Topics and groups go straight to the broker (-b): with -c the admin tool would silently
  # create nothing while the broker has not registered with the name server yet. Each admin
  # call is a JVM start that mostly waits, so they run in parallel.
  log "creating topics $TOPIC-p-0..$((PARTITIONS - 1)), $DECISIONS, $TOPIC (LITE) and groups $GROUPS_CSV"
  local broker="$HOST:$BROKER_PORT" group pids=() failed=0 i=0 n
  {
    printf '['
    for ((n = 0; n < PARTITIONS; n++)); do
      printf '{"topicName":"%s-p-%d","readQueueNums":1,"writeQueueNums":1,"perm":6,"attributes":{"+message.type":"NORMAL"}},' "$TOPIC" "$n"
    done
    printf '{"topicName":"%s","readQueueNums":1,"writeQueueNums":1,"perm":6,"attributes":{"+message.type":"NORMAL"}}]' "$DECISIONS"
  } >"$MQ_DIR/topics.json"
  # The counter moves outside the redirections: those run in the background subshell.
  admin updateTopicList -b "$broker" -f "$MQ_DIR/topics.json" >"$MQ_DIR/admin-$i.out" 2>&1 &
  pids+=($!)
  i=$((i + 1))
  admin updateTopic -b "$broker" -t "$TOPIC" -r 1 -w 1 -a +message.type=LITE >"$MQ_DIR/admin-$i.out" 2>&1 &
  pids+=($!)
  i=$((i + 1))
  create_groups "$GROUPS_CSV" >"$MQ_DIR/admin-$i.out" 2>&1 &
  pids+=($!)
  for p in "${pids[@]}"; do wait "$p" || failed=1; done
  if ((failed)); then
    cat "$MQ_DIR"/admin-*.out >&2
    fail_start "creating topics or groups failed"
  fi
  grep -qi 'success' "$MQ_DIR/admin-0.out" || fail_start "partition topics were not created: $(cat "$MQ_DIR/admin-0.out")"
  await_proxy
  # The proxy answers routes only once the broker registered the topics with the name server.
  until admin topicRoute -t "$TOPIC-p-$((PARTITIONS - 1))" >"$MQ_DIR/route.out" 2>&1 && grep -q "$HOST:$BROKER_PORT" "$MQ_DIR/route.out"; do
    ((SECONDS < deadline)) || fail_start "no route for $TOPIC in the name server in time"
    sleep 1
  done

  publish_env "$RUN_DIR/rocketmq.env" "ready in $((SECONDS - t0))s" <<EOT
SLUICE_ROCKETMQ_ENDPOINTS=$HOST:$PROXY_PORT
SLUICE_ROCKETMQ_NAMESRV=$HOST:$NAMESRV_PORT
SLUICE_ROCKETMQ_TOPIC=$TOPIC
SLUICE_ROCKETMQ_DECISIONS=$DECISIONS
SLUICE_ROCKETMQ_PROXY_PID=$(live_pid proxy)
EOT
}

# Lite groups: orderly (a lite topic's next messages come only after the earlier ones were
# acknowledged: per-partition order), bound to the parent topic, and exclusive. Exclusive is
# what makes ownership hand-over dependable: in the default shared model the broker hands each
# arriving message's notice to one of the group's subscribers of that lite topic at random, and
# a subscriber that stopped reading (an old owner, a killed process whose connection the proxy
# has not yet seen close) keeps its notices until the broker writes it off 10-20 s later.
create_groups() {
  local group groups pids=() failed=0 p
  IFS=, read -r -a groups <<<"$1"
  for group in "${groups[@]}"; do
    [[ "$group" =~ ^[A-Za-z0-9_-]{1,64}$ ]] || die "bad group name: $group"
  done
  # Each admin call is a JVM start that mostly waits, so they run in parallel.
  for group in "${groups[@]}"; do
    admin updateSubGroup -b "$HOST:$BROKER_PORT" -g "$group" -o true \
      --attributes "+lite.bind.topic=$TOPIC,+lite.sub.model=Exclusive" &
    pids+=($!)
  done
  for p in "${pids[@]}"; do wait "$p" || failed=1; done
  return "$failed"
}

cmd_groups() {
  [[ $# -eq 1 && -n "$1" ]] || die "usage: $0 groups <name>[,<name>...]"
  live_pid broker >/dev/null || die "the broker is not running; run: bash scripts/rocketmq-server.sh start"
  create_groups "$1" >"$MQ_DIR/groups.out" 2>&1 || {
    cat "$MQ_DIR/groups.out" >&2
    die "creating groups $1 failed"
  }
  log "lite groups ready: $1"
}

cmd_status() {
  local role pid
  for role in namesrv broker proxy; do
    if pid="$(live_pid "$role")"; then echo "$role pid $pid"; else echo "$role not running"; fi
  done
  print_env_indented "$RUN_DIR/rocketmq.env"
}

if [[ "${1:-}" == groups ]]; then
  shift
  cmd_groups "$@"
else
  daemon_main "$@"
fi
