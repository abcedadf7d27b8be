#!/usr/bin/env bash
# Build the statechaos images offline (no image registry needed), in three cached steps:
#   1. statechaos/debian-base:<h>  a Debian bookworm rootfs made with debootstrap (minbase plus
#      compose/image/packages.txt) and `docker import`ed. The rootfs tarball is cached under
#      $STATECHAOS_CACHE (default ~/.cache/statechaos), keyed by the package list.
#   2. statechaos/spark-deps:<h>   FROM the base: a venv with compose/requirements.lock (pyspark 4.3.0,
#      pandas 2.3.3, pyarrow 26.0.1, the project's dependency closure). The wheels are fetched from
#      PyPI once, by pip in a throwaway container of the base image (so they match its Python and
#      glibc), into a cached wheelhouse; the host's CA bundle is mounted for TLS-intercepting proxies.
#   3. statechaos/spark:<tag> and :latest  FROM spark-deps: the node scripts and the proxy binary.
#      The project's code is not in any image: docker-compose.yml mounts the checkout's packages.
# Every tag is a content hash of its inputs, so when statechaos/spark:<tag> exists the script only
# re-tags :latest and exits in about a second; a code change or a fresh checkout builds nothing.
#
# Usage: compose/build-images.sh [--print-tag] [--check] [--no-cache]
#   --print-tag  print the image reference this checkout builds to (statechaos/spark:<tag>) and exit
#   --check      exit 0 when that image exists, 3 when a build is needed (builds nothing)
#   --no-cache   rebuild steps 2 and 3 without Docker's layer cache (rootfs and wheel caches are kept)
# Env: STATECHAOS_CACHE (cache dir), STATECHAOS_DEBIAN_MIRROR (default http://deb.debian.org/debian),
#   STATECHAOS_TOXIPROXY_SERVER (a Linux x86-64 toxiproxy-server for the stack's proxy container).
# The stack's proxy is Shopify's Toxiproxy when a server binary is found: $STATECHAOS_TOXIPROXY_SERVER,
# else compose/toxiproxy/toxiproxy-server (git-ignored), else the checkout's sibling
# shared/tools/toxiproxy/toxiproxy-server-*-linux-amd64.gz; otherwise statechaos's own compatible one.
# Progress goes to stderr; on success the last line of stdout is the image reference.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(dirname "$HERE")"
CACHE="${STATECHAOS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/statechaos}"
SUITE=bookworm
MIRROR="${STATECHAOS_DEBIAN_MIRROR:-http://deb.debian.org/debian}"
BASE_REPO=statechaos/debian-base
DEPS_REPO=statechaos/spark-deps
IMAGE_REPO=statechaos/spark
# Bump when the way the rootfs is made changes (trimming, sources.list): it is part of the base hash.
BASE_RECIPE=3
# Likewise for the dependencies image (labels, venv layout).
DEPS_RECIPE=2
# The spark image's build context (compose/image/): everything in it but Dockerfile.deps.
IMAGE_FILES=(Dockerfile statechaos-node statechaos-health statechaos-src.pth)

log() { printf '[build-images %4ss] %s\n' "$SECONDS" "$*" >&2; }
die() { printf '[build-images] error: %s\n' "$*" >&2; exit 1; }

mode=build
nocache=()
for arg in "$@"; do
  case "$arg" in
    --print-tag) mode=print ;;
    --check) mode=check ;;
    --no-cache) nocache=(--no-cache) ;;
    -h|--help) sed -n '2,24p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown argument '$arg' (see --help)" ;;
  esac
done

sha() { sha256sum | cut -c1-16; }

packages() { grep -v '^\s*#' "$HERE/image/packages.txt" | tr -s ' \t' '\n' | grep -v '^$' | LC_ALL=C sort -u; }

# The Toxiproxy server to put in the image (a binary or a .gz of one), or nothing.
toxiproxy_source() {
  local f
  if [[ -n ${STATECHAOS_TOXIPROXY_SERVER:-} ]]; then
    [[ -f $STATECHAOS_TOXIPROXY_SERVER ]] || die "STATECHAOS_TOXIPROXY_SERVER=$STATECHAOS_TOXIPROXY_SERVER: no such file"
    echo "$STATECHAOS_TOXIPROXY_SERVER"; return
  fi
  [[ -f $HERE/toxiproxy/toxiproxy-server ]] && { echo "$HERE/toxiproxy/toxiproxy-server"; return; }
  for f in "$(dirname "$ROOT")"/shared/tools/toxiproxy/toxiproxy-server-*-linux-amd64.gz; do
    [[ -f $f ]] && { echo "$f"; return; }
  done
  return 0
}
TOXIPROXY_SOURCE="$(toxiproxy_source)"

