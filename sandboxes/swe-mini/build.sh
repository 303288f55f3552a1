#!/usr/bin/env bash
# Build the image the `docker` runtime of `swe-mini` grades in, without any image registry:
# debootstrap a Debian minbase root with python3, git and pytest (Debian's python3-pytest), trim it,
# and `docker import` it. The swe-mini repositories are uploaded at run time, like the local runtime's.
# Usage: sandboxes/swe-mini/build.sh [TAG]   (default envhub/swe-mini:bookworm)
# Needs root, debootstrap, a Debian mirror and a running Docker engine. About two minutes on 2 cores.
set -euo pipefail

TAG="${1:-envhub/swe-mini:bookworm}"
SUITE="${ENVHUB_DEBIAN_SUITE:-bookworm}"
MIRROR="${ENVHUB_DEBIAN_MIRROR:-http://deb.debian.org/debian}"
ROOT="$(mktemp -d /var/tmp/envhub-swe-rootfs.XXXXXX)"
trap 'rm -rf "$ROOT"' EXIT

debootstrap --variant=minbase --include=python3-minimal,python3.11,python-is-python3,python3-pytest,git,patch \
    "$SUITE" "$ROOT" "$MIRROR"

rm -rf "$ROOT"/var/cache/apt/* "$ROOT"/var/lib/apt/lists/* "$ROOT"/usr/share/doc/* \
       "$ROOT"/usr/share/man/* "$ROOT"/usr/share/info/* "$ROOT"/usr/share/locale/*
mkdir -p "$ROOT/testbed" && chmod 1777 "$ROOT/testbed"

# HOME=/tmp: the official eval scripts run `git config --global`, which needs a writable home.
tar -C "$ROOT" -c . | docker import \
    --change 'WORKDIR /testbed' \
    --change 'USER 65534:65534' \
    --change 'ENV PATH=/usr/local/bin:/usr/bin:/bin PYTHONDONTWRITEBYTECODE=1 HOME=/tmp' \
    --change 'CMD ["python3"]' \
    --message "envhub swe-mini grading image ($SUITE minbase + python3, git, pytest)" \
    - "$TAG"
docker image inspect --format '{{.Id}} {{.Size}}' "$TAG"
