# shellcheck shell=bash
# load_run_env — exports the addresses the server scripts wrote to $SLUICE_RUN_DIR/env and
# $SLUICE_RUN_DIR/*.env (SLUICE_REDIS_URL, SLUICE_NATS_URL, SLUICE_ROCKETMQ_ENDPOINTS, ...)
# for the tests that run next.
load_run_env() {
  local f
  set -a
  for f in "$SLUICE_RUN_DIR/env" "$SLUICE_RUN_DIR"/*.env; do
    # shellcheck source=/dev/null
    [[ -f "$f" ]] && source "$f"
  done
  set +a
}
