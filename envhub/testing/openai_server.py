"""A scripted OpenAI-compatible chat server, run as a real process, for testing clients against real faults.

Retries, timeouts and garbage bodies are only believable over real sockets: a mocked transport never
hangs half-way or drops a connection. Tests start it with `OpenAIServer.start()`, give it a script of
replies (`text`, `tool_call`, `status`, `garbage`, `hang`), point a client at `base_url`, then read back
what the client sent with `requests()`.

Completions imitate vLLM: with `logprobs: true` the reply carries per-token logprobs, with
`return_tokens_as_token_ids: true` tokens read `"token_id:N"`, and with `return_token_ids: true` the
choice carries `token_ids` and the response `prompt_token_ids`. Its "tokenizer" is UTF-8 bytes of a
plain transcript in which every turn's prompt extends the previous prompt plus completion exactly, as a
well-behaved chat template does.

`script(..., tool_flags=False)` answers tool requests as vLLM started without `--enable-auto-tool-choice
--tool-call-parser` does (400, vLLM's own error text); `token_fields="reject"` refuses vLLM's token-id
fields as OpenAI's API does, and `token_fields="ignore"` drops them silently as most other
OpenAI-compatible servers do.

Run by hand: `python -m envhub.testing.openai_server --port 8000`.
"""

from __future__ import annotations

import argparse
import json
import threading
import time
import urllib.request
from collections import deque
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Literal

from envhub.messages import Message
from envhub.testing.process import ServerProcess
from envhub.text_format import render

Reply = dict[str, Any]
"""One scripted answer, as JSON: a completion (`message`), or a raw `status`/`body`, maybe `delay`ed."""

HANG_SECONDS = 3600.0

TokenFields = Literal["vllm", "reject", "ignore"]
"""How the server treats vLLM's token fields: honour them, refuse them (OpenAI), or ignore them."""

VLLM_ONLY_FIELDS = ("return_tokens_as_token_ids", "return_token_ids")

VLLM_AUTO_TOOL_CHOICE_ERROR = (
    '"auto" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be set'
)
"""vLLM's answer (0.6 to 0.32) to a request with tools when it was started without tool calling."""


def text(content: str, **fields: Any) -> Reply:
    """A completion whose message is plain text; `fields` override completion details (`finish_reason`)."""
    return {"message": {"role": "assistant", "content": content}, **fields}


def tool_call(name: str, arguments: dict[str, Any] | str, *, content: str = "", **fields: Any) -> Reply:
    """A completion that calls one tool."""
    raw = arguments if isinstance(arguments, str) else json.dumps(arguments)
    call = {"type": "function", "function": {"name": name, "arguments": raw}}
    return {"message": {"role": "assistant", "content": content, "tool_calls": [call]}, **fields}


def message(value: Message | dict[str, Any], **fields: Any) -> Reply:
    """A completion carrying any assistant message (an envhub Message or an OpenAI message dict)."""
    data = value.to_openai() if isinstance(value, Message) else dict(value)
    return {"message": {**data, "role": "assistant"}, **fields}


def status(code: int, body: str | dict[str, Any] = "", *, headers: dict[str, str] | None = None) -> Reply:
    """A bare HTTP answer: an error status, a rate limit with `Retry-After`, anything."""
    return {"status": code, "body": body, "headers": headers or {}}


def garbage(body: str = "<html><body>502 Bad Gateway (nginx)</body></html>") -> Reply:
    """A 200 whose body is not a chat completion, as a misconfigured proxy in front of a server sends."""
    return {"status": 200, "body": body, "content_type": "text/html"}


def hang() -> Reply:
    """Accept the request and never answer."""
    return {"delay": HANG_SECONDS}


def _byte_ids(value: str) -> list[int]:
    return list(value.encode("utf-8"))


def _turn_text(data: dict[str, Any]) -> str:
    return render([Message.from_openai(data)])


def prompt_text(messages: list[dict[str, Any]]) -> str:
    """The transcript the fake model "sees": every message in a `<|role|>` block, then the assistant's cue."""
    turns = "".join(f"<|{m.get('role', 'user')}|>\n{_turn_text(m)}<|end|>\n" for m in messages)
    return turns + "<|assistant|>\n"


def completion_text(message: dict[str, Any]) -> str:
    """What the fake model "generated" for `message`; appended to the prompt it re-renders identically."""
    return _turn_text(message) + "<|end|>\n"


