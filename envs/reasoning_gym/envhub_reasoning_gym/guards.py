"""Where envhub grades a reply differently from Reasoning Gym's own `score_answer`, and why.

Reasoning Gym's scorer decides, except in two classes of reply that a policy can aim at without solving
the item (red-team findings, docs/rewards.md):

- **Hedges.** The default `score_answer` (and the custom ones of `CONTAINMENT_CREDIT`, which copy it)
  gives a reply that merely contains the answer `len(answer) / len(reply)`: "True False" was a sure
  0.4-0.5 on every yes/no item, and a list of candidates a share of 1 on any item. Here a reply that
  holds the answer among other text scores 0; the exact answer still scores 1.0, and every other score
  the dataset gives (its own partial credit for a partly right grid, say) is kept.
- **Scorers that accept anything.** `OWN_SCORERS` replace a dataset's scorer where it grades no answer:
  game_of_life_halting compared `bool(reply)` with `bool("False")`, so any non-empty reply scored 1.0.
  `EXTRA_CHECKS` add what a scorer forgot: puzzle24 never checked that the numbers are the item's,
  complex_arithmetic paid "nan" 1.0, and coin_flip paid "0" 1.0 on every probability under 1.
- **Replies the scorer would run.** Nine scorers `eval` the reply (directly, or through sympy's
  `parse_expr`): one reply could replace a scorer with `lambda: 1.0` for every later episode of the
  process, or keep the grader busy forever (`9**9**9**9`). `eval` in those modules reads literals only,
  and a reply to the sympy datasets must be plain arithmetic (`plain_math`) or it scores 0.
"""

from __future__ import annotations

import ast
import importlib
import math
import re
from collections.abc import Callable
from fractions import Fraction
from typing import Any

from reasoning_gym.dataset import ProceduralDataset  # type: ignore[import-untyped]
from reasoning_gym.factory import DATASETS  # type: ignore[import-untyped]

from envhub.grading import hedges
from envhub.grading.numbers import integer

CONTAINMENT_CREDIT = {"codeio", "manipulate_matrix", "tsumego"}
"""Datasets with a custom scorer that also pays `len(answer) / len(reply)` for a reply containing the
answer (besides every dataset that keeps the default scorer, found by `pays_containment`)."""

HEDGE_NOTE = "the reply holds the answer among other text (a hedge, not an answer); scored 0"


FULL_MARKS_ONLY = frozenset(
    """advanced_geometry arc_agi boxnet calendar_arithmetic chain_sum codeio coin_flip color_cube_rotation
    complex_arithmetic countdown emoji_mystery figlet_font fraction_simplification futoshiki graph_color
    group_anagrams gsm_symbolic jugs knight_swap letter_jumble palindrome_generation polynomial_equations
    power_function prime_factorization products propositional_logic rearc rectangle_count rubiks_cube
    rush_hour sentence_reordering spell_backward time_intervals tsumego word_sorting""".split()  # noqa: SIM905
)
"""Datasets whose partial credit pays a reply that reads nothing of the question: some of the 30 constants
of benchmarks/constant_sweep.py earned more than their base rate (the share of items they are the answer
to) over 20 seeds: rectangle_count's closeness credit 0.40 for "5" (right on 5% of items),
polynomial_equations' 0.35 for "0" (right on 20%), time_intervals' 0.11, propositional_logic's 0.09 for any
conclusion, figlet_font's and spell_backward's character credit, and 0.01-0.05 for the format alone in
the rest. There the reward pays full marks only; the dataset's own score stays in the `partial_credit`
component (weight 0). Datasets not listed keep their partial credit: no constant earns it."""


def pays_containment(name: str) -> bool:
    """Whether dataset `name`'s scorer gives partial credit to any reply that contains the answer."""
    return name in CONTAINMENT_CREDIT or DATASETS[name][0].score_answer is ProceduralDataset.score_answer


def _squashed(text: str) -> str:
    return " ".join(text.split()).lower()


def is_hedge(answer: str | None, oracle: Any, *, any_more: bool = False) -> bool:
    """Whether `answer` contains the item's answer and more words or numbers (case, runs of spaces and
    punctuation aside): "True False", the right list followed by another, the answer twice. With
    `any_more` (a scorer paying `len(answer) / len(reply)`) any more text counts, punctuation too."""
    if not isinstance(answer, str) or not isinstance(oracle, str) or not oracle.strip():
        return False
    said, right = _squashed(answer), _squashed(oracle)
    if right not in said or said == right:
        return False
    return any_more or any(c.isalnum() for c in said.replace(right, " ", 1))


def game_of_life_halting(answer: str | None, entry: dict[str, Any]) -> float:
    """1.0 when the reply is the item's truth value ("True"/"False", any case)."""
    return float(isinstance(answer, str) and answer.strip().lower() == str(entry["answer"]).strip().lower())


