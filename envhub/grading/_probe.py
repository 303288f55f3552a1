"""The untrusted half of the grader: runs *inside* the sandbox, in the same process as the solution.

Sent as `python3 -I -c <this file's source> FD`, so it may import only the standard library. It imports
the solution, evaluates each test's probe (a call such as `add(2, 3)`; never the expected value, which
it is not given) and writes the value, encoded type-strictly, as one JSON line to the result pipe FD.
Nothing here is trusted: the solution can rewrite this process at will. The grader (the parent
process) decides pass or fail from the encoded values alone, so a forged line can only claim a value,
and a value is only right if it is the right answer.
"""

import json
import math
import os
import sys
from typing import Any

MAX_DEPTH = 64
MAX_ITEMS = 1_000_000


def encode(value: Any, depth: int = 0, budget: list[int] | None = None) -> list[Any]:
    """A JSON tree of exact builtin types; anything else (subclasses too) is refused with TypeError.

    `type(x) is int`, not isinstance: an int subclass with `__eq__` always true must not pass as an int.
    """
    budget = budget if budget is not None else [MAX_ITEMS]
    budget[0] -= 1
    if depth > MAX_DEPTH or budget[0] < 0:
        raise ValueError("the value is too deep or too large to compare")
    t = type(value)
    if value is None:
        return ["none"]
    if t is bool:
        return ["bool", value]
    if t is int:
        return ["int", hex(value)]  # linear in the digits, and no int-to-str digit limit
    if t is float:
        return ["float", repr(value)]
    if t is complex:
        return ["complex", repr(value.real), repr(value.imag)]
    if t is str:
        return ["str", value]
    if t is bytes:
        return ["bytes", value.hex()]
    if t in (list, tuple, set, frozenset):
        items = [encode(v, depth + 1, budget) for v in value]
        if t in (set, frozenset):
            items.sort(key=json.dumps)
        return [t.__name__, items]
    if t is dict:
        return [
            "dict",
            [[encode(k, depth + 1, budget), encode(v, depth + 1, budget)] for k, v in value.items()],
        ]
    raise TypeError(f"the result is a {t.__module__}.{t.__qualname__}; only builtin values can be compared")


def decode(tree: list[Any]) -> Any:
    tag = tree[0]
    if tag == "none":
        return None
    if tag == "bool":
        return bool(tree[1])
    if tag == "int":
        return int(tree[1], 16)
    if tag == "float":
        return float(tree[1])
    if tag == "complex":
        return complex(float(tree[1]), float(tree[2]))
    if tag == "str":
        return str(tree[1])
    if tag == "bytes":
        return bytes.fromhex(tree[1])
    if tag in ("list", "tuple", "set", "frozenset"):
        kind = {"list": list, "tuple": tuple, "set": set, "frozenset": frozenset}[tag]
        return kind(decode(v) for v in tree[1])
    if tag == "dict":
        return {decode(k): decode(v) for k, v in tree[1]}
    raise ValueError(f"unknown value tag {tag!r}")


def normal(value: object) -> Any:
    """The value rebuilt from plain builtins: whatever `__eq__` the solution defined is gone."""
    return decode(encode(value))


def strict_eq(left: object, right: object) -> bool:
    a, b = normal(left), normal(right)
    if type(a) is float and type(b) is float and math.isnan(a) and math.isnan(b):
        return True
    return bool(a == b)


def strict_statements(source: str) -> Any:
    """Compile a statement test with every `a == b` turned into `__envhub_eq__(a, b)`.

    Statement tests run beside the solution, so this only stops `__eq__` tricks, not a solution that
    rewrites this process; the grader marks their verdicts untrusted.
    """
    import ast  # only statement tests need it: most grades skip its import time

    class StrictEquality(ast.NodeTransformer):
        def visit_Compare(self, node: ast.Compare) -> ast.expr:
            self.generic_visit(node)
            if len(node.ops) == 1 and isinstance(node.ops[0], ast.Eq | ast.NotEq):
                call = ast.Call(ast.Name("__envhub_eq__", ast.Load()), [node.left, node.comparators[0]], [])
                return call if isinstance(node.ops[0], ast.Eq) else ast.UnaryOp(ast.Not(), call)
            return node

    tree = ast.fix_missing_locations(StrictEquality().visit(ast.parse(source, "<test>", "exec")))
    return compile(tree, "<test>", "exec")


def describe(exc: BaseException) -> str:
    try:
        text = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
    except BaseException:  # a hostile __str__
        text = "an exception"
    return text[:2000]


def main() -> None:
    out = os.fdopen(int(sys.argv[1]), "w", buffering=1)
    request = json.loads(sys.stdin.read())
    sys.stdin = open(os.devnull)  # noqa: SIM115 - lives as long as the process
    os.chdir(request["workdir"])
    sys.path.insert(0, request["workdir"])  # only now: the modules above come from the standard library

    def send(message: dict[str, Any]) -> None:
        out.write(json.dumps(message) + "\n")

    try:
        module = __import__(request["module"])
        ns = dict(vars(module))
        ns["__envhub_eq__"] = strict_eq
        exec(request["prelude"], ns)
    except BaseException as exc:  # SystemExit and KeyboardInterrupt too: a solution that exits fails
        send({"import_error": describe(exc)})
        return
    send({"ready": True})
    for index, probe, mode in request["probes"]:
        try:
            if mode == "statement":
                exec(strict_statements(probe), dict(ns))
                send({"i": index, "ok": True})
            else:
                send({"i": index, "ok": True, "value": encode(eval(probe, dict(ns)))})
        except BaseException as exc:
            send({"i": index, "ok": False, "error": describe(exc)})


if __name__ == "__main__":
    main()
