"""One prompt, one answer, one score: the shape of most verifiable-reward datasets."""

from __future__ import annotations

from envhub.authoring.chat import ChatEnv, Reaction
from envhub.messages import Message


class SingleTurnEnv(ChatEnv):
    """The agent answers once; `@reward` methods score `answer`."""

    max_turns = 1

    async def react(self, message: Message) -> Reaction:
        return Reaction(observation=[], done=True)
