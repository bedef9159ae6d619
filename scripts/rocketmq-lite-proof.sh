#!/usr/bin/env bash
# Proof that the RocketMQ transport's lite mode delivers dependably on freshly started brokers:
# N times in a row (default 10), start a new RocketMQ (empty store), create the suite's lite
# groups, and run over it the transport conformance suite, the ownership hand-over suite, the
# governance end-to-end scenario (which includes the aggregator SIGKILL takeover and the
# frozen-proxy outage step), the lag test and the gateway sustained-burst test. Stops at the
# first failing round.
#
# Usage: scripts/rocketmq-lite-proof.sh [rounds]
#
# Needs the project built (npm run build) and the servers installed (scripts/*.sh install).
# Starts Redis (ownership and the rule store) once and RocketMQ once per round, and stops both
# on exit. Logs: $SLUICE_RUN_DIR/lite-proof/round-<n>.log.
set -euo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$REPO_ROOT"
export SLUICE_RUN_DIR="${SLUICE_RUN_DIR:-$REPO_ROOT/.run/redis}"
ROUNDS="${1:-10}"
[[ "$ROUNDS" =~ ^[1-9][0-9]*$ ]] || { echo "usage: $0 [rounds]" >&2; exit 2; }
LOG_DIR="$SLUICE_RUN_DIR/lite-proof"
mkdir -p "$LOG_DIR"

TESTS=(
  packages/stream/test/transports/rocketmq.test.ts
  packages/governance/test/ownership/handover-rocketmq.test.ts
  packages/governance/test/e2e/rocketmq.test.ts
  packages/governance/test/lag/lag-rocketmq.test.ts
  packages/gateway/test/sustained-burst.rocketmq.test.ts
)

cleanup() {
  local rc=$?
  trap - EXIT INT TERM
  bash scripts/rocketmq-server.sh stop </dev/null >/dev/null 2>&1 || true
  bash scripts/redis-servers.sh stop </dev/null >/dev/null 2>&1 || true
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# shellcheck source-path=SCRIPTDIR source=lib/run-env.sh
. "$REPO_ROOT/scripts/lib/run-env.sh"

bash scripts/redis-servers.sh start </dev/null >"$LOG_DIR/redis.log" 2>&1
passed=0
for ((round = 1; round <= ROUNDS; round++)); do
  log="$LOG_DIR/round-$round.log"
  t0=$SECONDS
  # stop, then start: a new store directory, so every round meets a freshly started broker.
  bash scripts/rocketmq-server.sh stop </dev/null >"$log" 2>&1
  if ! bash scripts/rocketmq-server.sh start </dev/null >>"$log" 2>&1; then
    echo "round $round of $ROUNDS: the broker did not start; log: $log" >&2
    tail -20 "$log" >&2
    exit 1
  fi
  load_run_env
  if npx vitest run --project integration "${TESTS[@]}" </dev/null >>"$log" 2>&1; then
    passed=$((passed + 1))
    echo "round $round of $ROUNDS: passed in $((SECONDS - t0)) s"
  else
    echo "round $round of $ROUNDS: FAILED after $((SECONDS - t0)) s; log: $log" >&2
    grep -E 'FAIL|AssertionError|Error:' "$log" | head -20 >&2 || true
    exit 1
  fi
done
echo "all $passed rounds passed on freshly started brokers"