def puzzle24(answer: str | None, entry: dict[str, Any]) -> bool:
    """Whether the reply uses exactly the item's four numbers: puzzle24's scorer checks only that it uses
    four numbers in range and makes 24, so `6*4*1*1` solved every item."""
    used = re.findall(r"\b\d+\b", answer or "")
    return sorted(integer(n) for n in used) == sorted(entry["metadata"]["numbers"])  # bounded: no crash


OWN_SCORERS: dict[str, Callable[[str | None, dict[str, Any]], float]] = {
    "game_of_life_halting": game_of_life_halting,
}


def finite(answer: str | None, entry: dict[str, Any]) -> bool:
    """Whether the reply names no NaN or infinity: complex_arithmetic scores `min(1.0, exp(-distance))`,
    and with a NaN distance `min` returns 1.0, so "nan" solved every item."""
    return not re.search(r"nan|inf", answer or "", re.IGNORECASE)


def coin_flip(answer: str | None, entry: dict[str, Any]) -> bool:
    """Whether the reply is the probability (within the scorer's own 1e-4). coin_flip's partial credit
    is the share of leading characters that match, over the shorter string: "0" matched "0.3125" in
    full and scored 1.0 on every probability under 1."""
    try:
        said = float(Fraction((answer or "").replace(",", "")))
        right = float(Fraction(str(entry["answer"]).replace(",", "")))
    except (ValueError, ZeroDivisionError):
        return False
    return abs(said - right) <= COIN_FLIP_TOLERANCE


COIN_FLIP_TOLERANCE = 1e-4
EXTRA_CHECKS: dict[str, Callable[[str | None, dict[str, Any]], bool]] = {
    "puzzle24": puzzle24,
    "complex_arithmetic": finite,
    "coin_flip": coin_flip,
}
"""Conditions the dataset's scorer forgets: a reply failing one scores 0 whatever the scorer says."""
EXTRA_NOTE = (
    "the reply does not answer this item, though the dataset's scorer would pay it "
    "(envhub_reasoning_gym.guards.EXTRA_CHECKS); scored 0"
)


def score(dataset: ProceduralDataset, answer: str | None, entry: dict[str, Any]) -> tuple[float, str | None]:
    """The reply's score, and a note when envhub's rule, not the dataset's, decided it: a reply that
    names several candidate answers, one of them right, scores 0 (`envhub.grading.hedges`)."""
    value, note = graded(dataset, answer, entry)
    if value > 0.0 and hedges.hedged(answer, lambda part: graded(dataset, part, entry)[0]):
        return 0.0, hedges.HEDGE_NOTE
    return value, note


def graded(dataset: ProceduralDataset, answer: str | None, entry: dict[str, Any]) -> tuple[float, str | None]:
    """`score` without the rule for several candidates: the dataset's scorer under envhub's guards."""
    source = entry.get("metadata", {}).get("source_dataset", "")
    if source in PARSES_REPLY and not plain_math(answer, names=source not in ARITHMETIC_ONLY):
        return 0.0, RUNS_NOTE
    own = OWN_SCORERS.get(source)
    if own is not None:
        return own(answer, entry), None
    check = EXTRA_CHECKS.get(source)
    if check is not None and not check(answer, entry):
        return 0.0, EXTRA_NOTE
    official = float(dataset.score_answer(answer, entry))
    share = 0.0 < official < 1.0 and source in DATASETS and pays_containment(source)
    if official > 0.0 and is_hedge(answer, entry.get("answer"), any_more=share):
        return 0.0, HEDGE_NOTE
    return official, None


# -- replies the scorer would run as Python --------------------------------------------------------------

EVALS_REPLY = (
    "reasoning_gym.algorithmic.binary_matrix",
    "reasoning_gym.games.n_queens",
    "reasoning_gym.algorithmic.spiral_matrix",
    "reasoning_gym.algorithmic.string_insertion",
)
"""Modules whose score_answer calls `eval(reply)` to read a Python list: one reply could run any code in
the grading process (replace a scorer with `lambda: 1.0` for every later episode, read the answer, hang
on `9**9**9**9`). Their module-level name `eval` is bound to `literal_only`, which reads the literals those
scorers expect and nothing else."""

PARSES_REPLY = {
    "countdown",
    "puzzle24",
    "simple_integration",
    "intermediate_integration",
    "polynomial_multiplication",
}
"""Datasets whose score_answer runs the reply through sympy's `parse_expr`, which evals it: the reply is
read first by `plain_math`, and anything else scores 0 without reaching the scorer."""

