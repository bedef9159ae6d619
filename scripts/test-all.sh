#!/usr/bin/env bash
# Run every check the project has, the same way locally and in CI:
#
#   install servers (if missing) -> npm ci (if needed) -> build -> start
#   servers -> lint -> all vitest projects -> stop servers
#
# Usage: scripts/test-all.sh [extra vitest args...]
#
# Each real server the tests use has a script in scripts/ taking
# install|start|stop (see SERVER_SCRIPTS); a started script writes the
# variables tests need to $SLUICE_RUN_DIR/env (Redis) or $SLUICE_RUN_DIR/*.env.
# scripts/chromium.sh is among them: it installs the headless browser the
# dashboard tests drive and publishes its path (it runs no daemon); so do
# scripts/image.sh (builds the container image from the Dockerfile at `start`),
# scripts/helm.sh (builds helm once, for the chart tests) and
# scripts/prometheus.sh (installs prometheus and promtool; the monitoring test
# starts its own Prometheus) and scripts/otelcol.sh (builds the OpenTelemetry
# Collector once; the OTLP test starts its own).
# Servers are always stopped on exit, whether the tests pass, fail, or the run
# is interrupted. The exit code is the tests' if they failed, otherwise the
# linter's, otherwise 0.
set -euo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$REPO_ROOT"

# Pin the run dir so this script and redis-servers.sh agree on where the env
# file is, even if the caller did not set it.
export SLUICE_RUN_DIR="${SLUICE_RUN_DIR:-$REPO_ROOT/.run/redis}"

step() { printf '\n==> %s\n' "$*" >&2; }

# Every server script present, in start order.
SERVER_SCRIPTS=()
for name in redis-servers temporal-server nats-server rocketmq-server chromium image helm prometheus otelcol; do
  [[ -f "scripts/$name.sh" ]] && SERVER_SCRIPTS+=("scripts/$name.sh")
done

for script in "${SERVER_SCRIPTS[@]}"; do
  step "install: $script"
  bash "$script" install </dev/null
done

# npm ci wipes and reinstalls node_modules, which is slow; locally only do it
# when the lockfile changed since the last install (npm writes
# node_modules/.package-lock.json on every install). CI always starts clean.
if [[ "${CI:-}" == "true" ]]; then
  step "npm ci (CI)"
  npm ci --no-audit --no-fund </dev/null
elif [[ ! -d node_modules || package-lock.json -nt node_modules/.package-lock.json ]]; then
  step "npm ci (node_modules missing or older than package-lock.json)"
  npm ci --no-audit --no-fund </dev/null
else
  step "npm ci skipped (node_modules up to date)"
fi

step "build"
npm run build </dev/null

started=()
cleanup() {
  local rc=$?
  # Disarm first so a signal during cleanup cannot re-enter it.
  trap - EXIT INT TERM
  local i
  for ((i = ${#started[@]} - 1; i >= 0; i--)); do
    step "stopping: ${started[i]}"
    bash "${started[i]}" stop </dev/null || true
  done
  exit "$rc"
}
trap cleanup EXIT
# Turn signals into a normal exit so the EXIT trap (and thus the server
# shutdown) runs, with the conventional 128+signal exit code.
trap 'exit 130' INT
trap 'exit 143' TERM

for script in "${SERVER_SCRIPTS[@]}"; do
  step "start: $script"
  # Mark as started before the call: a start that fails half-way may have
  # left some servers up, and stop is harmless if nothing is running.
  started+=("$script")
  bash "$script" start </dev/null
done

# Exports SLUICE_REDIS_URL, SLUICE_REDIS_CLUSTER_NODES and the other servers'
# addresses for the tests.
# shellcheck source-path=SCRIPTDIR source=lib/run-env.sh
. "$REPO_ROOT/scripts/lib/run-env.sh"
load_run_env

# Lint and tests both run even if lint fails, so one CI run reports every
# problem instead of hiding test failures behind a formatting nit.
step "lint"
lint_rc=0
npm run lint </dev/null || lint_rc=$?

step "tests (all vitest projects)"
test_rc=0
# --no-install: never let npx try to download vitest (and prompt for it,
# which would hang or fail without stdin); it must come from node_modules.
npx --no-install vitest run "$@" </dev/null || test_rc=$?

if ((test_rc != 0)); then
  step "tests FAILED (exit $test_rc)"
  exit "$test_rc"
fi
if ((lint_rc != 0)); then
  step "lint FAILED (exit $lint_rc)"
  exit "$lint_rc"
fi
step "all checks passed"
