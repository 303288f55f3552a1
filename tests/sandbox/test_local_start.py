"""How a local sandbox's processes start: with the slot's uid and gid, no supplementary group and no
capability, whether the C helper's launcher drops them (envhub.sandbox.native), `setpriv` does (what
lets subprocess vfork) or subprocess itself does."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the uid drop happens only as root")

STATUS_FIELDS = ("Uid", "Gid", "Groups", "CapInh", "CapPrm", "CapEff", "CapAmb")

# Run in a fresh interpreter that holds supplementary groups (root here holds none), so that one
# left on would show: on the host as itself, inside the sandbox as the overflow gid 65534.
_SCRIPT = """
import asyncio, json, os, sys
import envhub.sandbox as sandbox
from envhub.sandbox import local

FIELDS = {fields!r}

def status(text):
    lines = dict(line.split(":", 1) for line in text.splitlines() if ":" in line)
    return {{key: lines[key].strip() for key in FIELDS}}

async def main():
    if sys.argv[1] == "subprocess":
        local.SETPRIV = None  # a host without setpriv: subprocess drops the ids itself
    os.setgroups([0, 4, 27])
    async with sandbox.open("local", spare=False) as sb:
        served = await sb.exec("cat /proc/self/status")
        server = next(iter(sb._inits.values()))  # the exec server's pid on the host
        with open(f"/proc/{{server}}/status") as f:
            host = f.read()
        own = await sb._exec_in_own_namespaces(["cat", "/proc/self/status"], None, 20, None, None)
        print(json.dumps({{
            "uid": sb._slot.uid,
            "setpriv": local.SETPRIV,
            "host": status(host),
            "served": status(served.stdout),
            "own": status(own.stdout),
        }}))

asyncio.run(main())
"""


@pytest.mark.parametrize("drop", ["native", "setpriv", "subprocess"])
def test_sandbox_processes_hold_the_slot_uid_alone(drop: str) -> None:
    script = _SCRIPT.format(fields=STATUS_FIELDS)
    env = {**os.environ, "ENVHUB_SANDBOX_EXEC_SERVER": "native" if drop == "native" else "python"}
    done = subprocess.run(
        [sys.executable, "-c", script, drop], capture_output=True, text=True, timeout=120, env=env
    )
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout)
    if drop != "native":
        assert (seen["setpriv"] is not None) == (drop == "setpriv"), "util-linux's setpriv is missing here"
    ids = "\t".join([str(seen["uid"])] * 4)  # real, effective, saved and filesystem ids alike
    expected = {"Uid": ids, "Gid": ids, "Groups": "", **{cap: "0" * 16 for cap in STATUS_FIELDS[3:]}}
    assert seen["host"] == expected  # the exec server, as the host sees it
    assert seen["served"] == expected  # a command the exec server ran
    assert seen["own"] == expected  # a command in a bubblewrap of its own
