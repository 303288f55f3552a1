#!/usr/bin/env bash
# Build the image the desktop env's `docker` backend runs in, without any image registry: debootstrap a
# Debian minbase root, install the X11 stack and the apps from the Debian mirror (no recommends, no docs,
# man pages or translations), and `docker import` it. The configuration the local backend binds from the
# host (/etc/fonts, /etc/X11, /etc/xdg/openbox, /etc/libreoffice) is the packages' own, inside the image.
# Usage: sandboxes/desktop/build.sh [TAG]   (default envhub/desktop:bookworm)
# Needs root, debootstrap, a Debian mirror and a running Docker engine. About 2 minutes on 2 cores here;
# the image is 887 MB (LibreOffice and its libraries are most of it).
set -euo pipefail

TAG="${1:-envhub/desktop:bookworm}"
SUITE="${ENVHUB_DEBIAN_SUITE:-bookworm}"
MIRROR="${ENVHUB_DEBIAN_MIRROR:-http://deb.debian.org/debian}"
PACKAGES=(xvfb xdotool x11-utils openbox xterm mousepad libreoffice-calc libreoffice-writer pcmanfm
          fonts-dejavu-core python3-minimal)
ROOT="$(mktemp -d /var/tmp/envhub-desktop-rootfs.XXXXXX)"
cleanup() {
    umount "$ROOT/proc" 2>/dev/null || true
    rm -rf "$ROOT"
}
trap cleanup EXIT

debootstrap --variant=minbase "$SUITE" "$ROOT" "$MIRROR"

# dpkg skips docs, man pages and translations as it unpacks (LibreOffice's own UI strings live under
# /usr/lib/libreoffice, not /usr/share/locale); no service starts inside the chroot.
cat >"$ROOT/etc/dpkg/dpkg.cfg.d/envhub-lean" <<'CFG'
path-exclude=/usr/share/doc/*
path-exclude=/usr/share/man/*
path-exclude=/usr/share/info/*
path-exclude=/usr/share/locale/*
path-exclude=/usr/share/help/*
path-exclude=/usr/share/gtk-doc/*
CFG
printf '#!/bin/sh\nexit 101\n' >"$ROOT/usr/sbin/policy-rc.d" && chmod 755 "$ROOT/usr/sbin/policy-rc.d"
cp /etc/resolv.conf "$ROOT/etc/resolv.conf"
mount -t proc proc "$ROOT/proc"
chroot "$ROOT" /usr/bin/env DEBIAN_FRONTEND=noninteractive PATH=/usr/sbin:/usr/bin:/sbin:/bin \
    sh -c "apt-get update -qq && apt-get install -y -qq --no-install-recommends ${PACKAGES[*]} && apt-get clean"
umount "$ROOT/proc"

rm -rf "$ROOT"/var/cache/apt/* "$ROOT"/var/lib/apt/lists/* "$ROOT"/usr/share/doc/* \
       "$ROOT"/usr/share/man/* "$ROOT"/usr/share/info/* "$ROOT"/usr/share/locale/* \
       "$ROOT/usr/sbin/policy-rc.d" "$ROOT/etc/resolv.conf" "$ROOT"/var/log/*.log "$ROOT"/var/log/apt/*
: >"$ROOT/etc/resolv.conf"
mkdir -p "$ROOT/work" && chmod 1777 "$ROOT/work"

tar -C "$ROOT" -c . | docker import \
    --change 'WORKDIR /work' \
    --change 'USER 65534:65534' \
    --change 'ENV PATH=/usr/local/bin:/usr/bin:/bin HOME=/work LANG=C.UTF-8' \
    --change 'CMD ["/bin/sh"]' \
    --message "envhub desktop sandbox ($SUITE minbase + Xvfb, openbox, xdotool, Mousepad, LibreOffice)" \
    - "$TAG"
docker image inspect --format '{{.Id}} {{.Size}}' "$TAG"