def _completion(
    request: dict[str, Any], reply: Reply, model: str, number: int, token_fields: TokenFields
) -> dict[str, Any]:
    """A chat completion for `reply`, with vLLM's token fields when the request asked for them."""
    answer: dict[str, Any] = {"role": "assistant", "content": "", **reply["message"]}
    calls = []
    for i, call in enumerate(answer.get("tool_calls") or []):
        function = dict(call.get("function", call))
        if not isinstance(function.get("arguments", ""), str):
            function["arguments"] = json.dumps(function["arguments"])
        calls.append({"id": call.get("id") or f"call_{number}_{i}", "type": "function", "function": function})
    answer["tool_calls"] = calls
    prompt_ids = reply.get("prompt_token_ids", _byte_ids(prompt_text(request.get("messages", []))))
    ids = reply.get("token_ids", _byte_ids(completion_text(answer)))
    choice: dict[str, Any] = {
        "index": 0,
        "message": answer,
        "finish_reason": reply.get("finish_reason", "tool_calls" if calls else "stop"),
        "logprobs": None,
    }
    response: dict[str, Any] = {
        "id": f"chatcmpl-{number}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": request.get("model") or model,
        "choices": [choice],
        "usage": {
            "prompt_tokens": len(prompt_ids),
            "completion_tokens": len(ids),
            "total_tokens": len(prompt_ids) + len(ids),
        },
    }
    if request.get("logprobs") and token_fields == "vllm":
        as_ids = bool(request.get("return_tokens_as_token_ids"))
        choice["logprobs"] = {
            "content": [
                {
                    "token": f"token_id:{t}" if as_ids else bytes([t % 256]).decode("utf-8", "replace"),
                    "logprob": -0.05 * (1 + i % 7),
                    "bytes": [t % 256],
                    "top_logprobs": [],
                }
                for i, t in enumerate(ids)
            ]
        }
    if request.get("return_token_ids") and token_fields == "vllm":
        choice["token_ids"] = ids
        response["prompt_token_ids"] = prompt_ids
    return response


class _Script:
    """The server's state, shared by its handler threads."""

    def __init__(self, model: str) -> None:
        self.model = model
        self.lock = threading.Lock()
        self.replies: deque[Reply] = deque()
        self.default: Reply = text("ok")
        self.requests: list[dict[str, Any]] = []
        self.tool_flags = True
        self.token_fields: TokenFields = "vllm"

    def next(self, request: dict[str, Any]) -> tuple[Reply, int]:
        """The reply to `request`: a refusal the server's configuration calls for, else the next scripted."""
        with self.lock:
            self.requests.append(request)
            refusal = self.refusal(request["json"])
            if refusal is not None:
                return refusal, len(self.requests)
            reply = self.replies.popleft() if self.replies else self.default
            return reply, len(self.requests)

    def refusal(self, body: dict[str, Any]) -> Reply | None:
        """The 400 a real server gives before generating anything, in its own words, or None."""
        choice = body.get("tool_choice")
        if not self.tool_flags and body.get("tools") and choice != "none":
            if choice in (None, "auto"):
                problem = VLLM_AUTO_TOOL_CHOICE_ERROR
            else:
                named = (
                    f'function "{choice["function"]["name"]}"' if isinstance(choice, dict) else f'"{choice}"'
                )
                problem = f"tool_choice={named} requires --tool-call-parser to be set"
            error = {"message": problem, "type": "BadRequestError", "param": None, "code": 400}
            return status(400, {"error": error})
        unknown = [name for name in VLLM_ONLY_FIELDS if name in body]
        if self.token_fields == "reject" and unknown:
            error = {
                "message": f"Unrecognized request argument supplied: {unknown[0]}",
                "type": "invalid_request_error",
                "param": None,
                "code": None,
            }
            return status(400, {"error": error})
        return None


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, so a client's connection limits really apply
    script: _Script

    def log_message(self, format: str, *args: Any) -> None:
        return None

    def _send(self, code: int, body: str | bytes, content_type: str, headers: dict[str, str]) -> None:
        data = body.encode() if isinstance(body, str) else body
        try:
            self.send_response(code)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(data)))
            for key, value in headers.items():
                self.send_header(key, value)
            self.end_headers()
            self.wfile.write(data)
        except OSError:  # the client gave up (timed out) before the answer came
            self.close_connection = True

    def _json(self, code: int, value: object) -> None:
        self._send(code, json.dumps(value), "application/json", {})

    def _body(self) -> bytes:
        return self.rfile.read(int(self.headers.get("Content-Length") or 0))

    def do_GET(self) -> None:
        if self.path == "/_requests":
            with self.script.lock:
                self._json(200, self.script.requests)
        elif self.path.rstrip("/").endswith("/models"):
            self._json(200, {"object": "list", "data": [{"id": self.script.model, "object": "model"}]})
        else:
            self._json(404, {"error": {"message": f"no route {self.path}", "code": 404}})

    def do_POST(self) -> None:
        raw = self._body()
        if self.path == "/_script":
            config = json.loads(raw)
            with self.script.lock:
                self.script.replies = deque(config.get("replies", []))
                self.script.default = config.get("default") or text("ok")
                self.script.requests = []
                self.script.tool_flags = bool(config.get("tool_flags", True))
                self.script.token_fields = config.get("token_fields", "vllm")
            self._json(200, {"ok": True})
            return
        if not self.path.rstrip("/").endswith("/chat/completions"):
            self._json(404, {"error": {"message": f"no route {self.path}", "code": 404}})
            return
        try:
            request = json.loads(raw)
        except json.JSONDecodeError as exc:
            self._json(400, {"error": {"message": f"the body is not JSON: {exc}", "code": 400}})
            return
        headers = {key.lower(): value for key, value in self.headers.items()}
        reply, number = self.script.next({"path": self.path, "json": request, "headers": headers})
        if reply.get("delay"):
            time.sleep(float(reply["delay"]))
        if "message" in reply:
            completion = _completion(request, reply, self.script.model, number, self.script.token_fields)
            self._json(200, completion)
            return
        body = reply.get("body", "")
        self._send(
            int(reply.get("status", 200)),
            body if isinstance(body, str) else json.dumps(body),
            reply.get("content_type", "application/json"),
            reply.get("headers") or {},
        )


