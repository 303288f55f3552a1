"""How graders read an episode: the conversation before the agent's final answer, and that answer.

Everything here is deterministic, because what the agent wrote must never decide whether a grader can
run: text a grader cannot encode is repaired, and text too long for it is cut the same way every time.
"""

from __future__ import annotations

from envhub.messages import Message, user
from envhub.text_format import render

CUT_MARK = "\n[... {count} characters cut ...]\n"
"""What stands where `middle_cut` removed text, so a grader can see that something was left out."""


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


def task_only(prompt: str | list[Message]) -> str | list[Message]:
    """The part of a prompt the environment alone wrote: up to and including its first user message.

    Later turns hold the agent's own messages (and what its tool calls returned), so a grader that fails
    on the whole prompt but not on this part failed because of something the agent wrote.
    """
    if isinstance(prompt, str):
        return prompt
    for i, message in enumerate(prompt):
        if message.role == "user":
            return list(prompt[: i + 1])
    return list(prompt)


def encodable(text: str) -> str:
    """`text` with what UTF-8 cannot carry (lone surrogates, e.g. from a JSON `\\ud800` escape) replaced.

    JSON and tokenizers refuse such text outright; replacing it keeps one odd character from failing
    the whole request (and every other answer batched with it).
    """
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-8", "replace").decode("utf-8")
    return text


def middle_cut(text: str, limit: int) -> str:
    """`text` if it fits in `limit` characters, else its start and end with a marked cut between them.

    The start of a conversation holds the task and the end the latest turns, so the middle goes first.
    """
    if len(text) <= limit:
        return text
    keep = limit
    for _ in range(3):  # the mark's length depends on the count it shows; this settles in two rounds
        mark = CUT_MARK.format(count=len(text) - keep)
        keep = max(limit - len(mark), 0)
    mark = CUT_MARK.format(count=len(text) - keep)
    head = keep // 2
    return text[:head] + mark + text[len(text) - (keep - head) :]
