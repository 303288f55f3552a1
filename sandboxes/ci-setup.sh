#!/usr/bin/env bash
# What the tests need from the system, for `make test` (which runs this first) and so for CI:
# Python's venv module, bubblewrap for the `local` sandbox and a C compiler for its exec server, a running
# Docker engine with envhub's images for the `docker` sandbox, swe-mini and the desktop's docker backend,
# Debian's Chromium for the browser
# envs (Playwright drives it), and the desktop env's X11 stack: Xvfb, xdotool, xdpyinfo/xprop, openbox
# and the apps it runs (envs/desktop).
# As root it installs, starts and builds what is missing; each step checks before it acts, so running it
# again costs seconds. As another user it changes nothing: it prints the commands to run, and fails.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
IMAGE="${ENVHUB_SANDBOX_IMAGE:-envhub/python:3-bookworm}"
SWE_IMAGE="${ENVHUB_SWE_MINI_IMAGE:-envhub/swe-mini:bookworm}"
DESKTOP_IMAGE="${ENVHUB_DESKTOP_IMAGE:-envhub/desktop:bookworm}"  # the desktop env's docker backend
DOCKERD_LOG=/var/log/envhub-dockerd.log

packages=()
python3 -c 'import venv, ensurepip' 2>/dev/null || packages+=(python3-venv)
command -v bwrap >/dev/null || packages+=(bubblewrap)
command -v dockerd >/dev/null || packages+=(docker.io)
command -v debootstrap >/dev/null || packages+=(debootstrap)  # builds the images without a registry
command -v chromium >/dev/null || packages+=(chromium)
# A C compiler and libc's headers: local sandboxes build their exec server in C (envhub/sandbox/native.py),
# and the tests run the exec-server suite against it.
command -v cc >/dev/null || packages+=(gcc)
[ -e /usr/include/spawn.h ] || packages+=(libc6-dev)
# envs/desktop: each command names the package that brings it (x11-utils: xdpyinfo and xprop).
for pair in Xvfb:xvfb xdotool:xdotool xdpyinfo:x11-utils xprop:x11-utils openbox:openbox xterm:xterm \
    mousepad:mousepad localc:libreoffice-calc lowriter:libreoffice-writer pcmanfm:pcmanfm; do
    command -v "${pair%%:*}" >/dev/null || packages+=("${pair#*:}")
done

engine_up() { docker info >/dev/null 2>&1; }
have_image() { docker image inspect "$1" >/dev/null 2>&1; }

if [ "$(id -u)" != 0 ]; then
    todo=()
    ((${#packages[@]})) && todo+=("sudo apt-get install -y --no-install-recommends ${packages[*]}")
    if ! engine_up; then
        if [ -S /var/run/docker.sock ]; then
            todo+=("sudo usermod -aG docker ${USER:-$(id -un)}   # then log in again: the tests talk to the engine as you")
        else
            todo+=("sudo bash $HERE/ci-setup.sh   # starts dockerd and builds $IMAGE, $SWE_IMAGE and $DESKTOP_IMAGE")
        fi
    elif ! have_image "$IMAGE" || ! have_image "$SWE_IMAGE" || ! have_image "$DESKTOP_IMAGE"; then
        todo+=("sudo bash $HERE/ci-setup.sh   # builds $IMAGE, $SWE_IMAGE and $DESKTOP_IMAGE (debootstrap needs root)")
    fi
    if ((${#todo[@]})); then
        echo "make test needs these from the system, and only root can install them. Run:" >&2
        printf '  %s\n' "${todo[@]}" >&2
        echo "then make test again (or run all of make test as root, which does this itself)." >&2
        exit 1
    fi
    echo "test prerequisites ready: $(bwrap --version), docker $(docker version --format '{{.Server.Version}}')"
    exit 0
fi

if ((${#packages[@]})); then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${packages[@]}"
fi

if ! engine_up; then
    # No bridge and no iptables: sandboxes run with --network none, and the host may not allow
    # netfilter changes. setsid: the engine outlives the make that started it, for the next run too.
    setsid nohup dockerd --iptables=false --ip-forward=false --bridge=none >"$DOCKERD_LOG" 2>&1 < /dev/null &
    for _ in $(seq 1 60); do
        engine_up && break
        sleep 1
    done
    engine_up || { echo "dockerd did not start; see $DOCKERD_LOG" >&2; exit 1; }
fi

have_image "$IMAGE" || "$HERE/python/build.sh" "$IMAGE"
have_image "$SWE_IMAGE" || "$HERE/swe-mini/build.sh" "$SWE_IMAGE"
have_image "$DESKTOP_IMAGE" || "$HERE/desktop/build.sh" "$DESKTOP_IMAGE"  # 887 MB, about 2 minutes
echo "test prerequisites ready: $(bwrap --version), docker $(docker version --format '{{.Server.Version}}')," \
    "images $IMAGE $SWE_IMAGE $DESKTOP_IMAGE, $(chromium --version 2>/dev/null || echo chromium)"
