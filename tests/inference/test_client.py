"""The one retrying HTTP client every model caller shares, against a real local HTTP server."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from envhub.inference.client import RetryingClient, ServerGaveUp
from envhub.rewards import HTTPRewardModel


class Scripted(ThreadingHTTPServer):
    """Answers each POST with the next (status, headers) of its script, then 200 with one score."""

    def __init__(self, script: list[tuple[int, dict[str, str]]]) -> None:
        super().__init__(("127.0.0.1", 0), Handler)
        self.script = list(script)
        self.requests = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class Handler(BaseHTTPRequestHandler):
    server: Scripted

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers["Content-Length"]))
        self.server.requests += 1
        status, headers = self.server.script.pop(0) if self.server.script else (200, {})
        body = json.dumps({"scores": [1.5]} if status == 200 else {"error": "busy"}).encode()
        self.send_response(status)
        for name, value in headers.items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        return


@pytest.fixture
def serve() -> Iterator[list[Scripted]]:
    servers: list[Scripted] = []
    yield servers
    for server in servers:
        server.shutdown()
        server.server_close()


def start(servers: list[Scripted], script: list[tuple[int, dict[str, str]]]) -> Scripted:
    server = Scripted(script)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    servers.append(server)
    return server


def test_the_reward_model_waits_as_long_as_retry_after_says_not_its_backoff(serve: list[Scripted]) -> None:
    """A backoff of ten minutes would stall the test; `Retry-After: 0` lets the retry go at once."""
    server = start(serve, [(503, {"Retry-After": "0"}), (429, {"Retry-After": "0"})])
    remote = HTTPRewardModel(server.url, max_retries=2, backoff=600, max_backoff=600)

    async def score() -> float:
        try:
            return await asyncio.wait_for(remote.score("q", "a"), 120)
        finally:
            await remote.close()

    assert asyncio.run(score()) == 1.5
    assert server.requests == 3


def test_giving_up_names_every_kind_of_failure_in_order(serve: list[Scripted]) -> None:
    server = start(serve, [(503, {}), (429, {"Retry-After": "0"}), (503, {})])
    client = RetryingClient(timeout=10, max_retries=2, backoff=0, max_backoff=0)

    async def post() -> None:
        try:
            await client.post(server.url, {})
        finally:
            await client.close()

    with pytest.raises(ServerGaveUp) as caught:
        asyncio.run(post())
    assert [f.kind for f in caught.value.failures] == ["503", "429", "503"]
    assert caught.value.summary().startswith("failed 3 attempts (503, 429, 503); the last answered 503")
    assert caught.value.failures[1].retry_after == 0.0


def test_a_status_that_is_not_retried_comes_back_at_once(serve: list[Scripted]) -> None:
    server = start(serve, [(404, {})])
    client = RetryingClient(timeout=10, max_retries=3, backoff=0, max_backoff=0)

    async def post() -> int:
        try:
            return (await client.post(server.url, {})).status_code
        finally:
            await client.close()

    assert asyncio.run(post()) == 404
    assert server.requests == 1
