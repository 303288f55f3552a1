"""How the exec server starts: the code compiled on the host when the sandbox's python3 has the same
bytecode, its source otherwise."""

from __future__ import annotations

import pytest

import envhub.sandbox as sandbox
from envhub.sandbox import exec_client


@pytest.mark.parametrize("magic", ["same", "other"])
async def test_the_server_starts_from_code_or_from_source(
    magic: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ENVHUB_SANDBOX_EXEC_SERVER", "python")  # the C server has no bytecode to load
    await sandbox.close_spares()  # nor may a spare started before bring it
    if magic == "other":  # a python3 of other bytecode: marked code it must not load, so it compiles
        stale = exec_client.SOURCE + b"\0" + b"\xff\xff\r\n" + b"not marshal data"
        monkeypatch.setattr(exec_client, "payload", lambda: stale)
    async with sandbox.open("local", spare=False) as sb:
        r = await sb.exec("echo served; ps -o pid=,comm= -p 1")
        assert r.stdout.split() == ["served", "1", "python3"], r
        assert sb.report().details["exec_server"] == "running"