# Content hash of the spark image's inputs: the files of its build context ($1: compose/image, or the
# context's copy, so the tag names exactly what was built while others keep editing) and the proxy.
image_hash() {
  {
    echo "deps=$DEPS_HASH"
    (cd "$1" && sha256sum "${IMAGE_FILES[@]}")
    echo "toxiproxy=$([[ -n $TOXIPROXY_SOURCE ]] && sha256sum < "$TOXIPROXY_SOURCE" | cut -c1-16)"
  } | sha
}

BASE_HASH="$( { echo "recipe=$BASE_RECIPE suite=$SUITE mirror=$MIRROR variant=minbase"; packages; } | sha)"
BASE_IMAGE="$BASE_REPO:$BASE_HASH"
WHEELS_HASH="$( { echo "base=$BASE_HASH"; cat "$HERE/requirements.lock"; } | sha)"
DEPS_HASH="$( { echo "recipe=$DEPS_RECIPE wheels=$WHEELS_HASH"; cat "$HERE/image/Dockerfile.deps"; } | sha)"
DEPS_IMAGE="$DEPS_REPO:$DEPS_HASH"
IMAGE_HASH="$(image_hash "$HERE/image")"
IMAGE="$IMAGE_REPO:$IMAGE_HASH"

if [[ $mode == print ]]; then echo "$IMAGE"; exit 0; fi

command -v docker >/dev/null || die "the docker CLI is not installed"
docker info >/dev/null 2>&1 || die "no Docker engine reachable (is dockerd running, and may $(id -un) use it?)"

have_image() { docker image inspect "$1" >/dev/null 2>&1; }

if [[ $mode == check ]]; then
  if have_image "$IMAGE"; then echo "$IMAGE"; exit 0; fi
  log "$IMAGE is not built"; exit 3
fi

