"""The C launcher's trimmed mount namespace (exec_server.c, trim_mounts): bubblewrap starts with the mounts
its sandbox binds and nothing else of the host's (another sandbox's scratch tmpfs, /sys), the host's own
table untouched; a sandbox still sees every file of a bind whose source sits on, or holds, a mount of its
own; and a launcher that cannot trim still starts its program."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

import envhub.sandbox as sandbox
from envhub.sandbox import native
from envhub.sandbox.libc import mount_tmpfs, umount
from envhub.sandbox.policy import IsolationPolicy

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or native.exec_server() is None,
    reason="the launcher trims only as root, and only the C helper launches (needs a C compiler)",
)


def mount_points(table: str) -> list[str]:
    return [line.split()[4] for line in table.splitlines()]


@pytest.fixture
def tmpfs(tmp_path: Path) -> Iterator[list[Path]]:
    """tmpfs mounts made by the test, unmounted (deepest first) after it."""
    made: list[Path] = []
    yield made
    unmount_all(made)


def unmount_all(made: list[Path]) -> None:
    for path in reversed(made):
        with contextlib.suppress(OSError):
            umount(str(path))
    made.clear()


def mounted(at: Path, made: list[Path]) -> Path:
    at.mkdir(parents=True, exist_ok=True)
    mount_tmpfs(str(at), "size=1m,mode=0755")
    made.append(at)
    return at


def launch(*kept: str, staging: Path) -> subprocess.CompletedProcess[str]:
    helper = native.exec_server()
    assert helper is not None
    keep = [str(len(kept)), str(staging), *kept] if kept else ["0"]
    return subprocess.run(
        [str(helper), "launch", "-", "0", "0", *keep, "--", "/bin/cat", "/proc/self/mountinfo"],
        capture_output=True,
        text=True,
        check=True,
        timeout=30,
    )


def test_bwrap_gets_the_kept_mounts_alone_and_the_host_keeps_its_own(
    tmp_path: Path, tmpfs: list[Path]
) -> None:
    own = mounted(tmp_path / "own", tmpfs)
    (own / "staging").mkdir()
    (own / "work").mkdir()
    neighbour = mounted(tmp_path / "neighbour", tmpfs)
    kept = ("/usr", "/proc", "/dev/null", str(own / "work"))
    inside = mount_points(launch(*kept, staging=own / "staging").stdout)
    assert str(own) in inside and "/proc" in inside and "/dev" in inside and inside[0] == "/"
    assert str(neighbour) not in inside
    assert not any(point.startswith("/sys") for point in inside)
    host = mount_points(Path("/proc/self/mountinfo").read_text())
    assert str(neighbour) in host and str(own) in host and "/sys" in host


def test_a_launcher_that_cannot_trim_still_starts_its_program(tmp_path: Path, tmpfs: list[Path]) -> None:
    """A staging folder that is not there (as on a host whose root cannot be switched): the program runs
    with the host's mounts, as before trimming existed: slower, never different."""
    neighbour = mounted(tmp_path / "neighbour", tmpfs)
    inside = mount_points(launch("/usr", "/proc", staging=tmp_path / "missing").stdout)
    assert str(neighbour) in inside


@pytest.fixture
def nested_mounts(tmpfs: list[Path]) -> Iterator[Path]:
    """A tmpfs holding a file and, two folders down, a tmpfs of its own with another, in a folder the
    slot's uid can reach (pytest's tmp_path is root's alone)."""
    folder = Path(tempfile.mkdtemp(prefix="envhub-test-launcher-"))
    folder.chmod(0o755)
    data = mounted(folder / "data", tmpfs)
    (data / "top.txt").write_text("top")
    nested = mounted(data / "sub" / "nested", tmpfs)
    (nested / "deep.txt").write_text("deep")
    yield data
    unmount_all(tmpfs)  # before the folder goes: this fixture ends before `tmpfs` does
    shutil.rmtree(folder)


async def test_a_bind_whose_source_sits_on_or_holds_its_own_mount_shows_every_file(
    nested_mounts: Path,
) -> None:
    """The launcher keeps the mounts at and beneath each bind's source: bwrap's binds are recursive."""
    policy = IsolationPolicy(ro_binds={str(nested_mounts): "/data"})
    async with sandbox.open("local", policy=policy) as sb:
        result = await sb.exec(["cat", "/data/top.txt", "/data/sub/nested/deep.txt"])
    assert (result.exit_code, result.stdout) == (0, "topdeep"), result.stderr
