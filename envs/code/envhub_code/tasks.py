"""Programming tasks: what the agent is asked, the reference solution, and public and hidden tests.

The built-in set is 120 procedurally generated tasks (12 families x 10 variants), fixed by one seed so
it is the same everywhere and runs offline. Each variant changes the behaviour asked for (a shift, a
separator, a base), not just a name, and every expected value is computed by running the reference
solution on the host, so tests and reference can never disagree.

Each hidden test calls the function on several inputs at once (`(f(a), f(b), f(c))`) and passes only if
every answer is right. The inputs of a test are chosen so that their answers differ from one another
and from the inputs themselves: no constant and no echo of the input passes any hidden test, where a
single call (`balanced("") == True`) is passed by a constant as often as the answer is common.
"""

from __future__ import annotations

import functools
import random
import string
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict

from envhub.grading import HiddenTest

BUILTIN_SEED = 20240501
VARIANTS = 10
PUBLIC_TESTS = 3
HIDDEN_TESTS = 8
CALLS_PER_TEST = 3
"""Inputs per hidden test; public tests (the examples in the prompt) call the function once."""


class CodeTask(BaseModel):
    """One task. `reference` and `hidden_tests` stay on the host: they never enter the agent's sandbox."""

    model_config = ConfigDict(frozen=True)

    id: str
    statement: str
    """What the agent reads: the function to write and what it must do (examples are added from
    `public_tests`)."""
    entry_point: str
    reference: str
    public_tests: list[HiddenTest]
    hidden_tests: list[HiddenTest]
    prelude: str = ""
    """Test code run beside the solution and by the grader (imports, helpers, the probes' inputs)."""
    check_prelude: str = ""
    """Test code only the grader runs, after `prelude`: the values the checks compare against, which
    the solution could read from its caller's frame if they were in the prelude."""
    source: str = "builtin"


@dataclass(frozen=True)
class Family:
    """A kind of task; `make(rng, variant)` gives (signature, description, reference, draw one input)."""

    name: str
    make: Callable[[random.Random, int], tuple[str, str, str, Callable[[random.Random], tuple[Any, ...]]]]
    edge_cases: tuple[tuple[Any, ...], ...] = ()


def _text(rng: random.Random, alphabet: str = string.ascii_letters + string.digits + " .,!?-") -> str:
    return "".join(rng.choice(alphabet) for _ in range(rng.randint(1, 24)))


def _ints(rng: random.Random, low: int = -50, high: int = 50, most: int = 12) -> list[int]:
    return [rng.randint(low, high) for _ in range(rng.randint(1, most))]


def _shift(
    rng: random.Random, variant: int
) -> tuple[str, str, str, Callable[[random.Random], tuple[Any, ...]]]:
    k = (variant * 7 + 3) % 25 + 1  # ten distinct shifts
    ref = f"""def shift_letters(text: str) -> str:
    out = []
    for ch in text:
        if "a" <= ch <= "z":
            out.append(chr((ord(ch) - 97 + {k}) % 26 + 97))
        elif "A" <= ch <= "Z":
            out.append(chr((ord(ch) - 65 + {k}) % 26 + 65))
        else:
            out.append(ch)
    return "".join(out)
"""
    desc = (
        f"Shift every ASCII letter {k} places forward in the alphabet, wrapping from z to a and keeping "
        "its case; leave every other character unchanged."
    )
    return "shift_letters(text: str) -> str", desc, ref, lambda r: (_text(r),)


def _sum_multiples(
    rng: random.Random, variant: int
) -> tuple[str, str, str, Callable[[random.Random], tuple[Any, ...]]]:
    k = variant + 2
    ref = f"""def sum_multiples(numbers: list[int]) -> int:
    return sum(n for n in numbers if n % {k} == 0)
"""
    desc = f"Return the sum of the numbers that are multiples of {k} (negative ones and 0 included)."
    return "sum_multiples(numbers: list[int]) -> int", desc, ref, lambda r: (_ints(r),)


def _long_words(
    rng: random.Random, variant: int
) -> tuple[str, str, str, Callable[[random.Random], tuple[Any, ...]]]:
    n = 2 + variant % 5
    at_least = variant < 5
    op, words = (">=", "at least") if at_least else ("<=", "at most")
    ref = f"""def count_long_words(sentence: str) -> int:
    return sum(1 for word in sentence.split() if len(word) {op} {n})
"""
    desc = f"Count the whitespace-separated words that are {words} {n} characters long."
    return "count_long_words(sentence: str) -> int", desc, ref, lambda r: (_text(r, "abcdefgh   "),)


