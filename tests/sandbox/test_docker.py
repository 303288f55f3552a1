"""The docker backend's own contract (the hostile suite in test_hostile.py runs against it too)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from envhub.sandbox import IsolationPolicy
from envhub.sandbox.docker import LABEL, seccomp_profile
from tests.sandbox.conftest import _DOCKER_SKIP, open_backend

pytestmark = pytest.mark.skipif(_DOCKER_SKIP is not None, reason=_DOCKER_SKIP or "")


def _containers() -> int:
    import docker

    client = docker.from_env()
    try:
        return len(client.containers.list(all=True, filters={"label": LABEL}))
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
