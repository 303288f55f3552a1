"""`envhub serve`: registered environments over the network, one websocket session per episode."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Annotated

import typer

from envhub.cli.app import USER_ERRORS, app, console, fail
from envhub.settings import variable


@app.command()
def serve(
    env_ids: Annotated[list[str], typer.Argument(help="The ids to serve, e.g. guess-number arithmetic.")],
    host: Annotated[str, typer.Option(help="Address to listen on (0.0.0.0 for every interface).")] = (
        "127.0.0.1"
    ),
    port: Annotated[int, typer.Option(help="Port to listen on; 0 picks a free one (printed).")] = 8000,
    max_sessions: Annotated[
        int, typer.Option(help="Sessions (episodes) at once; one more is refused as busy.")
    ] = 256,
    token: Annotated[
        str | None,
        typer.Option(
            envvar=variable("serve_token"),
            help="Clients must send it: 'Authorization: Bearer TOKEN', ?token=TOKEN, or a URL's user info.",
        ),
    ] = None,
    lease: Annotated[
        float, typer.Option(help="Seconds a session may sit idle before it is closed and its env freed.")
    ] = 300.0,
    open_timeout: Annotated[
        float,
        typer.Option(help="Seconds a websocket may go unauthorised (no token set: until its first message)."),
    ] = 10.0,
    max_connections: Annotated[
        int | None,
        typer.Option(
            min=1,
            help="Connections at once, all kinds; default 1024, or --max-sessions + 256 when more "
            "(at most half the descriptor limit).",
        ),
    ] = None,
    max_pending_per_client: Annotated[
        int,
        typer.Option(
            min=1,
            help="Connections one address may hold before their sessions open (at most half the total).",
        ),
    ] = 256,
    header_timeout: Annotated[
        float, typer.Option(help="Seconds a client has to send a request's headers.")
    ] = 10.0,
    open_max_bytes: Annotated[
        int, typer.Option(min=1, help="Largest websocket message before the session is authorised.")
    ] = 64 * 2**10,
) -> None:
    """Serve environments to `envhub.make("ws://HOST:PORT/ID")` clients until interrupted."""
    try:
        from envhub.serve.doors import Doors
        from envhub.serve.server import create_app
        from envhub.serve.server import serve as run_server
    except ImportError as exc:
        hint = ImportError(f"{exc}; `envhub serve` needs the serve extra: pip install 'envhub-core[serve]'")
        raise fail(hint) from exc
    try:
        doors = Doors.bounded(
            max_connections or max(1024, max_sessions + 256),
            max_pending_per_client,
            header_timeout=header_timeout,
            open_max_bytes=open_max_bytes,
        )
        server_app = create_app(
            env_ids,
            max_sessions=max_sessions,
            token=token,
            lease_seconds=lease,
            open_seconds=open_timeout,
            doors=doors,
        )
    except USER_ERRORS as exc:
        raise fail(exc) from exc

    def ready(bound_host: str, bound_port: int) -> None:
        ids = ", ".join(server_app.state.serve.served())
        console.print(f"serving {ids} on ws://{bound_host}:{bound_port}", highlight=False, soft_wrap=True)

    with contextlib.suppress(KeyboardInterrupt):  # Ctrl-C is how a server is stopped
        asyncio.run(run_server(server_app, host=host, port=port, on_ready=ready))
