"""Both remote-env clients, envhub's `ws://` one and the OpenEnv format's `openenv:` one, read messages up
to the one cap `envhub.websocket.MAX_MESSAGE_BYTES` and refuse a larger one with the same error, against
a real `envhub serve` (its own process, uvicorn) that answers a reset with as many bytes as the seed."""

from __future__ import annotations

import select
import subprocess
import sys
import textwrap
from collections.abc import Callable, Iterator

import pytest

import envhub
from envhub.core import InfrastructureError
from envhub.websocket import MAX_MESSAGE_BYTES
from tests.envhub_testkit.processes import interrupt

LAUNCHER = textwrap.dedent(
    """
    import sys
    import envhub

    class Sized(envhub.MultiTurnEnv):
        '''Its first observation is `seed` bytes of text, so a test can ask for a message of any size.'''

        def setup(self, rng):
            return "x" * self.seed

        def respond(self, text):
            return envhub.Reply(text="ok", done=True)

        @envhub.reward
        def nothing(self) -> float:
            return 0.0

    envhub.register("sized-v0", Sized)
    from envhub.cli import app
    app(["serve", "sized-v0", "--port", "0"])
    """
)

MiB = 2**20


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    """The server's `http://HOST:PORT`."""
    process = subprocess.Popen(
        [sys.executable, "-c", LAUNCHER], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True
    )
    assert process.stdout is not None
    ready, _, _ = select.select([process.stdout], [], [], 60)
    line = process.stdout.readline() if ready else ""
    if "ws://" not in line:
        interrupt(process)
        raise RuntimeError(f"envhub serve did not start: {line!r}")
    yield line.split()[-1].replace("ws://", "http://")
    interrupt(process)


def envhub_client(server: str) -> envhub.Env:
    return envhub.make(f"{server}/sized-v0")


def openenv_client(server: str) -> envhub.Env:
    return envhub.make(f"openenv:{server}/openenv/sized-v0")


# Each client's reset frame, per byte of observation text: envhub's frame carries the text once, the
# OpenEnv observation twice (its chat `messages` and its `text`).
CLIENTS: list[tuple[Callable[[str], envhub.Env], int]] = [(envhub_client, 1), (openenv_client, 2)]


@pytest.mark.parametrize(("client", "copies"), CLIENTS, ids=["envhub", "openenv"])
async def test_both_clients_read_up_to_the_one_cap_and_refuse_past_it(
    server: str, client: Callable[[str], envhub.Env], copies: int
) -> None:
    """A reset just under the cap plays; just over it, the episode fails as the infrastructure's, naming
    the cap (the OpenEnv client's was 100 MiB, envhub's 64 MiB, before they shared one connection)."""
    env = client(server)
    try:
        observation, _ = await env.reset(seed=(MAX_MESSAGE_BYTES - MiB) // copies)
        assert sum(len(message.text) for message in observation) == (MAX_MESSAGE_BYTES - MiB) // copies
        with pytest.raises(InfrastructureError, match=r"over the client's cap of 64 MiB"):
            await env.reset(seed=(MAX_MESSAGE_BYTES + MiB) // copies)
    finally:
        await env.close()
