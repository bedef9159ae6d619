#!/usr/bin/env bash
# Build the project's container image (the repository's Dockerfile) with podman, for the tests
# that run it (test/integration/image.test.ts). Users build the image with `docker build .`
# against the real base image; this script only makes that possible on a machine that cannot
# reach a container registry.
#
# Usage: scripts/image.sh install|start|stop|status
#
#   install  podman, runc and debootstrap (apt-get) if missing, and the base image the
#            Dockerfile names (node:20-bookworm-slim). When no registry is reachable, a local
#            stand-in with that name is built instead: a Debian bookworm minbase root file system
#            (cached under ~/.cache/sluice/tools/image-base) with this machine's node and npm and its
#            CA bundle (package registries are reached through a TLS-intercepting proxy here).
#   start    builds localhost/sluice:test from the working tree and publishes its name
#   stop     removes the containers the tests left behind (label sluice.test) and the env file
#
# Environment:
#   SLUICE_RUN_DIR    where image.env goes (default <repo>/.run/redis; gitignored)
#   SLUICE_TOOLS_DIR  where the stand-in's root file system is kept (default ~/.cache/sluice/tools)
#
# After `start`, $SLUICE_RUN_DIR/image.env holds what the tests read:
#   SLUICE_IMAGE=localhost/sluice:test
#   SLUICE_PODMAN='podman --runtime runc --cgroup-manager cgroupfs'
#   CONTAINERS_CONF=<cache>/podman/containers.conf
set -euo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source-path=SCRIPTDIR source=lib/daemon.sh
. "$REPO_ROOT/scripts/lib/daemon.sh"
LOG_TAG=image
RUN_DIR="${SLUICE_RUN_DIR:-$REPO_ROOT/.run/redis}"
ENV_FILE="$RUN_DIR/image.env"
TOOLS_DIR="${SLUICE_TOOLS_DIR:-$HOME/.cache/sluice/tools}"
BASE_IMAGE=docker.io/library/node:20-bookworm-slim
IMAGE=localhost/sluice:test
CONF_DIR="$TOOLS_DIR/podman"
# Containers here cannot set rlimits, and crun refuses this machine's cgroup layout: runc with
# cgroupfs works (checked on Debian 12, root, cgroup v1).
export CONTAINERS_CONF="$CONF_DIR/containers.conf"
PODMAN=(podman --runtime runc --cgroup-manager cgroupfs)

as_root() {
  if [[ "$(id -u)" -eq 0 ]]; then
    "$@"
  else
    command -v sudo >/dev/null || die "need root or sudo for: $*"
    sudo "$@"
  fi
}

cmd_install() {
  local missing=()
  command -v podman >/dev/null || missing+=(podman)
  command -v runc >/dev/null || missing+=(runc)
  command -v debootstrap >/dev/null || missing+=(debootstrap)
  if ((${#missing[@]} > 0)); then
    command -v apt-get >/dev/null || die "${missing[*]} not found and apt-get is unavailable"
    if ! apt-cache policy podman 2>/dev/null | grep -q 'Candidate: [0-9]'; then
      as_root env DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=300 update </dev/null
    fi
    log "installing ${missing[*]} via apt-get"
    as_root env DEBIAN_FRONTEND=noninteractive \
      apt-get -o DPkg::Lock::Timeout=300 install -y "${missing[@]}" </dev/null
  fi
  mkdir -p "$CONF_DIR"
  printf '[containers]\ndefault_ulimits = []\n' >"$CONTAINERS_CONF"
  if "${PODMAN[@]}" image exists "$BASE_IMAGE"; then
    log "base image $BASE_IMAGE present"
    return 0
  fi
  build_stand_in
}

# The base image's stand-in: Debian bookworm (what node:20-bookworm-slim is built on) with this
# machine's node and npm in /usr/local, where the official image has them.
build_stand_in() {
  local node_version rootfs tarball
  node_version="$(node --version)"
  [[ "$node_version" == v20.* ]] || die "the stand-in needs node 20 on this machine, found $node_version"
  tarball="$TOOLS_DIR/image-base/bookworm-minbase.tar"
  if [[ ! -f "$tarball" ]]; then
    log "debootstrap bookworm minbase into $tarball (once; about 30 s)"
    rootfs="$(mktemp -d)"
    as_root debootstrap --variant=minbase bookworm "$rootfs" http://deb.debian.org/debian >&2 </dev/null
    mkdir -p "$(dirname "$tarball")"
    as_root tar -C "$rootfs" -cf "$tarball.tmp" .
    mv -f "$tarball.tmp" "$tarball"
    as_root rm -rf "$rootfs"
  fi
  rootfs="$(mktemp -d)"
  as_root tar -C "$rootfs" -xf "$tarball"
  local npm_dir
  npm_dir="$(dirname "$(dirname "$(readlink -f "$(command -v npm)")")")"
  as_root install -m 0755 "$(command -v node)" "$rootfs/usr/local/bin/node"
  as_root mkdir -p "$rootfs/usr/local/lib/node_modules"
  as_root cp -a "$npm_dir" "$rootfs/usr/local/lib/node_modules/npm"
  as_root ln -sf ../lib/node_modules/npm/bin/npm-cli.js "$rootfs/usr/local/bin/npm"
  as_root mkdir -p "$rootfs/etc/ssl/certs"
  as_root cp /etc/ssl/certs/ca-certificates.crt "$rootfs/etc/ssl/certs/ca-certificates.crt"
  log "importing the stand-in as $BASE_IMAGE (node $node_version)"
  as_root tar -C "$rootfs" -c . |
    "${PODMAN[@]}" import --change 'ENV NODE_EXTRA_CA_CERTS=/etc/ssl/certs/ca-certificates.crt' \
      --change 'ENV PATH=/usr/local/bin:/usr/local/sbin:/usr/sbin:/usr/bin:/sbin:/bin' \
      - "$BASE_IMAGE" >/dev/null
  as_root rm -rf "$rootfs"
}

cmd_start() {
  command -v podman >/dev/null || die "podman not found; run: bash scripts/image.sh install"
  "${PODMAN[@]}" image exists "$BASE_IMAGE" || die "no $BASE_IMAGE; run: bash scripts/image.sh install"
  log "building $IMAGE from $REPO_ROOT/Dockerfile"
  local started=$SECONDS
  "${PODMAN[@]}" build --pull=never -t "$IMAGE" "$REPO_ROOT" >&2 </dev/null
  log "built in $((SECONDS - started)) s"
  mkdir -p "$RUN_DIR"
  publish_env "$ENV_FILE" "image $IMAGE built" <<EOT
SLUICE_IMAGE=$IMAGE
SLUICE_PODMAN='${PODMAN[*]}'
CONTAINERS_CONF=$CONTAINERS_CONF
EOT
}

cmd_stop() {
  if command -v podman >/dev/null; then
    local ids
    ids="$("${PODMAN[@]}" ps -aq --filter label=sluice.test 2>/dev/null || true)"
    # shellcheck disable=SC2086 # one id per word
    [[ -z "$ids" ]] || "${PODMAN[@]}" rm -f $ids >/dev/null 2>&1 || true
  fi
  remove_run_state "$RUN_DIR" "$ENV_FILE"
}

cmd_status() {
  if command -v podman >/dev/null && "${PODMAN[@]}" image exists "$IMAGE"; then
    log "image $IMAGE present"
    print_env_indented "$ENV_FILE"
  else
    log "image $IMAGE not built"
    return 1
  fi
}

daemon_main "$@"
