"""A browser episode cannot be forked (issue 21): the env says so, with what to do instead, before any
page is copied or any child made."""

from __future__ import annotations

import pytest

import envhub


async def test_forking_a_browser_env_is_refused_with_the_reason() -> None:
    env = envhub.make("web-tasks-v0")
    with pytest.raises(envhub.NotForkable, match="DOM, scripts and processes cannot be copied"):
        await env.fork(2)
    await env.close()