if [[ ${#nocache[@]} -eq 0 ]] && have_image "$IMAGE"; then
  docker tag "$IMAGE" "$IMAGE_REPO:latest"
  log "up to date: $IMAGE (tagged :latest)"
  echo "$IMAGE"
  exit 0
fi

mkdir -p "$CACHE/rootfs"
# One build at a time per cache (parallel test sessions would otherwise race on the same rootfs).
exec 9>"$CACHE/build.lock"
if ! flock -n 9; then
  log "another build holds $CACHE/build.lock; waiting for it"
  flock 9
  # it may have built this very image (a test session's background build: suites/warmup.py)
  if [[ ${#nocache[@]} -eq 0 ]] && have_image "$IMAGE"; then
    docker tag "$IMAGE" "$IMAGE_REPO:latest"
    log "up to date: $IMAGE, built meanwhile (tagged :latest)"
    echo "$IMAGE"
    exit 0
  fi
fi

# Unmount whatever debootstrap left mounted under a work dir (proc, sys, dev/pts) and remove it.
remove_workdir() {
  local dir="$1" m
  [[ -d $dir ]] || return 0
  while read -r m; do umount -l "$m" 2>/dev/null || true; done < <(awk -v d="$dir/" 'index($2, d) == 1 {print $2}' /proc/mounts | sort -r)
  rm -rf --one-file-system "$dir"
}
for stale in "$CACHE"/rootfs/work.*; do [[ -e $stale ]] && { log "removing stale work dir $stale"; remove_workdir "$stale"; }; done

CTX=""
WORK=""
WHEEL_CTR=""
cleanup() {
  [[ -n $WHEEL_CTR ]] && docker rm -f "$WHEEL_CTR" >/dev/null 2>&1
  [[ -n $WORK ]] && remove_workdir "$WORK"
  [[ -n $CTX ]] && rm -rf "$CTX"
  return 0
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# ---- 1. base image -------------------------------------------------------------------------------
if have_image "$BASE_IMAGE"; then
  log "base image $BASE_IMAGE present"
else
  TARBALL="$CACHE/rootfs/$SUITE-minbase-$BASE_HASH.tar.gz"
  if [[ -s $TARBALL ]]; then
    log "reusing cached rootfs $TARBALL"
  else
    [[ $(id -u) -eq 0 ]] || die "debootstrap needs root (run as root, or build once as root to fill $CACHE)"
    if ! command -v debootstrap >/dev/null; then
      log "installing debootstrap (apt-get)"
      command -v apt-get >/dev/null || die "debootstrap is missing and there is no apt-get to install it"
      DEBIAN_FRONTEND=noninteractive apt-get update -qq >&2 || die "apt-get update failed"
      DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap >&2 || die "apt-get install debootstrap failed"
    fi
    WORK="$(mktemp -d "$CACHE/rootfs/work.XXXXXX")"
    include="$(packages | paste -sd, -)"
    log "debootstrap $SUITE (minbase + $include) from $MIRROR; this takes a few minutes"
    if ! debootstrap --variant=minbase --components=main --include="$include" \
        "$SUITE" "$WORK/rootfs" "$MIRROR" > "$WORK/debootstrap.log" 2>&1; then
      tail -n 30 "$WORK/debootstrap.log" >&2
      [[ -f $WORK/rootfs/debootstrap/debootstrap.log ]] && tail -n 30 "$WORK/rootfs/debootstrap/debootstrap.log" >&2
      die "debootstrap failed (log above)"
    fi
    log "debootstrap done; trimming and packing the rootfs"
    R="$WORK/rootfs"
    cat > "$R/etc/apt/sources.list" <<EOF
deb $MIRROR $SUITE main
deb $MIRROR $SUITE-updates main
deb http://deb.debian.org/debian-security $SUITE-security main
EOF
    # Containers get these from the engine; keep the image free of the build host's values.
    : > "$R/etc/hostname"
    : > "$R/etc/resolv.conf"
    rm -rf "$R"/var/cache/apt/archives/*.deb "$R"/var/lib/apt/lists/* "$R"/usr/share/doc/* \
      "$R"/usr/share/man/* "$R"/usr/share/info/* "$R"/var/log/*.log "$R"/debootstrap
    find "$R/usr/share/locale" -mindepth 1 -maxdepth 1 ! -name 'locale.alias' -exec rm -rf {} + 2>/dev/null || true
    compress=(gzip -1)
    command -v pigz >/dev/null && compress=(pigz -1)
    tar --numeric-owner --one-file-system -C "$R" -cf - . | "${compress[@]}" > "$TARBALL.tmp"
    mv "$TARBALL.tmp" "$TARBALL"
    remove_workdir "$WORK"; WORK=""
    log "cached rootfs $TARBALL ($(du -h "$TARBALL" | cut -f1))"
  fi
  log "importing $BASE_IMAGE"
  docker import \
    --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --change 'ENV LANG=C.UTF-8' \
    --change "LABEL io.statechaos.image=debian-base io.statechaos.base-hash=$BASE_HASH" \
    --change 'CMD ["/bin/bash"]' \
    --message "statechaos debian $SUITE minbase ($BASE_HASH)" \
    "$TARBALL" "$BASE_IMAGE" >/dev/null
fi

# ---- 2. dependencies image ----------------------------------------------------------------------
if have_image "$DEPS_IMAGE"; then
  log "dependencies image $DEPS_IMAGE present"
else
  WHEELS="$CACHE/wheels/$WHEELS_HASH"
  if [[ -f $WHEELS/.complete ]]; then
    log "reusing cached wheelhouse $WHEELS"
  else
    mkdir -p "$WHEELS" "$CACHE/pip"
    log "fetching wheels for requirements.lock into $WHEELS (pip in a $BASE_IMAGE container)"
    WHEEL_CTR="statechaos-wheels-$$"
    # --init: a signal to this script (through docker run's proxy) must stop pip, not a PID-1 shell.
    run_args=(--rm --init --name "$WHEEL_CTR" --label io.statechaos.build=wheels --user "$(id -u):$(id -g)" -e HOME=/tmp -e PIP_CACHE_DIR=/pip-cache
      -e PIP_DISABLE_PIP_VERSION_CHECK=1 -e PIP_NO_INPUT=1
      -v "$WHEELS:/wheels" -v "$CACHE/pip:/pip-cache" -v "$HERE/requirements.lock:/requirements.lock:ro")
    # The host's CA bundle, so pip works behind a TLS-intercepting proxy; it is mounted, never baked in.
    ca="${PIP_CERT:-${REQUESTS_CA_BUNDLE:-${SSL_CERT_FILE:-/etc/ssl/certs/ca-certificates.crt}}}"
    [[ -f $ca ]] && run_args+=(-v "$ca:/host-ca.crt:ro" -e PIP_CERT=/host-ca.crt)
    for var in PIP_INDEX_URL PIP_EXTRA_INDEX_URL PIP_TRUSTED_HOST PIP_DEFAULT_TIMEOUT HTTP_PROXY HTTPS_PROXY NO_PROXY http_proxy https_proxy no_proxy; do
      [[ -n ${!var:-} ]] && run_args+=(-e "$var=${!var}")
    done
    if ! docker run "${run_args[@]}" "$BASE_IMAGE" sh -c \
        'python3 -m venv /tmp/v && /tmp/v/bin/pip install -q --upgrade pip wheel && /tmp/v/bin/pip wheel --wheel-dir /wheels -r /requirements.lock' \
        > "$WHEELS.log" 2>&1; then
      tail -n 30 "$WHEELS.log" | sed 's/^/    /' >&2
      die "fetching wheels failed (log: $WHEELS.log; is PyPI reachable from containers?)"
    fi
    WHEEL_CTR=""
    touch "$WHEELS/.complete"
    log "wheelhouse ready ($(find "$WHEELS" -name '*.whl' | wc -l) wheels, $(du -sh "$WHEELS" | cut -f1))"
  fi
  CTX="$(mktemp -d "${TMPDIR:-/tmp}/statechaos-ctx.XXXXXX")"
  cp "$HERE/image/Dockerfile.deps" "$HERE/requirements.lock" "$CTX/"
  cp -al "$WHEELS" "$CTX/wheels" 2>/dev/null || cp -a "$WHEELS" "$CTX/wheels"
  log "building $DEPS_IMAGE"
  if ! DOCKER_BUILDKIT=0 docker build "${nocache[@]}" -f "$CTX/Dockerfile.deps" \
      --build-arg "BASE=$BASE_IMAGE" \
      --label "io.statechaos.image=spark-deps" --label "io.statechaos.deps-hash=$DEPS_HASH" \
      -t "$DEPS_IMAGE" "$CTX" 2>&1 | sed -u 's/^/    /' >&2; then
    die "docker build of $DEPS_IMAGE failed (output above)"
  fi
  rm -rf "$CTX"; CTX=""
  # Drop the first stage (venv + wheels, ~1.6 GB): it is only a build step, labelled in Dockerfile.deps.
  docker image ls -q --filter "label=io.statechaos.stage=venv-build" | sort -u | xargs -r docker image rm -f >/dev/null 2>&1 || true
fi

# ---- 3. spark image (the project) ----------------------------------------------------------------
CTX="$(mktemp -d "${TMPDIR:-/tmp}/statechaos-ctx.XXXXXX")"
(cd "$HERE/image" && cp "${IMAGE_FILES[@]}" "$CTX/")
mkdir "$CTX/toxiproxy"
if [[ -z $TOXIPROXY_SOURCE ]]; then
  log "no toxiproxy-server found: the stack's proxy is statechaos's own Toxiproxy-compatible server" \
    "(for Shopify's, put a Linux x86-64 toxiproxy-server from https://github.com/Shopify/toxiproxy/releases" \
    "at compose/toxiproxy/toxiproxy-server, or set STATECHAOS_TOXIPROXY_SERVER)"
elif [[ $TOXIPROXY_SOURCE == *.gz ]]; then
  gunzip -c "$TOXIPROXY_SOURCE" > "$CTX/toxiproxy/toxiproxy-server" || die "cannot unpack $TOXIPROXY_SOURCE"
else
  cp "$TOXIPROXY_SOURCE" "$CTX/toxiproxy/toxiproxy-server"
fi
if [[ -n $TOXIPROXY_SOURCE ]]; then
  chmod 755 "$CTX/toxiproxy/toxiproxy-server"
  log "the stack's proxy is Shopify's Toxiproxy ($TOXIPROXY_SOURCE)"
fi
IMAGE_HASH="$(image_hash "$CTX")"
IMAGE="$IMAGE_REPO:$IMAGE_HASH"
log "building $IMAGE FROM $DEPS_IMAGE (context $(du -sh "$CTX" | cut -f1))"
# The legacy builder: buildx is not installed and this engine (20.10) has no BuildKit frontend offline.
if ! DOCKER_BUILDKIT=0 docker build "${nocache[@]}" \
    --build-arg "DEPS=$DEPS_IMAGE" --label "io.statechaos.image=spark" \
    -t "$IMAGE" -t "$IMAGE_REPO:latest" "$CTX" 2>&1 | sed -u 's/^/    /' >&2; then
  die "docker build of $IMAGE failed (output above)"
fi
have_image "$IMAGE" || die "docker build reported success but $IMAGE is missing"
# Disk hygiene (a dependencies image is ~1 GB of its own): drop other spark-deps images with the
# spark images built on them, and keep only the 3 newest spark tags of the current deps. Removal is
# by tag and without force, so images that containers still use stay.
for old in $(docker image ls "$DEPS_REPO" --format '{{.Tag}}' | grep -vx "$DEPS_HASH"); do
  docker image ls -q --filter "label=io.statechaos.deps-hash=$old" | sort -u \
    | xargs -r docker image inspect --format '{{range .RepoTags}}{{println .}}{{end}}' | grep -v '^$' \
    | grep -vx "$IMAGE_REPO:latest" | xargs -r docker image rm >/dev/null 2>&1 || true
  docker image rm "$DEPS_REPO:$old" >/dev/null 2>&1 || true
done
docker image ls "$IMAGE_REPO" --format '{{.Tag}}' | grep -vx -e latest -e "$IMAGE_HASH" | tail -n +3 \
  | sed "s|^|$IMAGE_REPO:|" | xargs -r docker image rm >/dev/null 2>&1 || true
size="$(docker image inspect -f '{{.Size}}' "$IMAGE")"
log "built $IMAGE and $IMAGE_REPO:latest ($((size / 1000000)) MB)"
echo "$IMAGE"
