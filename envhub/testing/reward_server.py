"""A reward model served over HTTP, run as a real process, so `HTTPRewardModel` is tested over real sockets.

It speaks envhub's reward-model protocol (docs/judges.md): `POST /score` with
`{"inputs": [conversation, ...]}`, each conversation a list of OpenAI-format messages ending with the
assistant's answer, answers `{"scores": [float, ...]}`. It serves a local model directory with
`LocalRewardModel`, so requests that arrive together are micro-batched as they are in-process.
`GET /health` answers once the model is loaded; `GET /_stats` reports `forward_passes`.

Run by hand: `python -m envhub.testing.reward_server MODEL_DIR --port 8001`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import threading
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from envhub.messages import Message
from envhub.rewards.reward_model import LocalRewardModel, RewardModelError
from envhub.testing.process import ServerProcess


def read_inputs(body: bytes) -> list[tuple[list[Message], str]]:
    """(prompt, answer) pairs from a `/score` body, or ValueError saying what is wrong with it."""
    try:
        data = json.loads(body)
    except json.JSONDecodeError as exc:
        raise ValueError(f"the body is not JSON: {exc}") from exc
    inputs = data.get("inputs") if isinstance(data, dict) else None
    if not isinstance(inputs, list):
        raise ValueError('the body must be {"inputs": [conversation, ...]}')
    pairs = []
    for i, raw in enumerate(inputs):
        if not (isinstance(raw, list) and raw and all(isinstance(m, dict) for m in raw)):
            raise ValueError(f"inputs[{i}] must be a non-empty list of messages")
        try:
            messages = [Message.from_openai(m) for m in raw]
        except (ValueError, TypeError, KeyError) as exc:
            raise ValueError(f"inputs[{i}] has a message that cannot be read: {exc}") from exc
        if messages[-1].role != "assistant":
            raise ValueError(f"inputs[{i}] must end with the assistant's answer")
        pairs.append((messages[:-1], messages[-1].text))
    return pairs


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    model: LocalRewardModel
    loop: asyncio.AbstractEventLoop

    def log_message(self, format: str, *args: Any) -> None:
        return None

    def _json(self, code: int, value: object) -> None:
        data = json.dumps(value).encode()
        try:
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
        except OSError:  # the client gave up before the answer came
            self.close_connection = True

    def do_GET(self) -> None:
        if self.path == "/health":
            self._json(200, {"ok": True})
        elif self.path == "/_stats":
            self._json(200, {"forward_passes": self.model.forward_passes})
        else:
            self._json(404, {"error": f"no route {self.path}"})

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        if self.path.rstrip("/") != "/score":
            self._json(404, {"error": f"no route {self.path}; POST /score"})
            return
        try:
            pairs = read_inputs(body)
        except ValueError as exc:
            self._json(400, {"error": str(exc)})
            return
        # every handler thread hands its batch to one event loop, where the model micro-batches them
        pending = asyncio.run_coroutine_threadsafe(self.model.score_batch(pairs), self.loop)
        try:
            scores = pending.result()
        except RewardModelError as exc:
            self._json(500, {"error": str(exc)})
            return
        self._json(200, {"scores": scores})


def serve(host: str, port: int, model: LocalRewardModel) -> None:
    """Load the model, then serve until killed; print the bound port first, for a parent that asked for 0."""
    model.load()
    loop = asyncio.new_event_loop()
    threading.Thread(target=loop.run_forever, daemon=True).start()
    handler = type("Handler", (_Handler,), {"model": model, "loop": loop})
    server = ThreadingHTTPServer((host, port), handler)
    server.daemon_threads = True
    print(f"listening on {server.server_address[1]}", flush=True)
    server.serve_forever()


class RewardServer(ServerProcess):
    """A running reward-model server process: point `HTTPRewardModel(base_url)` at it."""

    @classmethod
    def start(
        cls,
        model_dir: str | Path,
        *,
        batch_size: int = 8,
        max_wait: float = 0.005,
        device: str = "cpu",
        host: str = "127.0.0.1",
        timeout: float = 120.0,
    ) -> RewardServer:
        """Start a server for `model_dir` on a free port of `host`; return once the model is loaded."""
        args = [
            str(model_dir),
            "--batch-size",
            str(batch_size),
            "--max-wait",
            str(max_wait),
            "--device",
            device,
        ]
        return cls.launch(
            "envhub.testing.reward_server", args, host=host, timeout=timeout, what="reward server"
        )

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def stats(self) -> dict[str, Any]:
        """What the server counted: `forward_passes`."""
        with urllib.request.urlopen(f"{self.base_url}/_stats", timeout=10) as response:
            stats: dict[str, Any] = json.loads(response.read())
            return stats


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Serve a local reward model over envhub's /score protocol.")
    parser.add_argument("model_dir")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8001)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--max-wait", type=float, default=0.005)
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args(argv)
    model = LocalRewardModel(
        args.model_dir, batch_size=args.batch_size, max_wait=args.max_wait, device=args.device
    )
    serve(args.host, args.port, model)


if __name__ == "__main__":
    main()
