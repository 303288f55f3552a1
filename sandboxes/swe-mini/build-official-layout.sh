#!/usr/bin/env bash
# Build an image of one swe-mini instance laid out like SWE-bench's official per-instance images
# (swebench/sweb.eval.x86_64.*), so the docker runtime's official-image path runs end to end without
# a registry: the repository at base_commit in /testbed, owned by root and `chmod -R 777` (as the
# harness leaves it), with later history still reachable from a tag (hidden at run time), an untracked
# install artefact, USER root, and a stand-in /opt/miniconda3: `source /opt/miniconda3/bin/activate;
# conda activate testbed` puts /opt/miniconda3/envs/testbed/bin (a venv over the image's Python, with
# pytest) first on PATH. Only that activation makes `pytest` a command: the image's own is removed.
# Usage: sandboxes/swe-mini/build-official-layout.sh INSTANCE_ID [TAG]
#        (default TAG envhub/swe-mini-layout:INSTANCE_ID; rebuilt only when this script changed)
# Needs a Docker engine, git, and envhub/swe-mini:bookworm (sandboxes/swe-mini/build.sh). A few seconds.
set -euo pipefail

ID="${1:?usage: build-official-layout.sh INSTANCE_ID [TAG]}"
TAG="${2:-envhub/swe-mini-layout:$ID}"
BASE="${ENVHUB_SWE_MINI_IMAGE:-envhub/swe-mini:bookworm}"
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="${ID#mini__}"
BUNDLE="$HERE/../../envs/swe/envhub_swe/mini/data/${REPO%-*}.bundle"
STAMP="$(sha256sum "${BASH_SOURCE[0]}" | cut -c1-16)-$(git hash-object "$BUNDLE" | cut -c1-12)"

if [ "$(docker image inspect -f '{{index .Config.Labels "envhub.layout"}}' "$TAG" 2>/dev/null)" = "$STAMP" ]; then
    echo "$TAG is up to date"
    exit 0
fi
[ -f "$BUNDLE" ] || { echo "no swe-mini bundle for $ID at $BUNDLE" >&2; exit 2; }

WORK="$(mktemp -d)"
CID=""
trap 'rm -rf "$WORK"; [ -z "$CID" ] || docker rm -f "$CID" >/dev/null' EXIT
export GIT_CONFIG_GLOBAL=/dev/null GIT_CONFIG_NOSYSTEM=1
mkdir "$WORK/root"
git clone -q "$BUNDLE" "$WORK/root/testbed"
git -C "$WORK/root/testbed" tag later-work origin/HEAD  # like the release tags the harness's clones keep
git -C "$WORK/root/testbed" checkout -q -B main "refs/tags/$ID"
git -C "$WORK/root/testbed" remote remove origin

cat > "$WORK/root/envhub-layout.sh" <<'SETUP'
set -eu
chown -R root:root /testbed && chmod -R 777 /testbed
mkdir -p "/testbed/$1.egg-info" && echo "Name: $1" > "/testbed/$1.egg-info/PKG-INFO"
mkdir -p /opt/miniconda3/bin /opt/miniconda3/envs
python3 -m venv --without-pip --system-site-packages /opt/miniconda3/envs/testbed
printf '#!/opt/miniconda3/envs/testbed/bin/python\nimport sys\nfrom pytest import console_main\nsys.exit(console_main())\n' \
    > /opt/miniconda3/envs/testbed/bin/pytest
chmod 755 /opt/miniconda3/envs/testbed/bin/pytest
rm -f /usr/bin/pytest /usr/bin/pytest-3 /usr/bin/py.test /usr/bin/py.test-3
cat > /opt/miniconda3/bin/activate <<'ACTIVATE'
# envhub's stand-in for miniconda's activate, at the path SWE-bench's eval scripts source.
export CONDA_PREFIX=/opt/miniconda3 CONDA_DEFAULT_ENV=base CONDA_SHLVL=1
export PATH="/opt/miniconda3/bin:$PATH"
conda() {
    if [ "${1:-}" = activate ] && [ -d "/opt/miniconda3/envs/${2:-}" ]; then
        export CONDA_PREFIX="/opt/miniconda3/envs/$2" CONDA_DEFAULT_ENV="$2"
        export PATH="$CONDA_PREFIX/bin:$PATH"
    else
        echo "conda $*: envhub's layout image only knows 'conda activate testbed'" >&2
        return 1
    fi
}
ACTIVATE
rm /envhub-layout.sh
# The harness's last set-up step: what the install changed (here: every file's mode) is committed.
cd /testbed && git -c user.email=setup@swebench.config -c user.name=SWE-bench commit -q --allow-empty -am SWE-bench
SETUP

CID="$(docker create --user 0:0 --network none "$BASE" /bin/sh /envhub-layout.sh "${REPO%-*}")"
tar -C "$WORK/root" -c . | docker cp - "$CID:/"
docker start -a "$CID"
docker commit \
    --change 'USER root' \
    --change 'WORKDIR /testbed' \
    --change 'ENV HOME=/root' \
    --change "LABEL envhub.layout=$STAMP" \
    --message "envhub: $ID laid out like SWE-bench's official per-instance images" \
    "$CID" "$TAG" >/dev/null
docker image inspect --format '{{.Id}} {{.Size}}' "$TAG"