def serve(host: str, port: int, model: str) -> None:
    """Serve until killed; print the bound port first, so a parent that asked for port 0 can find it."""
    handler = type("Handler", (_Handler,), {"script": _Script(model)})
    server = ThreadingHTTPServer((host, port), handler)
    server.daemon_threads = True
    print(f"listening on {server.server_address[1]}", flush=True)
    server.serve_forever()


class OpenAIServer(ServerProcess):
    """A running fake server process: point a client at `base_url`, script it, read what it received."""

    @classmethod
    def start(
        cls, *, model: str = "fake-model", host: str = "127.0.0.1", timeout: float = 30.0
    ) -> OpenAIServer:
        """Start a server on a free port of `host` and wait until it listens."""
        return cls.launch(
            "envhub.testing.openai_server",
            ["--model", model],
            host=host,
            timeout=timeout,
            what="fake OpenAI server",
        )

    @property
    def base_url(self) -> str:
        """What an OpenAI client takes as its base URL (ends in /v1)."""
        return f"{self.url}/v1"

    def _call(self, path: str, payload: object | None = None) -> Any:
        data = None if payload is None else json.dumps(payload).encode()
        request = urllib.request.Request(
            self.url + path, data=data, headers={"Content-Type": "application/json"}
        )
        with urllib.request.urlopen(request, timeout=10) as response:
            return json.loads(response.read())

    def script(
        self,
        *replies: Reply,
        default: Reply | None = None,
        tool_flags: bool = True,
        token_fields: TokenFields = "vllm",
    ) -> None:
        """Answer the next requests with `replies` in order, then `default` (a text "ok" unless given).

        `tool_flags=False` refuses requests with tools as vLLM does without its tool-calling flags;
        `token_fields` says how vLLM's token fields are treated ("vllm", "reject" or "ignore").
        Also forgets the requests received so far, so each test counts only its own.
        """
        config = {"replies": list(replies), "default": default, "tool_flags": tool_flags}
        self._call("/_script", {**config, "token_fields": token_fields})

    def requests(self) -> list[dict[str, Any]]:
        """Chat requests received since the last `script()`: `path`, `json` body, lower-case `headers`."""
        received: list[dict[str, Any]] = self._call("/_requests")
        return received


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="A scripted OpenAI-compatible chat server for tests.")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--model", default="fake-model")
    args = parser.parse_args(argv)
    serve(args.host, args.port, args.model)


if __name__ == "__main__":
    main()
