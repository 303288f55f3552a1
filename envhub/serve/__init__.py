"""Registered environments over the network (`envhub serve`) and the client that plays them
(`envhub.make("ws://host:port/ID")`): one websocket session per episode, same async contract.

`protocol` holds the messages, `server` the Starlette app, `client` the remote `Env`. The package root
imports none of them, so the client (which the registry loads for URL ids) pulls in no server code.
"""
