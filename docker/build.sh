#!/usr/bin/env bash
# Build, offline, the images shmguard's demo and tests need; reuse each one whose inputs did not change.
#
#   shmguard-base:bookworm  debootstrap (minbase + python3) imported with `docker import` (no registry here)
#   shmguard-torch:2.13.0   the base plus a venv with the torch 2.13.0 CPU wheel
#   shmguard-demo:latest    the torch image plus shmguard and docker/demo/train.py
#   shmguard-webhook:latest the base plus a venv with shmguard[webhook] (`shmguard webhook serve`)
#
# Each image carries a label `org.shmguard.inputs` with a hash of what it was built from;
# an image whose label matches is kept, so a second run costs seconds.
# Wheels are downloaded on the host into $SHMGUARD_CACHE (default ~/.cache/shmguard) and reused.
#
# Usage: docker/build.sh [--force] [IMAGE...]   IMAGE: base, torch, demo, webhook (default: all; --force rebuilds them)
# The demo and webhook tags can be changed with SHMGUARD_DEMO_IMAGE and SHMGUARD_WEBHOOK_IMAGE.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/.." && pwd)
cache=${SHMGUARD_CACHE:-$HOME/.cache/shmguard}
suite=bookworm
packages=python3,python3-pip,python3-venv,ca-certificates,time
base_image=shmguard-base:$suite
torch_image=shmguard-torch:2.13.0
demo_image=${SHMGUARD_DEMO_IMAGE:-shmguard-demo:latest}
webhook_image=${SHMGUARD_WEBHOOK_IMAGE:-shmguard-webhook:latest}
force=0
[ "${1:-}" = "--force" ] && { force=1; shift; }
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(base torch demo webhook)
export DOCKER_BUILDKIT=0 # the engine here has no buildx; the classic builder needs nothing else

log() { echo "build: $*" >&2; }

# Temporary folders, all under one that is removed however the script ends. (tmpdir runs in a
# $(...) subshell, so it cannot record what it made in a variable of this shell.)
work=$(mktemp -d "${TMPDIR:-/var/tmp}/shmguard-build.XXXXXX")
trap 'rm -rf "$work"' EXIT
tmpdir() { mktemp -d "$work/XXXXXX"; }

docker info >/dev/null 2>&1 || { log "no Docker engine answers (start dockerd, or run .ci/run)"; exit 1; }

# Prints the inputs hash an image was built from, or nothing when the image is missing.
image_inputs() {
  docker image inspect --format '{{ index .Config.Labels "org.shmguard.inputs" }}' "$1" 2>/dev/null || true
}

# True when IMAGE exists and was built from inputs HASH (and --force was not given).
up_to_date() {
  [ "$force" = 0 ] && [ "$(image_inputs "$1")" = "$2" ]
}

# Runs a command with its output kept aside; shows it only when the command fails. At a terminal
# (stderr is a tty, or SHMGUARD_PROGRESS=1) the output streams as it comes, so a long build shows progress.
quiet() {
  if [ "${SHMGUARD_PROGRESS:-}" = 1 ] || { [ -t 2 ] && [ "${SHMGUARD_PROGRESS:-}" != 0 ]; }; then
    "$@" >&2 || { log "failed: $*"; exit 1; }
    return
  fi
  local out
  out=$(tmpdir)/out
  "$@" >"$out" 2>&1 || { cat "$out" >&2; log "failed: $*"; exit 1; }
}

hash_of() { sha256sum | cut -c1-16; }

