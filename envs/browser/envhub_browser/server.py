"""A tiny HTTP/1.1 server on loopback that serves the current episode's `Site`.

Plain asyncio rather than a web framework: the pages are generated in memory, one connection per request
is plenty for one browser tab, and the package then needs nothing beyond Playwright.
"""

from __future__ import annotations

import asyncio
import contextlib
from http import HTTPStatus
from http.cookies import SimpleCookie
from urllib.parse import parse_qsl, urlsplit

from envhub_browser.site import Request, Response, Site, document

MAX_BODY = 1 << 20


class SiteServer:
    """Serves whichever site is current on `127.0.0.1` at a free port; swap `site` between episodes."""

    def __init__(self) -> None:
        self.site: Site | None = None
        self.origin = ""
        self._server: asyncio.Server | None = None

    async def start(self) -> str:
        """Listen on a free loopback port and return the origin, e.g. `http://127.0.0.1:41234`."""
        if self._server is None:
            self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
            port = self._server.sockets[0].getsockname()[1]
            self.origin = f"http://127.0.0.1:{port}"
        return self.origin

    async def branch(self) -> SiteServer:
        """A server for a forked episode: listening on a port of its own when this one listens (the
        child's site, with its own server state, behind another origin), else one with this origin,
        for envs whose pages are answered by their own routes and nothing listens."""
        other = SiteServer()
        if self._server is None:
            other.origin = self.origin
        else:
            await other.start()
        return other

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
            self._server = None

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            response = await self._respond(reader)
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ValueError, UnicodeDecodeError):
            response = Response(document("Bad request", "<h1>Bad request</h1>"), status=400)
        body = response.body.encode()
        headers = {
            "Content-Type": "text/html; charset=utf-8",
            "Content-Length": str(len(body)),
            "Cache-Control": "no-store",
            "Connection": "close",
            **response.headers,
        }
        head = f"HTTP/1.1 {response.status} {HTTPStatus(response.status).phrase}\r\n"
        head += "".join(f"{k}: {v}\r\n" for k, v in headers.items())
        with contextlib.suppress(ConnectionError):
            writer.write(head.encode("latin-1") + b"\r\n" + body)
            await writer.drain()
        writer.close()
        with contextlib.suppress(ConnectionError):
            await writer.wait_closed()

    async def _respond(self, reader: asyncio.StreamReader) -> Response:
        head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1")
        request_line, *lines = head.split("\r\n")
        method, target, _ = request_line.split(" ", 2)
        headers = {
            k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines if line)
        }
        length = int(headers.get("content-length") or 0)
        if not 0 <= length <= MAX_BODY:
            raise ValueError(f"request body of {length} bytes")
        body = (await reader.readexactly(length)).decode() if length else ""
        cookies = SimpleCookie(headers.get("cookie", ""))
        url = urlsplit(target)
        if self.site is None:
            return Response(document("No task", "<h1>No task is loaded</h1>"), status=503)
        request = Request(
            method=method.upper(),
            path=url.path,
            query=dict(parse_qsl(url.query)),
            form=dict(parse_qsl(body)),
            cookies={k: m.value for k, m in cookies.items()},
            log=self.site.log,
        )
        return self.site.handle(request)
