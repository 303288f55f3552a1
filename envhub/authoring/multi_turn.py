"""A conversation where the environment answers each message in words: games, tutors, simulated users."""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Awaitable

from pydantic import BaseModel, ConfigDict

from envhub.author_code import call_author_code
from envhub.authoring.chat import ChatEnv, Reaction
from envhub.messages import Message, user


class Reply(BaseModel):
    """The environment's answer to one agent message; `done` ends the episode."""

    model_config = ConfigDict(frozen=True)

    text: str | None = None
    done: bool = False
    reward: float = 0.0


class MultiTurnEnv(ChatEnv):
    """Authors implement `respond(text)`, returning the next user message or a `Reply`."""

    @abstractmethod
    def respond(self, text: str) -> str | Reply | Awaitable[str | Reply]:
        """Answer the agent's message; return `Reply(done=True)` when the episode is over.

        May be `async def` (a simulated user behind a model server, say).
        """

    async def react(self, message: Message) -> Reaction:
        reply = await call_author_code(self.respond, message.text)
        if isinstance(reply, str):
            reply = Reply(text=reply)
        observation = [user(reply.text)] if reply.text is not None else []
        return Reaction(observation=observation, done=reply.done, reward=reply.reward)
