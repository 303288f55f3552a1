"""Forking a local sandbox: a fresh sandbox, and each writable area of the parent copied into it.

The copy is a `tar` pipeline, one end per sandbox's uid: the parent's files are read as the parent's
slot uid and written as the child's, so the host never reads or writes the scratch areas with more
rights than the sandboxes own (a symlink the agent planted, or swapped in mid-copy, leads nowhere the
sandbox could not already go). Every file is copied, none is linked, so nothing writable is shared;
a symlink is copied as a symlink and never followed; sparse files stay sparse. Processes are not
carried: the child starts with none running.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import Mapping
from pathlib import Path

from envhub.sandbox.bwrap import DEFAULT_PATH
from envhub.sandbox.results import SandboxError

READ = ["tar", "--create", "--sparse", "--file=-", "--directory"]
WRITE = ["tar", "--extract", "--file=-", "--no-same-owner", "--preserve-permissions", "--directory"]
TAR_CHANGED = 1
"""`tar --create`'s status when a file changed while it was read (a process still writing): the copy
holds what was there, as a fork between commands promises, not an error."""


async def copy_areas(
    source: Mapping[str, Path], reader: int, dest: Mapping[str, Path], writer: int, *, limit_s: float
) -> None:
    """Copy each writable area (the workdir, /tmp, /dev/shm: inside path -> host directory) of a parent
    sandbox, whose slot uid is `reader`, into the same area of its fresh child, whose uid is `writer`."""
    for inside, area in source.items():
        await copy_area(area, dest[inside], reader=reader, writer=writer, limit_s=limit_s)


async def copy_area(source: Path, dest: Path, *, reader: int, writer: int, limit_s: float) -> None:
    """Copy the tree under `source` into the (empty) `dest`: read as uid `reader`, written as `writer`.

    Raises SandboxError saying what tar said when the copy fails or takes longer than `limit_s` seconds.
    """
    read_end, write_end = os.pipe()
    try:
        producer = await _tar([*READ, str(source), "."], reader, stdout=write_end)
        os.close(write_end)
        write_end = -1
        try:
            consumer = await _tar([*WRITE, str(dest)], writer, stdin=read_end)
        except BaseException:
            producer.kill()
            await producer.wait()
            raise
    finally:
        for fd in (read_end, write_end):
            if fd >= 0:
                os.close(fd)
    try:
        async with asyncio.timeout(limit_s):
            (_, made), (_, wrote) = await asyncio.gather(producer.communicate(), consumer.communicate())
    except TimeoutError:
        for proc in (producer, consumer):
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            await proc.wait()
        raise SandboxError(
            f"copying the sandbox's {source.name} area took longer than {limit_s:g} s"
        ) from None
    if producer.returncode not in (0, TAR_CHANGED) or consumer.returncode != 0:
        said = (made + wrote).decode(errors="replace").strip()
        raise SandboxError(f"copying the sandbox's {source.name} area into its fork failed: {said}")


async def _tar(
    argv: list[str], uid: int, *, stdin: int | None = None, stdout: int | None = None
) -> asyncio.subprocess.Process:
    as_root = os.geteuid() == 0
    return await asyncio.create_subprocess_exec(
        *argv,
        stdin=stdin if stdin is not None else asyncio.subprocess.DEVNULL,
        stdout=stdout if stdout is not None else asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
        env={"PATH": DEFAULT_PATH, "LC_ALL": "C"},
        cwd="/",
        user=uid if as_root else None,
        group=uid if as_root else None,
        extra_groups=[] if as_root else None,
    )
