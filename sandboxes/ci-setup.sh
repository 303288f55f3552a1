#!/usr/bin/env bash
# Prepare a fresh Debian machine (as root) for the sandbox tests: bubblewrap for the `local` backend,
# a Docker engine plus envhub's Python image for the `docker` backend, Chromium for the browser envs.
# Safe to run again: each step checks before it acts.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
IMAGE="${ENVHUB_SANDBOX_IMAGE:-envhub/python:3-bookworm}"

need=()
command -v bwrap >/dev/null || need+=(bubblewrap)
command -v dockerd >/dev/null || need+=(docker.io)
command -v debootstrap >/dev/null || need+=(debootstrap)
command -v chromium >/dev/null || need+=(chromium)  # the browser environments drive it headless
if ((${#need[@]})); then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}"
fi

if ! docker info >/dev/null 2>&1; then
    # No bridge and no iptables: sandboxes run with --network none, and the CI host may not allow
    # netfilter changes.
    nohup dockerd --iptables=false --ip-forward=false --bridge=none \
        >/var/log/envhub-dockerd.log 2>&1 &
    for _ in $(seq 1 60); do
        docker info >/dev/null 2>&1 && break
        sleep 1
    done
    docker info >/dev/null 2>&1 || { echo "dockerd did not start; see /var/log/envhub-dockerd.log" >&2; exit 1; }
fi

if ! docker image inspect "$IMAGE" >/dev/null 2>&1; then
    "$HERE/python/build.sh" "$IMAGE"
fi
SWE_IMAGE="${ENVHUB_SWE_MINI_IMAGE:-envhub/swe-mini:bookworm}"
if ! docker image inspect "$SWE_IMAGE" >/dev/null 2>&1; then
    "$HERE/swe-mini/build.sh" "$SWE_IMAGE"
fi
echo "sandbox prerequisites ready: $(bwrap --version), docker $(docker version --format '{{.Server.Version}}'), image $IMAGE"
