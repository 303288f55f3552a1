"""Tool-use environments for envhub: tasks that take several calls to a calculator, a sandboxed file
system, a Python interpreter and a document search, each with a verifiable answer."""

from envhub_tools.env import ToolUse

__all__ = ["ToolUse"]
