"""How graders read an episode: the conversation before the agent's final answer, and that answer."""

from __future__ import annotations

from envhub.messages import Message, user
from envhub.text_format import render


def split_answer(messages: list[Message]) -> tuple[list[Message], str]:
    """The messages before the agent's last message, and that message's text.

    Whatever the environment said after the answer ("Correct!") is left out: a grader must judge the
    answer, not the environment's verdict on it.
    """
    for i in range(len(messages) - 1, -1, -1):
        if messages[i].role == "assistant":
            return list(messages[:i]), messages[i].text
    return list(messages), ""


def as_messages(prompt: str | list[Message]) -> list[Message]:
    """A prompt given as text is one user message."""
    return [user(prompt)] if isinstance(prompt, str) else list(prompt)


def transcript(prompt: str | list[Message]) -> str:
    """A prompt as plain text for a judge: text as it is, messages each under a `[role]` line."""
    if isinstance(prompt, str):
        return prompt
    if len(prompt) == 1 and prompt[0].role == "user":
        return render(prompt)
    return "\n\n".join(f"[{m.role}]\n{render([m])}" for m in prompt)