MAX_LITERAL_CHARS = 20_000
MAX_EXPRESSION_CHARS = 2_000
MATH_NAMES = frozenset(
    """sin cos tan cot sec csc asin acos atan sinh cosh tanh asinh acosh atanh exp log ln sqrt pi E I Abs oo
    Integral""".split()  # noqa: SIM905  (Integral: intermediate_integration keeps some answers unevaluated)
)
"""Function and constant names an answer to these datasets may use; any other name longer than one
letter (eval, setattr, chr, ...) is refused."""
_ALLOWED = re.compile(r"[A-Za-z0-9\s+\-*/().^,]*")
_NAME = re.compile(r"[A-Za-z]+")
MAX_EXPONENT = 1000
MAX_CONSTANT = 10**30
MAX_DIGITS = 1000
"""No number an answer holds, constant or power, has more digits than this."""
RUNS_NOTE = "the reply is not plain arithmetic, and the dataset's scorer would run it as Python; scored 0"


def literal_only(text: str, *_: Any) -> Any:
    """`ast.literal_eval` of `text`, standing in for `eval` in `EVALS_REPLY` (whose scorers catch its
    errors and score 0)."""
    if not isinstance(text, str) or len(text) > MAX_LITERAL_CHARS:
        raise ValueError("not a literal these scorers read")
    return ast.literal_eval(text)


for _module in EVALS_REPLY:
    setattr(importlib.import_module(_module), "eval", literal_only)  # noqa: B010


GROWS_EXPONENTIALLY = frozenset({"exp", "sinh", "cosh"})
ARITHMETIC_ONLY = frozenset({"countdown", "puzzle24"})
"""Datasets whose answers are numbers and + - * / alone: no name at all is read."""


def plain_math(text: str | None, *, names: bool = True) -> bool:
    """Whether `text` is an arithmetic expression sympy can parse without running anything but maths:
    numbers, one-letter symbols and `MATH_NAMES`, + - * / ^ and parentheses, where no exponent is over
    `MAX_EXPONENT` and no number, a power of numbers included, over `MAX_DIGITS` digits (sympy works out
    `9**9**9**9` and never finishes)."""
    if not isinstance(text, str) or len(text) > MAX_EXPRESSION_CHARS or not _ALLOWED.fullmatch(text):
        return False
    if not names and _NAME.search(text):
        return False
    if any(len(name) > 1 and name not in MATH_NAMES for name in _NAME.findall(text)):
        return False
    if re.search(r"\.\s*[A-Za-z]", text):  # attribute access: x.n(10**6)
        return False
    try:
        tree = ast.parse(text.replace("^", "**"), mode="eval")
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return False
    return _tame(tree)


def _tame(tree: ast.Expression) -> bool:
    try:
        return _magnitude(tree.body)[0] <= MAX_DIGITS
    except (_TooBig, RecursionError, OverflowError):
        return False


class _TooBig(Exception):
    """A constant, exponent or power beyond what an answer needs."""


def _magnitude(node: ast.AST) -> tuple[float, bool]:
    """A bound on log10 of the value `node` makes sympy compute, and whether `node` is numbers alone
    (sympy leaves anything holding a symbol unevaluated); raises `_TooBig` for a constant over
    `MAX_CONSTANT`, a numeric exponent over `MAX_EXPONENT`, or exp of a number over `MAX_DIGITS`."""
    if isinstance(node, ast.Constant):
        if not isinstance(node.value, int | float) or not math.isfinite(node.value):
            raise _TooBig
        if abs(node.value) > MAX_CONSTANT:
            raise _TooBig
        return math.log10(max(abs(node.value), 1)), True
    if isinstance(node, ast.Name):
        return 0.0, False
    if isinstance(node, ast.UnaryOp):
        return _magnitude(node.operand)
    if isinstance(node, ast.Call):
        args = [_magnitude(a) for a in node.args]
        inner, numeric = max([0.0, *(m for m, _ in args)]), all(n for _, n in args)
        if numeric and isinstance(node.func, ast.Name) and node.func.id in GROWS_EXPONENTIALLY:
            if inner > math.log10(MAX_DIGITS):
                raise _TooBig  # exp(exp(exp(100))): sympy evaluates it for ever
            return 10**inner * math.log10(math.e), True
        return inner, numeric
    if isinstance(node, ast.BinOp):
        (left, left_numeric), (right, right_numeric) = _magnitude(node.left), _magnitude(node.right)
        numeric = left_numeric and right_numeric
        if isinstance(node.op, ast.Pow):
            if right_numeric and right > math.log10(MAX_EXPONENT):
                raise _TooBig
            return left * 10**right, numeric
        if isinstance(node.op, ast.Mult):
            return left + right, numeric
        return max(left, right) + math.log10(2), numeric
    raise _TooBig
