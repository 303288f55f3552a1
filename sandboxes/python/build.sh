#!/usr/bin/env bash
# Build envhub's minimal Python sandbox image without any image registry:
# debootstrap a Debian minbase root with python3-minimal, trim it, and `docker import` it.
# Usage: sandboxes/python/build.sh [TAG]   (default envhub/python:3-bookworm)
# Needs root, debootstrap and a running Docker engine. Takes about a minute on 2 cores.
set -euo pipefail

TAG="${1:-envhub/python:3-bookworm}"
SUITE="${ENVHUB_DEBIAN_SUITE:-bookworm}"
MIRROR="${ENVHUB_DEBIAN_MIRROR:-http://deb.debian.org/debian}"
ROOT="$(mktemp -d /var/tmp/envhub-rootfs.XXXXXX)"
trap 'rm -rf "$ROOT"' EXIT

debootstrap --variant=minbase --include=python3-minimal,python3.11 "$SUITE" "$ROOT" "$MIRROR"

# The image runs untrusted code as uid 65534 with a read-only root: no package manager state,
# docs or caches are needed inside it.
rm -rf "$ROOT"/var/cache/apt/* "$ROOT"/var/lib/apt/lists/* "$ROOT"/usr/share/doc/* \
       "$ROOT"/usr/share/man/* "$ROOT"/usr/share/info/* "$ROOT"/usr/share/locale/*
mkdir -p "$ROOT/work" && chmod 1777 "$ROOT/work"

tar -C "$ROOT" -c . | docker import \
    --change 'WORKDIR /work' \
    --change 'USER 65534:65534' \
    --change 'ENV PATH=/usr/local/bin:/usr/bin:/bin PYTHONDONTWRITEBYTECODE=1 HOME=/work' \
    --change 'CMD ["python3"]' \
    --message "envhub python sandbox ($SUITE minbase + python3-minimal)" \
    - "$TAG"
docker image inspect --format '{{.Id}} {{.Size}}' "$TAG"