debian_mirror() {
  if [ -n "${SHMGUARD_DEBIAN_MIRROR:-}" ]; then echo "$SHMGUARD_DEBIAN_MIRROR"; return; fi
  local uri
  uri=$(grep -hoE '^URIs: *http[^ ]*/debian/?$' /etc/apt/sources.list.d/*.sources 2>/dev/null | head -n1 | awk '{print $2}')
  [ -n "$uri" ] || uri=$(grep -hoE '^deb +http[^ ]*/debian/? ' /etc/apt/sources.list 2>/dev/null | head -n1 | awk '{print $2}')
  echo "${uri:-http://deb.debian.org/debian}"
}

build_base() {
  local inputs
  inputs=$(printf '%s\n' "$suite" "$packages" "minbase" | hash_of)
  if up_to_date "$base_image" "$inputs"; then log "$base_image is up to date"; return; fi
  command -v debootstrap >/dev/null || { log "debootstrap is missing: apt-get install -y debootstrap"; exit 1; }
  local rootfs
  rootfs=$(tmpdir)
  log "debootstrap $suite into $rootfs (about a minute)"
  debootstrap --variant=minbase --include="$packages" "$suite" "$rootfs" "$(debian_mirror)" >"$rootfs.log" 2>&1 \
    || { tail -n 20 "$rootfs.log" >&2; exit 1; }
  rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/*
  tar -C "$rootfs" -c . | docker import \
    --change "LABEL org.shmguard.inputs=$inputs" \
    --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --change 'CMD ["/bin/bash"]' - "$base_image" >/dev/null
  log "imported $base_image"
}

# Downloads (once) the torch 2.13.0 CPU wheel, numpy (torch warns without it) and their dependencies for this host's Python (cp311 here, as in bookworm).
torch_wheels() {
  local dir=$cache/wheels/torch
  if [ ! -f "$dir/.complete" ]; then
    mkdir -p "$dir"
    log "downloading the torch 2.13.0 wheel and its dependencies into $dir"
    local links=()
    [ -d /opt/wheels ] && links=(--find-links /opt/wheels)
    quiet python3 -m pip download "${links[@]}" --only-binary=:all: -d "$dir" torch==2.13.0 numpy
    touch "$dir/.complete"
  fi
  echo "$dir"
}

build_torch() {
  local wheels inputs ctx
  wheels=$(torch_wheels)
  inputs=$( { cat "$here/Dockerfile.torch"; image_inputs "$base_image"; ls "$wheels"; } | hash_of)
  if up_to_date "$torch_image" "$inputs"; then log "$torch_image is up to date"; return; fi
  ctx=$(tmpdir)
  cp "$here/Dockerfile.torch" "$ctx/Dockerfile"
  mkdir "$ctx/wheels" && ln "$wheels"/*.whl "$ctx/wheels/" 2>/dev/null || cp "$wheels"/*.whl "$ctx/wheels/"
  log "building $torch_image"
  quiet docker build --build-arg "BASE=$base_image" --label "org.shmguard.inputs=$inputs" -t "$torch_image" "$ctx"
  log "built $torch_image"
}

build_demo() {
  local inputs ctx
  inputs=$( { cat "$here/demo/Dockerfile" "$here/demo/train.py" "$repo/pyproject.toml";
              (cd "$repo" && find shmguard -name '*.py' -print0 | sort -z | xargs -0 cat);
              image_inputs "$torch_image"; } | hash_of)
  if up_to_date "$demo_image" "$inputs"; then log "$demo_image is up to date"; return; fi
  ctx=$(tmpdir)
  cp "$here/demo/Dockerfile" "$here/demo/train.py" "$ctx/"
  mkdir "$ctx/wheels" "$ctx/self"
  # shmguard itself, built from this checkout, and its runtime dependencies (cached on the host).
  quiet python3 -m pip wheel --no-deps --no-build-isolation -w "$ctx/self" "$repo"
  mkdir -p "$cache/wheels/deps"
  quiet python3 -m pip download --only-binary=:all: -d "$cache/wheels/deps" "$(ls "$ctx"/self/shmguard-*.whl)[all]"
  rm -f "$cache"/wheels/deps/shmguard-*.whl
  cp "$cache"/wheels/deps/*.whl "$ctx/self"/shmguard-*.whl "$ctx/wheels/"
  rm -rf "$ctx/self"
  log "building $demo_image"
  quiet docker build --build-arg "TORCH_IMAGE=$torch_image" --label "org.shmguard.inputs=$inputs" -t "$demo_image" "$ctx"
  log "built $demo_image"
}

# shmguard with its webhook extra (prometheus_client, cryptography, orjson) on the base, non-root.
build_webhook() {
  local inputs ctx whl
  inputs=$( { cat "$here/webhook/Dockerfile" "$repo/pyproject.toml";
              (cd "$repo" && find shmguard -name '*.py' -print0 | sort -z | xargs -0 cat);
              image_inputs "$base_image"; } | hash_of)
  if up_to_date "$webhook_image" "$inputs"; then log "$webhook_image is up to date"; return; fi
  ctx=$(tmpdir)
  cp "$here/webhook/Dockerfile" "$ctx/"
  mkdir "$ctx/wheels" "$ctx/self"
  quiet python3 -m pip wheel --no-deps --no-build-isolation -w "$ctx/self" "$repo"
  whl=$(ls "$ctx"/self/shmguard-*.whl)
  mkdir -p "$cache/wheels/webhook"
  quiet python3 -m pip download --only-binary=:all: -d "$cache/wheels/webhook" "shmguard[webhook] @ file://$whl"
  rm -f "$cache"/wheels/webhook/shmguard-*.whl
  cp "$cache"/wheels/webhook/*.whl "$whl" "$ctx/wheels/"
  rm -rf "$ctx/self"
  log "building $webhook_image"
  quiet docker build --build-arg "BASE=$base_image" --label "org.shmguard.inputs=$inputs" -t "$webhook_image" "$ctx"
  log "built $webhook_image"
}

done_images=" "
once() { case $done_images in *" $1 "*) return ;; esac; "build_$1"; done_images="$done_images$1 "; }
for target in "${targets[@]}"; do
  case $target in
    base) once base ;;
    torch) once base; once torch ;;
    demo) once base; once torch; once demo ;;
    webhook) once base; once webhook ;;
    *) log "unknown image $target (base, torch, demo, webhook)"; exit 2 ;;
  esac
done
