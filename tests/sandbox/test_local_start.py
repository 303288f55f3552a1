"""How a local sandbox's processes start: with the slot's uid and gid, no supplementary group and no
capability, whether `setpriv` drops them (what lets subprocess vfork) or subprocess itself does."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

import envhub.sandbox as sandbox
from envhub.sandbox import local
from envhub.sandbox.local import LocalSandbox

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the uid drop happens only as root")

STATUS_FIELDS = ("Uid", "Gid", "Groups", "CapInh", "CapPrm", "CapEff", "CapAmb")


def _status(text: str) -> dict[str, str]:
    fields = dict(line.split(":", 1) for line in text.splitlines() if ":" in line)
    return {key: fields[key].strip() for key in STATUS_FIELDS}


def _expected(uid: int) -> dict[str, str]:
    ids = "\t".join([str(uid)] * 4)  # real, effective, saved and filesystem ids alike
    return {"Uid": ids, "Gid": ids, "Groups": "", **{cap: "0" * 16 for cap in STATUS_FIELDS[3:]}}


@pytest.mark.parametrize("drop", ["setpriv", "subprocess"])
async def test_sandbox_processes_hold_the_slot_uid_alone(drop: str, monkeypatch: pytest.MonkeyPatch) -> None:
    if drop == "subprocess":
        monkeypatch.setattr(local, "SETPRIV", None)  # a host without setpriv: subprocess drops the ids
    else:
        assert local.SETPRIV is not None, "util-linux's setpriv is missing on this host"
    async with sandbox.open("local", spare=False) as sb:
        assert isinstance(sb, LocalSandbox)
        uid = sb._slot.uid
        served = await sb.exec("cat /proc/self/status")
        server = next(iter(sb._inits.values()))  # the exec server, as the host sees it
        on_host = _status(await asyncio.to_thread(Path(f"/proc/{server}/status").read_text))
        own = await sb._exec_in_own_namespaces(["cat", "/proc/self/status"], None, 20, None, None)
    assert on_host == _expected(uid)
    # Inside, a supplementary group left on would show as the overflow gid (65534): none must.
    for result in (served, own):
        assert result.ok, result.stderr
        assert _status(result.stdout) == _expected(uid)
