"""The docker backend's own contract (the hostile suite in test_hostile.py runs against it too)."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

import envhub.sandbox as sandbox
from envhub.sandbox import IsolationPolicy
from envhub.sandbox.docker import OWNER_LABEL, seccomp_profile
from tests.sandbox.conftest import _DOCKER_SKIP, DOCKER_IMAGE, open_backend

pytestmark = pytest.mark.skipif(_DOCKER_SKIP is not None, reason=_DOCKER_SKIP or "")


def _containers() -> int:
    import docker

    client = docker.from_env()
    try:
        # This process's own: another test run or rollout may use the same engine at the same time.
        return len(client.containers.list(all=True, filters={"label": f"{OWNER_LABEL}={os.getpid()}"}))
    finally:
        client.close()


async def test_files_stdin_report_and_no_leftover_containers(tmp_path: Path) -> None:
    before = _containers()
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "m.py").write_text("print(6 * 7)\n")
    async with await open_backend("docker", IsolationPolicy(memory_mb=200, cpus=0.5)) as sb:
        await sb.upload_dir(tmp_path / "src", "proj")
        r = await sb.exec("python3 m.py", cwd="proj")
        assert r.stdout == "42\n" and r.ok
        await sb.write_file("data.bin", bytes(range(256)))
        assert await sb.read_file("data.bin") == bytes(range(256))
        r = await sb.exec(["python3", "-c", "import sys; print(sys.stdin.read()[::-1])"], stdin="abc")
        assert r.stdout == "cba\n"
        await sb.download("proj", tmp_path / "back")
        assert (tmp_path / "back" / "m.py").read_text() == "print(6 * 7)\n"
        with pytest.raises(FileNotFoundError):
            await sb.read_file("missing")
        report = sb.report()
        assert report.backend == "docker" and "--memory=200m" in report.controls["memory"].how
        r = await sb.exec("grep -E '^(CapEff|NoNewPrivs|Seccomp):' /proc/self/status; id -u")
        assert "NoNewPrivs:\t1" in r.stdout and r.stdout.split()[-1] != "0"
    assert _containers() == before


def test_seccomp_profile_is_valid_json_with_the_deny_list() -> None:
    profile = json.loads(seccomp_profile())
    assert profile["defaultAction"] == "SCMP_ACT_ALLOW"
    denied = set(profile["syscalls"][0]["names"])
    assert {"ptrace", "unshare", "mount", "keyctl", "bpf"} <= denied


ROOT_IMAGE = f"envhub/python-root:test-{os.getpid()}"  # a tag of this run's own: others run beside it
WRITABLE = IsolationPolicy(writable_image=True, workdir="/srv", memory_mb=200, pids=32, wall_time_s=20)
"""The image's own /srv (root-owned) as the workdir, kept writable."""


@pytest.fixture(scope="module")
def root_image() -> Iterator[str]:
    """envhub/python with USER root, like SWE-bench's images, and a file in /srv owned by uid 65534."""
    import docker

    client = docker.from_env()
    prepare = "echo n > /srv/nobody.txt && chown 65534:65534 /srv/nobody.txt"
    container = client.containers.run(
        DOCKER_IMAGE, ["sh", "-c", prepare], user="0:0", network_mode="none", detach=True
    )
    try:
        assert container.wait(timeout=60)["StatusCode"] == 0
        container.commit(*ROOT_IMAGE.split(":"), changes=["USER root", "WORKDIR /srv"])
    finally:
        container.remove(force=True)
    yield ROOT_IMAGE
    client.images.remove(ROOT_IMAGE, force=True)
    client.close()


