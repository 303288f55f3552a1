"""A reply that commits to several answers scores 0: the rule every answer-graded family shares.

A hedge names more than one candidate answer ("28080 or 28081", "A, B", "either x or y") so that a
grader which reads one of them (the last number, the first letter, any part that matches) pays it as if
the reply had committed. The rule is decided by what the reply does, with the family's own grader as
judge, in one of two forms:

- `hedged(reply, grade)`, for graders of free-form answers (Reasoning Gym): the reply is cut where
  alternatives join (`or`, `and`, commas not inside a number, semicolons, slashes, bars, new lines; each
  kind alone, then all at once); if two different parts are graded differently and one of them alone
  earns full marks, the reply was paid for one of several answers it named.
- `extra_candidates(line, given, needed)`, for graders that read numbers (arithmetic, tool use, vision):
  the answer line names more numbers than an answer holds, not counting the numbers the conversation
  already gave (the question, tool results).

A family scores a hedge 0 and records `HEDGE_NOTE` in `info["reward_notes"]`.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from fractions import Fraction

from envhub.grading.numbers import number_texts

HEDGE_NOTE = "the reply names more than one candidate answer (a hedge, not an answer); scored 0"
JOINS = (
    r"\s+(?:or|and/or)\s+",
    r"\s+and\s+",
    r"\s*;\s*",
    r"\s*\|\s*",
    r"\s+/\s+",
    r"\s*\n\s*",
    r"(?<!\d),\s*|,(?!\d)\s*|,\s+",
)
"""What joins alternatives, one kind at a time: a candidate may itself hold another kind (a grid's new
lines, a list's commas), so the reply is cut at each kind alone, then at all of them at once."""
_LEADING = re.compile(r"^(?:either|maybe|perhaps|or)\s+", re.IGNORECASE)
MAX_PARTS = 256
"""Parts graded alone at most; a reply cut into more is graded on its first `MAX_PARTS` distinct ones."""
MAX_DIGITS = 60
"""Numbers longer than this are compared by their text (no answer here is near that long)."""


def cuts(reply: str) -> list[list[str]]:
    """The ways to read `reply` as several candidates: cut at each kind of join alone, then at all of
    them; each a list of its different non-empty parts (at most `MAX_PARTS`), only those of two or more."""
    found = []
    for pattern in (*JOINS, "|".join(JOINS)):
        pieces = [_LEADING.sub("", p.strip()) for p in re.split(pattern, reply, flags=re.IGNORECASE)]
        distinct = list(dict.fromkeys(p for p in pieces if p))[:MAX_PARTS]
        if len(distinct) > 1 and distinct not in found:
            found.append(distinct)
    return found


def hedged(reply: str | None, grade: Callable[[str], float]) -> bool:
    """Whether `reply` joins two or more different candidate answers that `grade` (1.0 full marks) judges
    differently, one of them at full marks: the reply names the answer among others."""
    if not isinstance(reply, str):
        return False
    for pieces in cuts(reply):
        scores = [_safe(grade, p) for p in pieces]
        if max(scores) >= 1.0 and min(scores) < max(scores):
            return True
    return False


def _safe(grade: Callable[[str], float], part: str) -> float:
    try:
        return float(grade(part))
    except Exception:  # a grader that cannot read the part: it is not an answer
        return 0.0


def numbers(text: str) -> list[Fraction | str]:
    """The numbers written in `text`, each as its value (`1,234` and `1234.0` are 1234); one longer than
    `MAX_DIGITS` as its digits, so two different long numbers never read as one bounded value."""
    return [digits if len(digits) > MAX_DIGITS else Fraction(digits) for digits in number_texts(text)]


def answer_line(reply: str) -> str:
    """The reply's last non-empty line: where the prompts ask for the answer."""
    lines = [line for line in reply.splitlines() if line.strip()]
    return lines[-1] if lines else ""


def extra_candidates(reply: str, given: Iterable[str], needed: int = 1) -> bool:
    """Whether the reply's answer line names more numbers than an answer holds (`needed`), counting only
    numbers the conversation (`given`: the question, tool results) did not already hold."""
    known = {n for text in given for n in numbers(text)}
    fresh = [n for n in numbers(answer_line(reply)) if n not in known]
    return len(fresh) > needed
