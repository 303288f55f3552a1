"""Reach a target number with + - * / over given numbers, each used at most once, in one answer."""

from __future__ import annotations

import ast
import random
from fractions import Fraction

import envhub
from envhub.messages import Message

SMALL = list(range(1, 11))
LARGE = [25, 50, 75, 100]
MAX_EXPRESSION_CHARS = 1000
"""Six numbers, five operators and their parentheses take under 100 characters; a longer final line is
not an answer, and parsing one that the reply made arbitrarily long or deep crashed the reward."""
_OPS: dict[type[ast.operator], str] = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/"}


class InvalidExpression(ValueError):
    """The answer is not an arithmetic expression over the allowed numbers."""


def evaluate(expression: str, allowed: list[int]) -> Fraction:
    """Exact value of an expression that uses only + - * / and numbers from `allowed`, each at most once."""
    if len(expression) > MAX_EXPRESSION_CHARS:
        raise InvalidExpression(
            f"the expression has {len(expression)} characters; at most {MAX_EXPRESSION_CHARS}"
        )
    try:
        tree = ast.parse(expression.strip(), mode="eval")
    except SyntaxError as exc:
        raise InvalidExpression(f"not an arithmetic expression: {exc.msg}") from exc
    except RecursionError as exc:  # nesting deeper than the parser takes, e.g. 500 unary minuses
        raise InvalidExpression("the expression is nested too deeply") from exc
    remaining = list(allowed)

    def value(node: ast.expr) -> Fraction:
        if isinstance(node, ast.Constant) and type(node.value) is int:
            if node.value not in remaining:
                raise InvalidExpression(f"{node.value} is not available (numbers left: {remaining})")
            remaining.remove(node.value)
            return Fraction(node.value)
        if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
            left, right = value(node.left), value(node.right)
            if isinstance(node.op, ast.Add):
                return left + right
            if isinstance(node.op, ast.Sub):
                return left - right
            if isinstance(node.op, ast.Mult):
                return left * right
            if right == 0:
                raise InvalidExpression("division by zero")
            return left / right
        raise InvalidExpression(f"only integers and + - * / are allowed, found {ast.unparse(node)!r}")

    try:
        return value(tree.body)
    except RecursionError as exc:
        raise InvalidExpression("the expression is nested too deeply") from exc


def final_line(text: str) -> str:
    """The expression in an answer: its last non-empty line, without a trailing '= value'."""
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return lines[-1].split("=")[0].strip().strip("`") if lines else ""


class Countdown(envhub.SingleTurnEnv):
    """The numbers game from the TV show: one attempt, scored exactly."""

    def __init__(self, numbers: int = 4) -> None:
        if not 2 <= numbers <= 6:
            raise ValueError(f"numbers must be between 2 and 6, got {numbers}")
        super().__init__()
        self.count = numbers
        self.numbers: list[int] = []
        self.target = 0
        self.solution = ""

    def setup(self, rng: random.Random) -> str:
        while True:
            self.numbers = rng.sample(LARGE, rng.randint(0, 2)) + rng.sample(SMALL, self.count)
            self.numbers = self.numbers[: self.count]
            rng.shuffle(self.numbers)
            self.solution, value = self._combine(rng, [(str(n), Fraction(n)) for n in self.numbers])
            if value.denominator == 1 and 10 <= value <= 999:
                self.target = int(value)
                break
        listed = ", ".join(map(str, self.numbers))
        return (
            f"Using the numbers {listed}, each at most once, and + - * / with parentheses, write an "
            f"expression equal to {self.target}. Reply with the expression alone on the last line."
        )

    @staticmethod
    def _combine(rng: random.Random, terms: list[tuple[str, Fraction]]) -> tuple[str, Fraction]:
        """Join random pairs of terms until one is left: a solution exists by construction."""
        terms = list(terms)
        while len(terms) > 1:
            (a, va), (b, vb) = (terms.pop(rng.randrange(len(terms))) for _ in range(2))
            choices = [(f"({a} + {b})", va + vb), (f"{a} * {b}", va * vb)]
            if va > vb:
                choices.append((f"({a} - {b})", va - vb))
            if vb != 0 and (va / vb).denominator == 1 and vb != 1:
                choices.append((f"{a} / {b}", va / vb))
            terms.append(rng.choice(choices))
        return terms[0]

    @envhub.reward
    def correct(self, answer: str) -> float:
        try:
            return float(evaluate(final_line(answer), self.numbers) == self.target)
        except InvalidExpression:
            return 0.0

    @envhub.reward(weight=0.0)
    def well_formed(self, answer: str) -> float:
        """Recorded, not rewarded: whether the answer was a legal expression at all."""
        try:
            evaluate(final_line(answer), self.numbers)
        except InvalidExpression:
            return 0.0
        return 1.0

    def reference_action(self, messages: list[Message]) -> envhub.Action:
        return self.solution
