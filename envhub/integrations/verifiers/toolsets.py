"""A verifiers task's tool servers, served in this process instead of over MCP's HTTP transport.

verifiers runs each `vf.Toolset` as an MCP server that its harness program reaches over HTTP. envhub
plays the harness, so it registers the same toolsets on an in-process `MCPServer` (the MCP SDK that
verifiers' servers use): the schemas the agent sees and the argument checks its calls pass through are
MCP's own, and tool names carry the server prefix the harness would add (`<server>_<tool>`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from envhub.tools import ToolSpec

if TYPE_CHECKING:
    from mcp.server.mcpserver import MCPServer
    from verifiers.v1 import State, Toolset


class ServedToolsets:
    """The tools of one rollout: each toolset registered on its own in-process MCP server."""

    def __init__(self, toolsets: list[Toolset[Any, Any]], state: State | None = None) -> None:
        from mcp.server.mcpserver import MCPServer

        self.toolsets = toolsets
        self._servers: dict[str, MCPServer] = {}
        self._dispatch: dict[str, tuple[str, str]] = {}
        for toolset in toolsets:
            if state is not None:
                _share_state(toolset, state)
            name = toolset.server_name
            if name in self._servers:
                raise ValueError(
                    f"two toolsets share the server name {name!r}; give one a distinct TOOL_PREFIX"
                )
            server = MCPServer(name or type(toolset).__name__)
            toolset.register(server)
            self._servers[name] = server

    async def specs(self) -> list[ToolSpec]:
        """The tools as the harness would advertise them: MCP's schema under the prefixed name."""
        specs: list[ToolSpec] = []
        for name, server in self._servers.items():
            for tool in await server.list_tools():
                full = f"{name}_{tool.name}" if name else tool.name
                if full in self._dispatch:
                    raise ValueError(f"two toolsets declare the tool {full!r}; keep tool names distinct")
                self._dispatch[full] = (name, tool.name)
                specs.append(
                    ToolSpec(name=full, description=tool.description or "", parameters=tool.input_schema)
                )
        return specs

    async def call(self, name: str, arguments: dict[str, Any]) -> str:
        """Run one tool call; an unknown tool or a failing call is answered as text, as the harness does."""
        from mcp.server.mcpserver.exceptions import ToolError

        if name not in self._dispatch:
            return f"error: unknown tool {name!r}"
        server_name, tool = self._dispatch[name]
        try:
            result = await self._servers[server_name].call_tool(tool, arguments)
        except ToolError as exc:
            return f"error: {exc}"
        return _content_text(getattr(result, "content", []))


def _content_text(blocks: list[Any]) -> str:
    """MCP content blocks as the tool message text (verifiers' `mcp_content_to_chat_content`, text only)."""
    return "\n".join(block.text if block.type == "text" else str(block) for block in blocks) or str(blocks)


def _share_state(toolset: Toolset[Any, Any], state: State) -> None:
    """Point the toolset's state channel at the rollout's state object.

    Out of process, a stateful toolset pulls the rollout's state over HTTP before each call and pushes
    it back after; in process both are the one object the trace holds, so the calls mutate it directly.
    """

    async def pull() -> State:
        return state

    async def push(before: bytes) -> None:
        return None

    toolset._pull_state = pull
    toolset._push_state = push
