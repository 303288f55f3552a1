"""How the C exec server is built and trusted (envhub.sandbox.native): built once into a cache of this
uid's own and reused; never used when someone else could have written it, or when it does not run."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

import envhub.sandbox as sandbox
from envhub.sandbox import native


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    root = tmp_path / "envhub" / "exec-server"
    monkeypatch.setattr(native, "_cache_root", lambda: root)
    monkeypatch.setenv("ENVHUB_SANDBOX_EXEC_SERVER", "auto")
    native._built.cache_clear()
    yield root
    native._built.cache_clear()  # the next test finds the real cache's binary again


def test_built_once_then_reused(cache: Path) -> None:
    first = native.exec_server()
    assert first is not None and first.is_relative_to(cache) and os.access(first, os.X_OK)
    made = first.stat().st_mtime_ns
    native._built.cache_clear()  # a new process
    assert native.exec_server() == first and first.stat().st_mtime_ns == made


def test_a_binary_someone_else_could_have_written_is_built_again(cache: Path) -> None:
    first = native.exec_server()
    assert first is not None
    planted = b"#!/bin/sh\necho planted\n"
    first.write_bytes(planted)
    if os.geteuid() == 0:
        os.chown(first, 65534, 65534)  # another uid's file
    else:
        first.parent.chmod(0o777)  # a folder anyone may write to
    native._built.cache_clear()
    again = native.exec_server()
    assert again == first and first.read_bytes() != planted and first.stat().st_uid == os.geteuid()


async def test_a_binary_that_does_not_run_is_not_used(cache: Path) -> None:
    """A cache on a noexec mount, say: the Python server serves instead, and says nothing is wrong."""
    first = native.exec_server()
    assert first is not None
    first.write_bytes(b"#!/bin/sh\nexit 3\n")  # ours and trusted, but it fails its trial run
    native._built.cache_clear()
    assert native.exec_server() is None
    await sandbox.close_spares()  # a spare started before would bring the C server
    async with sandbox.open("local", spare=False) as sb:
        r = await sb.exec("echo fine; ps -o comm= -p 1")
        assert r.stdout.split() == ["fine", "python3"], r


def _dynamically_linked(binary: Path) -> bool:
    """Whether the ELF file names a program interpreter (the dynamic loader)."""
    return b"ld-linux" in binary.read_bytes()[:4096]


def _position_independent(binary: Path) -> bool:
    """ELF type ET_DYN: loaded at a random address (ASLR)."""
    return int.from_bytes(binary.read_bytes()[16:18], "little") == 3


def _compiler_finds(name: str) -> bool:
    """Whether the C compiler has this file to link with (it prints the bare name when it has not)."""
    compiler = native.find_compiler()
    if compiler is None:
        return False
    found = subprocess.run([compiler, f"-print-file-name={name}"], capture_output=True, text=True).stdout
    return found.strip() != name


def test_linked_static_and_position_independent_where_the_host_can(cache: Path) -> None:
    if not (_compiler_finds("libc.a") and _compiler_finds("rcrt1.o")):
        pytest.skip("no static-pie libc on this host: the dynamic fallback is tested below")
    built = native.exec_server()
    assert built is not None and not _dynamically_linked(built) and _position_independent(built)


def test_a_host_that_cannot_link_static_gets_a_dynamic_server(
    cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """exec_server() hands out a binary only after its trial run (a launch of /bin/true) succeeded."""
    monkeypatch.setattr(native, "LINKS", (("-static-pie", "-lno-such-library-envhub"), native.LINKS[-1]))
    built = native.exec_server()
    assert built is not None and _dynamically_linked(built) and _position_independent(built)