def _pairs(
    rng: random.Random, variant: int
) -> tuple[str, str, str, Callable[[random.Random], tuple[Any, ...]]]:
    sep = ";,|&/"[variant % 5]
    kv = "=:"[variant // 5]
    ref = f"""def parse_pairs(text: str) -> dict[str, int]:
    result = {{}}
    for part in text.split({sep!r}):
        if part.strip():
            key, value = part.split({kv!r}, 1)
            result[key.strip()] = int(value)
    return result
"""
    desc = (
        f"Parse text such as 'a{kv}1{sep} b {kv} -2' into a dict of str keys to int values: pairs are "
        f"separated by {sep!r}, each key from its value by {kv!r}; strip spaces around keys and values, "
        "skip empty pairs, and let a later key overwrite an earlier one."
    )

    def draw(r: random.Random) -> tuple[Any, ...]:
        keys = [r.choice("abcxyz") + r.choice(["", "1", "_k"]) for _ in range(r.randint(0, 5))]
        parts = [f"{r.choice(['', ' '])}{k}{r.choice(['', ' '])}{kv}{r.randint(-99, 99)}" for k in keys]
        return (sep.join(parts),)

    return "parse_pairs(text: str) -> dict[str, int]", desc, ref, draw


RUN_FORMATS = ("{n}{c}", "{c}{n}", "{c}x{n}", "{n}*{c}", "[{c}{n}]")


def _run_length(
    rng: random.Random, variant: int
) -> tuple[str, str, str, Callable[[random.Random], tuple[Any, ...]]]:
    fmt = RUN_FORMATS[variant % 5]
    omit_ones = variant >= 5
    ref = f"""def run_length(text: str) -> str:
    out = []
    i = 0
    while i < len(text):
        j = i
        while j < len(text) and text[j] == text[i]:
            j += 1
        n, c = j - i, text[i]
        out.append(c if {omit_ones} and n == 1 else {fmt!r}.format(n=n, c=c))
        i = j
    return "".join(out)
"""
    example = fmt.format(n=3, c="a")
    desc = (
        f"Run-length encode the text: each run of one repeated character becomes {fmt!r} with n the run's "
        f"length and c the character (so 'aaa' becomes {example!r})"
        + ("; a run of length 1 is written as the bare character." if omit_ones else ", even when n is 1.")
    )
    return "run_length(text: str) -> str", desc, ref, lambda r: (_text(r, "aaabbc"),)


def _sequence(
    rng: random.Random, variant: int
) -> tuple[str, str, str, Callable[[random.Random], tuple[Any, ...]]]:
    a, b, p = rng.randint(0, 5), rng.randint(1, 5), rng.randint(1, 3)
    q = rng.choice((-2, -1, 1, 2))  # q = 0 with p = 1 would make the sequence constant
    ref = f"""def seq_term(n: int) -> int:
    a, b = {a}, {b}
    for _ in range(n):
        a, b = b, {p} * b + {q} * a
    return a
"""
    desc = (
        f"The sequence s starts s(0) = {a}, s(1) = {b}, and continues s(k) = {p}*s(k-1) + ({q})*s(k-2). "
        "Return s(n) for n >= 0 (exactly: the numbers may get large)."
    )
    return "seq_term(n: int) -> int", desc, ref, lambda r: (r.randint(0, 60),)


def _rotate(
    rng: random.Random, variant: int
) -> tuple[str, str, str, Callable[[random.Random], tuple[Any, ...]]]:
    k = variant // 2 + 2
    left = variant % 2 == 0
    shift = f"{k} % len(items)" if left else f"-({k} % len(items))"
    ref = f"""def rotate(items: list[int]) -> list[int]:
    if not items:
        return []
    s = {shift}
    return items[s:] + items[:s]
"""
    side = "left (the first item moves to the end)" if left else "right (the last item moves to the front)"
    desc = f"Rotate the list {k} places to the {side}, wrapping around as often as needed; [] stays []."
    return "rotate(items: list[int]) -> list[int]", desc, ref, lambda r: (_ints(r, 0, 9, 7),)


BASES = (2, 3, 4, 5, 6, 7, 8, 9, 12, 16)


def _digit_sum(
    rng: random.Random, variant: int
) -> tuple[str, str, str, Callable[[random.Random], tuple[Any, ...]]]:
    base = BASES[variant]
    ref = f"""def digit_sum(n: int) -> int:
    total = 0
    while n:
        n, d = divmod(n, {base})
        total += d
    return total
"""
    desc = f"Return the sum of the digits of the non-negative integer n written in base {base} (0 for 0)."
    return "digit_sum(n: int) -> int", desc, ref, lambda r: (r.randint(0, 10 ** r.randint(1, 12)),)


ALTERNATIONS = ((2, 0), (2, 1), (3, 0), (3, 1), (3, 2), (4, 0), (4, 1), (4, 3), (5, 2), (5, 4))


def _alternate(
    rng: random.Random, variant: int
) -> tuple[str, str, str, Callable[[random.Random], tuple[Any, ...]]]:
    k, start = ALTERNATIONS[variant]
    ref = f"""def alternate_case(text: str) -> str:
    out = []
    count = 0
    for ch in text:
        if ch.isalpha():
            out.append(ch.upper() if count % {k} == {start} else ch.lower())
            count += 1
        else:
            out.append(ch)
    return "".join(out)
"""
    desc = (
        f"Number the letters of the text 0, 1, 2, ... (other characters are not counted and stay as "
        f"they are). Upper-case the letters whose number leaves remainder {start} when divided by {k}, "
        "and lower-case all the others."
    )
    return "alternate_case(text: str) -> str", desc, ref, lambda r: (_text(r),)


DIVISORS = ((2, 3), (2, 5), (3, 4), (3, 5), (4, 6), (5, 7), (6, 9), (2, 7), (7, 11), (8, 12))


def _divisible(
    rng: random.Random, variant: int
) -> tuple[str, str, str, Callable[[random.Random], tuple[Any, ...]]]:
    a, b = DIVISORS[variant]
    ref = f"""def count_divisible(n: int) -> int:
    return sum(1 for i in range(1, n + 1) if i % {a} == 0 or i % {b} == 0)
"""
    desc = f"Count the integers i with 1 <= i <= n that are divisible by {a} or by {b} (0 when n < 1)."
    return "count_divisible(n: int) -> int", desc, ref, lambda r: (r.randint(-3, 500),)


def _chunks(
    rng: random.Random, variant: int
) -> tuple[str, str, str, Callable[[random.Random], tuple[Any, ...]]]:
    k = variant + 2
    ref = f"""def chunk_sums(numbers: list[int]) -> list[int]:
    return [sum(numbers[i:i + {k}]) for i in range(0, len(numbers), {k})]
"""
    desc = (
        f"Split the list into consecutive chunks of {k} numbers (the last may be shorter) and return the "
        "list of the chunks' sums; [] gives []."
    )
    return "chunk_sums(numbers: list[int]) -> list[int]", desc, ref, lambda r: (_ints(r, -9, 9, 25),)


BRACKETS = ("()", "[]", "{}", "<>", "()[]", "(){}", "()<>", "[]{}", "()[]{}", "()[]{}<>")


def _balanced(
    rng: random.Random, variant: int
) -> tuple[str, str, str, Callable[[random.Random], tuple[Any, ...]]]:
    pairs = BRACKETS[variant]
    ref = f"""def balanced(text: str) -> bool:
    pairs = {pairs!r}
    closing = {{pairs[i + 1]: pairs[i] for i in range(0, len(pairs), 2)}}
    stack = []
    for ch in text:
        if ch in pairs[0::2]:
            stack.append(ch)
        elif ch in closing:
            if not stack or stack.pop() != closing[ch]:
                return False
    return not stack
"""
    shown = ", ".join(pairs[i : i + 2] for i in range(0, len(pairs), 2))
    desc = (
        f"Return True if the brackets {shown} in the text are balanced and properly nested, else False. "
        "Every other character (other kinds of brackets included) is ignored."
    )
    alphabet = "()[]{}<>ab"

    def draw(r: random.Random) -> tuple[Any, ...]:
        if r.random() < 0.5:  # half balanced by construction, or almost every answer would be False
            inner = "".join(r.choice([pairs[i : i + 2] for i in range(0, len(pairs), 2)]) for _ in range(3))
            return (inner[: r.randint(0, len(inner))] + "ab" + inner[r.randint(0, len(inner)) :],)
        return ("".join(r.choice(alphabet) for _ in range(r.randint(0, 12))),)

    return "balanced(text: str) -> bool", desc, ref, draw


FAMILIES = (
    Family("shift", _shift, (("",), ("xyz XYZ",))),
    Family("sum-multiples", _sum_multiples, (([],), ([0],))),
    Family("long-words", _long_words, (("",),)),
    Family("pairs", _pairs, (("",),)),
    Family("run-length", _run_length, (("",), ("a",))),
    Family("sequence", _sequence, ((0,), (1,))),
    Family("rotate", _rotate, (([],), ([5],))),
    Family("digit-sum", _digit_sum, ((0,),)),
    Family("alternate-case", _alternate, (("",), ("1, 2!",))),
    Family("divisible", _divisible, ((0,), (1,))),
    Family("chunks", _chunks, (([],),)),
    Family("balanced", _balanced, (("",), ("([)]",))),
)


def _call(entry_point: str, args: tuple[Any, ...]) -> str:
    return f"{entry_point}({', '.join(repr(a) for a in args)})"


def _build(family: Family, variant: int, rng: random.Random) -> CodeTask:
    signature, description, reference, draw = family.make(rng, variant)
    entry_point = signature.split("(")[0]
    namespace: dict[str, Any] = {}
    exec(reference, namespace)  # our own reference, on the host: it computes every expected value
    solve = namespace[entry_point]
    inputs: list[tuple[Any, ...]] = []
    draws = 4 * (PUBLIC_TESTS + HIDDEN_TESTS * CALLS_PER_TEST)
    for args in list(family.edge_cases) + [draw(rng) for _ in range(draws)]:
        if args not in inputs:
            inputs.append(args)
    public = inputs[len(family.edge_cases) : len(family.edge_cases) + PUBLIC_TESTS]
    try:
        hidden = _bundles([a for a in inputs if a not in public], solve)
    except ValueError as exc:
        raise RuntimeError(f"{family.name} variant {variant}: {exc}") from exc

    def test(kind: str, i: int, args: tuple[Any, ...]) -> HiddenTest:
        return HiddenTest.returns(f"{kind}-{i}", _call(entry_point, args), solve(*args))

    def bundle(i: int, calls: list[tuple[Any, ...]]) -> HiddenTest:
        probe = f"({', '.join(_call(entry_point, args) for args in calls)},)"
        return HiddenTest.returns(f"hidden-{i}", probe, tuple(solve(*args) for args in calls))

    statement = f"Write a Python function `{signature}`.\n\n{description}"
    return CodeTask(
        id=f"{family.name}-{variant:02d}",
        statement=statement,
        entry_point=entry_point,
        reference=reference,
        public_tests=[test("public", i, a) for i, a in enumerate(public)],
        hidden_tests=[bundle(i, calls) for i, calls in enumerate(hidden)],
    )


def _bundles(pool: list[tuple[Any, ...]], solve: Callable[..., Any]) -> list[list[tuple[Any, ...]]]:
    """`HIDDEN_TESTS` groups of `CALLS_PER_TEST` inputs, each with answers that tell trivial code apart.

    In every group the answers are not all equal (no constant passes it) and at least one answer differs
    from its input (no echo passes it); answers unlike the group's others are preferred. Edge cases come
    first in the pool, so each lands in a group.
    """
    left = [(args, solve(*args)) for args in pool]

    def telling(group: list[tuple[tuple[Any, ...], Any]]) -> bool:
        constant = all(_same(answer, group[0][1]) for _, answer in group)
        echo = all(_same(answer, args[0]) for args, answer in group)
        return not constant and not echo

    groups: list[list[tuple[Any, ...]]] = []
    while len(groups) < HIDDEN_TESTS and left:
        group = [left.pop(0)]
        while len(group) < CALLS_PER_TEST:
            new = [c for c in left if not any(_same(c[1], answer) for _, answer in group)]
            if len(group) == CALLS_PER_TEST - 1:
                fits = [c for c in new + left if telling([*group, c])]
            else:
                fits = new or left
            if not fits:
                raise ValueError("too few distinct answers to tell every hidden test from trivial code")
            left.remove(fits[0])
            group.append(fits[0])
        groups.append([args for args, _ in group])
    if len(groups) < HIDDEN_TESTS:
        raise ValueError("too few distinct inputs for the hidden tests")
    return groups


def _same(a: object, b: object) -> bool:
    """Type-strict equality, as the grader's `same` (True is not 1, a tuple is not a list)."""
    return type(a) is type(b) and a == b and repr(a) == repr(b)


@functools.cache
def builtin_tasks() -> tuple[CodeTask, ...]:
    """The 120 built-in tasks, always the same: one seeded generator per task."""
    tasks = []
    for f_index, family in enumerate(FAMILIES):
        for variant in range(VARIANTS):
            rng = random.Random(f"{BUILTIN_SEED}:{f_index}:{variant}")
            tasks.append(_build(family, variant, rng))
    return tuple(tasks)


def split_of(index: int) -> str:
    """Every fifth task is held out: 96 train, 24 test, every family in both."""
    return "test" if index % 5 == 4 else "train"