async def test_writable_image_keeps_the_image_filesystem_with_capabilities_dropped(root_image: str) -> None:
    before = _containers()
    async with await sandbox.open("docker", policy=WRITABLE, image=root_image) as sb:
        r = await sb.exec("echo kept > /srv/note && echo x >> /etc/debian_version && id -u && pwd")
        assert r.ok and r.stdout.split() == ["0", "/srv"], r
        r = await sb.exec("cat /srv/note; tail -n1 /etc/debian_version; sleep 60 & echo started")
        assert r.stdout.split() == ["kept", "x", "started"]
        # The background sleep died with its exec; the container's init (another uid) did not.
        r = await sb.exec("cat /proc/[0-9]*/comm 2>/dev/null | grep -c '^sleep$'")
        assert r.stdout.strip() == "1", r  # only `sleep infinity`, the container's keeper
        # Root without capabilities: no chown, no overriding another user's permission bits, no mount.
        r = await sb.exec("chown 0 /srv/nobody.txt")
        assert r.exit_code != 0 and "Operation not permitted" in r.stderr
        r = await sb.exec("echo y >> /srv/nobody.txt")
        assert r.exit_code != 0 and "Permission denied" in r.stderr
        mount = (
            "import ctypes, os; libc = ctypes.CDLL(None, use_errno=True); "
            "rc = libc.mount(b'none', b'/mnt', b'tmpfs', 0, None); print(rc, os.strerror(ctypes.get_errno()))"
        )
        r = await sb.exec(["python3", "-c", mount])
        assert r.stdout.startswith("-1 Operation not permitted"), r
        r = await sb.exec("grep -E '^(CapEff|CapPrm|NoNewPrivs):' /proc/self/status")
        assert "CapEff:\t0000000000000000" in r.stdout and "NoNewPrivs:\t1" in r.stdout
        # Still no network: loopback only, and connecting out fails at once.
        r = await sb.exec("ls /sys/class/net")
        assert r.stdout.split() == ["lo"]
        connect = "import socket; socket.create_connection(('1.1.1.1', 53), timeout=3)"
        r = await sb.exec(["python3", "-c", connect])
        assert r.exit_code != 0 and "unreachable" in r.stderr.lower(), r
        # /tmp stays a capped tmpfs, writable by the image's user.
        r = await sb.exec("echo t > /tmp/t && df -m /tmp | tail -n1")
        assert r.ok and "tmpfs" in r.stdout
        report = sb.report()
        assert report.details["mode"] == "writable_image" and report.details["exec_user"] == "root"
        assert report.unenforced() == ["disk"]
        assert "no size cap" in report.controls["disk"].how
        assert (
            "root (uid 0)" in report.controls["user"].how and "--cap-drop ALL" in report.controls["user"].how
        )
        assert "writable in the container's own layer" in report.controls["filesystem"].how
        assert report.controls["network"].how.startswith("--network none")
    async with await sandbox.open("docker", policy=WRITABLE, image=root_image) as sb:  # a fresh container
        r = await sb.exec("cat /srv/note")
        assert r.exit_code != 0  # nothing carried over
    assert _containers() == before


async def test_writable_image_runs_as_a_non_root_image_user() -> None:
    """envhub/python's user is uid 65534, the default mode's init uid: the init moves out of its reach."""
    async with await open_backend("docker", WRITABLE.model_copy(update={"workdir": "/tmp"})) as sb:
        r = await sb.exec("id -u; sleep 60 & touch /srv/x")
        assert r.stdout.split() == ["65534"] and "Permission denied" in r.stderr  # /srv is root's
        r = await sb.exec("id -u")  # the container survived the exec's `kill -9 -1`
        assert r.ok and sb.report().details["exec_user"] == "65534:65534"


async def test_default_mode_report_is_unchanged_by_the_option() -> None:
    async with await open_backend("docker", IsolationPolicy(memory_mb=200)) as sb:
        report = sb.report()
        assert report.fully_enforced and report.details["mode"] == "read-only root, tmpfs workdir"
        r = await sb.exec("touch /srv/x")
        assert r.exit_code != 0  # the image's own filesystem stays read-only


def test_writable_image_is_refused_by_the_other_backends() -> None:
    policy = IsolationPolicy(writable_image=True)
    policy.check_backend("docker")
    for backend in ("local", "e2b"):
        with pytest.raises(ValueError, match=f"only the docker backend.*the {backend} backend"):
            policy.check_backend(backend)
    IsolationPolicy().check_backend("local")
    assert IsolationPolicy().digest() != policy.digest()
