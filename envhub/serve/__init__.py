"""Registered environments over the network (`envhub serve`) and the client that plays them
(`envhub.make("ws://host:port/ID")`): one websocket session per episode, same async contract.

`protocol` holds the messages, `session` the one session class both of the server's protocols run on
(envhub's, and OpenEnv's from `envhub.integrations.openenv.routes`), `server` the Starlette app, `client`
the remote `Env` (its socket from `envhub.websocket`, as the OpenEnv client's is). The package root
imports none of them, so the client (which the registry loads for URL ids) pulls in no server code.
"""
