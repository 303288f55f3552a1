"""Canary tests: copies of the instance's own tests that the grader adds to every graded run.

Why: code imported by the tests runs inside the test runner and can rewrite its reporting (patch
pytest's report hooks, unittest's result, print a forged summary and exit). The canaries are made so
that such code cannot tell them from the real tests by name, place or shape:

- a **must-fail** canary is a copy of a listed PASS_TO_PASS test whose last statement, an assertion,
  is negated in the smallest way that reads like the original (its literal expected value changed,
  `==` turned into `!=`, `assertTrue` into `assertFalse`, ...). The original passes before and after
  the fix, so in any run that could be resolved the assertion held, and its negation must fail, whatever
  the code under test does. Being the last statement, nothing the test would undo afterwards is skipped;
  tests that could stop early (`return`, `yield`) or are expected to fail (`xfail`) are never used;
- a **must-pass** canary is an unmodified copy of another PASS_TO_PASS test: it only has to appear in
  the log, so a forged log that lists the real tests loses it;
- both are named in the file's own style (words of its own test names), written into the scope of
  their original (its class, or the module) after a later sibling, in several listed test files, and
  selected the way the command selects tests (pytest node ids, django labels, sympy `file::name`).

A must-fail canary reported passed, or any canary missing from the log, voids the grade. The names,
the copied tests, the mutations and the places are drawn fresh for every grade, and the canaries are
written only after the test patch is applied, moments before the test command starts.
"""

from __future__ import annotations

import ast
import copy
import itertools
import random
import re
import secrets
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from envhub_swe.parsers import PASSING

_DJANGO_ID = re.compile(r"^(\S+) \(([\w.]+)\)$")
_SYMPY_PARSER = "parse_log_sympy"
_DJANGO_PARSER = "parse_log_django"
_ENV_ASSIGNMENT = re.compile(r"^[A-Za-z_]\w*=")
_NOT_PLAIN = re.compile(
    r"xfail|skip|expectedfailure|slow|parametri[sz]e|flaky|fixture|image_comparison|figures_equal",
    re.IGNORECASE,
)
"""Decorators after which a copy may not behave like a plain passing test (expected failures count as
passes; skipped or parametrised copies carry other ids; image tests name their files after the test)."""
MUST_FAIL = 3
MUST_PASS = 3
MAX_FILES = 8
"""How many candidate test files are read; the canaries go to as many of them as hold usable tests."""

_NEGATED_METHODS = {
    "assertEqual": "assertNotEqual",
    "assertEquals": "assertNotEqual",
    "assertNotEqual": "assertEqual",
    "assertTrue": "assertFalse",
    "assertFalse": "assertTrue",
    "assertIs": "assertIsNot",
    "assertIsNot": "assertIs",
    "assertIsNone": "assertIsNotNone",
    "assertIsNotNone": "assertIsNone",
    "assertIn": "assertNotIn",
    "assertNotIn": "assertIn",
    "assertIsInstance": "assertNotIsInstance",
    "assertNotIsInstance": "assertIsInstance",
    "assertAlmostEqual": "assertNotAlmostEqual",
    "assertNotAlmostEqual": "assertAlmostEqual",
    "assertRegex": "assertNotRegex",
    "assertNotRegex": "assertRegex",
}
"""unittest assertions and their exact negations (each passes exactly when the other fails)."""
_LITERAL_METHODS = {
    "assertEqual",
    "assertEquals",
    "assertListEqual",
    "assertTupleEqual",
    "assertDictEqual",
    "assertSetEqual",
    "assertSequenceEqual",
    "assertMultiLineEqual",
}
_NEGATED_OPS: dict[type[ast.cmpop], type[ast.cmpop]] = {
    ast.Eq: ast.NotEq,
    ast.NotEq: ast.Eq,
    ast.Is: ast.IsNot,
    ast.IsNot: ast.Is,
    ast.In: ast.NotIn,
    ast.NotIn: ast.In,
}
_OP_TEXT: dict[type[ast.cmpop], str] = {
    ast.Eq: r"==",
    ast.NotEq: r"!=",
    ast.Is: r"\bis\b(?!\s+not\b)",
    ast.IsNot: r"\bis\s+not\b",
    ast.In: r"(?<!not )\bin\b",
    ast.NotIn: r"\bnot\s+in\b",
}
_OP_SPELLING: dict[type[ast.cmpop], str] = {
    ast.Eq: "==",
    ast.NotEq: "!=",
    ast.Is: "is",
    ast.IsNot: "is not",
    ast.In: "in",
    ast.NotIn: "not in",
}


@dataclass(frozen=True)
class Canary:
    """One canary test: where it is, how the log names it and how the command selects it."""

    file: str
    name: str
    test_id: str
    """The id the log parser gives it (pytest node id, django `name (module.Class)`, sympy bare name)."""
    must_fail: bool
    original: str
    """The listed test it copies."""
    selector: str
    """What the command adds to run it alone: a pytest node id, a django label, sympy's `file::name`."""


@dataclass(frozen=True)
class Canaries:
    """The canaries of one grade, the test files that hold them, and the command's extra selectors."""

    tests: tuple[Canary, ...]
    sources: tuple[tuple[str, str], ...] = ()
    """(file, its text with the canaries in), to be written before the test command runs."""
    extra_args: tuple[str, ...] = ()
    sympy: bool = False

    @property
    def files(self) -> tuple[str, ...]:
        """The test files the canaries were written into."""
        return tuple(dict.fromkeys(c.file for c in self.tests))

    def owns(self, test_id: str) -> bool:
        """Whether a log's test id is one of the canaries (sympy also prints `file.py:name`)."""
        for canary in self.tests:
            if test_id == canary.test_id or (self.sympy and test_id.endswith(".py:" + canary.name)):
                return True
        return False

    def verdict(self, statuses: Mapping[str, object]) -> str | None:
        """Why the log cannot be trusted, judged by the canaries; None when they all behaved."""
        for canary in self.tests:
            if canary.test_id not in statuses:
                return (
                    f"canary: the canary test {canary.test_id} is missing from the log "
                    "(the runner's report was altered)"
                )
        for canary in self.tests:
            if canary.must_fail and statuses[canary.test_id] in PASSING:
                return (
                    f"canary: the canary test {canary.test_id}, a copy of {canary.original} made to fail, "
                    "was reported passed"
                )
        return None


# -- where: the command's test files --------------------------------------------------------------------


def candidates(command: str) -> list[str]:
    """Paths the command's arguments may name: files, pytest node ids, dotted module labels."""
    found: list[str] = []
    for arg in _args(command):
        if _ENV_ASSIGNMENT.match(arg):
            continue
        path = arg.split("::")[0]
        if path.endswith(".py"):
            found.append(path.removeprefix("./"))
        elif re.fullmatch(r"[A-Za-z_][\w]*(\.[A-Za-z_]\w*)+", arg):
            parts = arg.split(".")
            for n in range(len(parts), 0, -1):  # module.Class.test_method: the longest module that exists
                stem = "/".join(parts[:n])
                found += [f"tests/{stem}.py", f"{stem}.py"]
    return list(dict.fromkeys(found))


def to_read(command: str, tests: Sequence[str], existing: Sequence[str]) -> list[str]:
    """The existing candidate files worth reading: those holding listed tests first, at most MAX_FILES."""
    listed = {file for test in tests if (file := _file_of(test)) is not None}
    holding = [p for p in existing if any(p == w or p.endswith("/" + w) for w in listed)]
    others = [p for p in existing if p not in holding and p.rsplit("/", 1)[-1].startswith("test")]
    return (holding + others)[:MAX_FILES]


def _file_of(test: str) -> str | None:
    """The file a listed test id names: `path::name`, or django's `name (module.Class)`."""
    if "::" in test:
        return test.split("::")[0]
    if match := _DJANGO_ID.match(test):
        module = _django_parts(match[1], match[2])[0]
        return "/".join(module) + ".py" if module else None
    return None


def _django_parts(name: str, dotted: str) -> tuple[list[str], str]:
    """(module parts, class) of django's `name (module.Class)` or Python 3.11's `name (module.Class.name)`."""
    parts = dotted.split(".")
    if len(parts) > 2 and parts[-1] == name:
        parts = parts[:-1]
    return parts[:-1], parts[-1]


def _args(command: str) -> list[str]:
    try:
        return shlex.split(command)
    except ValueError:
        return command.split()


# -- which tests: the listed PASS_TO_PASS tests of each file ------------------------------------------------


@dataclass
class _Listed:
    """A PASS_TO_PASS test found in a file: its definition and how its id is spelled."""

    file: str
    scope: str
    """Its class, or "" at module level."""
    node: ast.FunctionDef
    siblings: list[ast.FunctionDef]
    """The functions of its scope from it on, in order (a copy goes before it or after one of them)."""
    test_id: str
    lines: _Lines


def _locate(test_id: str, parser: str) -> tuple[str | None, str, str] | None:
    """(file, scope, name) of a listed id; the file None when the id does not say (sympy's bare names)."""
    if parser == _DJANGO_PARSER:
        match = _DJANGO_ID.match(test_id)
        if match is None:
            return None
        module, cls = _django_parts(match[1], match[2])
        return ("/".join(module) + ".py" if module else None), cls, match[1]
    if parser == _SYMPY_PARSER:
        return (None, "", test_id) if re.fullmatch(r"test\w*", test_id) else None
    if "[" in test_id or "::" not in test_id:
        return None
    path, *rest = test_id.split("::")
    if len(rest) == 1:
        return path, "", rest[0]
    if len(rest) == 2:
        return path, rest[0], rest[1]
    return None


def _functions(tree: ast.Module) -> dict[tuple[str, str], tuple[ast.FunctionDef, list[ast.FunctionDef]]]:
    """Every function defined once at module level or in a module-level class, with its later siblings."""
    found: dict[tuple[str, str], tuple[ast.FunctionDef, list[ast.FunctionDef]]] = {}
    seen: dict[tuple[str, str], int] = {}
    scopes: list[tuple[str, list[ast.stmt]]] = [("", tree.body)]
    scopes += [(n.name, n.body) for n in tree.body if isinstance(n, ast.ClassDef)]
    for scope, body in scopes:
        defs = [n for n in body if isinstance(n, ast.FunctionDef)]
        assigned = {
            t.id for n in body if isinstance(n, ast.Assign) for t in n.targets if isinstance(t, ast.Name)
        }
        for i, node in enumerate(defs):  # defined once and never rebound: the test the runner runs
            key = (scope, node.name)
            seen[key] = seen.get(key, 0) + 1
            if node.name not in assigned:
                found[key] = (node, defs[i:])
    return {key: value for key, value in found.items() if seen[key] == 1}


def _xfail_scopes(tree: ast.Module, lines: _Lines) -> set[str]:
    """Scopes whose tests a `pytestmark` or class decorator may mark as expected failures ("" = module)."""
    marked: set[str] = set()
    scopes: list[tuple[str, list[ast.stmt], list[ast.expr]]] = [("", tree.body, [])]
    scopes += [(n.name, n.body, n.decorator_list) for n in tree.body if isinstance(n, ast.ClassDef)]
    for scope, body, decorators in scopes:
        marks = [
            s
            for s in body
            if isinstance(s, ast.Assign)
            and any(isinstance(t, ast.Name) and t.id == "pytestmark" for t in s.targets)
        ]
        if any(_NOT_PLAIN.search(lines.segment(n)) for n in [*marks, *decorators]):
            marked.add(scope)
    if "" in marked:
        marked |= {n.name for n in tree.body if isinstance(n, ast.ClassDef)}
    return marked


# -- the copies --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Copy:
    """A canary's text and where it goes: after line `after` (1-based) of its file."""

    after: int
    text: str
    scope: str
    name: str
    expected: str
    """ast.dump of the function the text must parse to (checked on the written file)."""


def _body_nodes(node: ast.FunctionDef) -> list[ast.AST]:
    """The nodes of a function's own body, not of the functions, lambdas and classes it defines."""
    found: list[ast.AST] = []
    todo: list[ast.AST] = list(node.body)
    while todo:
        current = todo.pop()
        found.append(current)
        if not isinstance(current, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda | ast.ClassDef):
            todo.extend(ast.iter_child_nodes(current))
    return found


def _plain(listed: _Listed) -> bool:
    """A test a copy of which behaves like it: not expected to fail, skipped or parametrised, and not
    naming itself (a test reading its own name would see the copy's)."""
    node, lines = listed.node, listed.lines
    if any(_NOT_PLAIN.search(lines.segment(d)) for d in node.decorator_list):
        return False
    if ast.get_docstring(node) is not None:  # unittest's verbose runners print
        return False  # a docstring's first line instead of the test's id: the copy's would be missing
    body = lines.text(node.body[0].lineno, node.end_lineno or node.lineno).decode(errors="replace")
    return re.search(rf"\b{re.escape(node.name)}\b", body) is None


def _can_stop_early(node: ast.FunctionDef) -> bool:
    return any(isinstance(n, ast.Return | ast.Yield | ast.YieldFrom | ast.Await) for n in _body_nodes(node))


class _Lines:
    """A source's lines as bytes, for reading and splicing at ast's byte offsets (computed once: test
    files run to thousands of lines, and every test of them is looked at)."""

    def __init__(self, source: str) -> None:
        self.lines = source.encode().splitlines(keepends=True)
        self.starts = [0, *itertools.accumulate(len(line) for line in self.lines)]
        self.data = b"".join(self.lines)

    def offset(self, lineno: int, col: int, first: int = 1) -> int:
        return self.starts[lineno - 1] + col - self.starts[first - 1]

    def text(self, first: int, last: int) -> bytes:
        return self.data[self.starts[first - 1] : self.starts[last]]

    def segment(self, node: ast.AST) -> str:
        """A node's source text, as `ast.get_source_segment` gives it."""
        start = self.offset(node.lineno, node.col_offset)  # type: ignore[attr-defined]
        end = self.offset(node.end_lineno, node.end_col_offset)  # type: ignore[attr-defined]
        return self.data[start:end].decode(errors="replace")


_Edit = tuple[int, int, bytes]


def _start(node: ast.FunctionDef) -> int:
    return min([node.lineno, *(d.lineno for d in node.decorator_list)])


def _negation(
    node: ast.FunctionDef, lines: _Lines, rng: random.Random
) -> tuple[list[_Edit], ast.FunctionDef] | None:
    """Edits that negate the function's last statement in the smallest readable way, and the function
    they must give; None when that statement is not an assertion this knows how to negate."""
    first = _start(node)
    last = node.body[-1]
    intended = copy.deepcopy(node)
    target = intended.body[-1]

    def at(n: ast.AST) -> tuple[int, int]:
        start = lines.offset(n.lineno, n.col_offset, first)  # type: ignore[attr-defined]
        return start, lines.offset(n.end_lineno, n.end_col_offset, first)  # type: ignore[attr-defined]

    if isinstance(last, ast.Assert) and isinstance(target, ast.Assert):
        test = last.test
        if isinstance(test, ast.Compare) and len(test.ops) == 1:
            op = type(test.ops[0])
            if op is ast.Eq:
                for side, index in ((test.comparators[0], None), (test.left, -1)):
                    changed = _mutated_literal(side, lines, first, rng)
                    if changed is not None:
                        text, value = changed
                        assert isinstance(target.test, ast.Compare)
                        if index is None:
                            target.test.comparators[0] = value
                        else:
                            target.test.left = value
                        return [(*at(side), text)], intended
            if op in _NEGATED_OPS:
                gap_start, gap_end = at(test.left)[1], at(test.comparators[0])[0]
                gap = lines.text(first, node.end_lineno or first)[gap_start:gap_end].decode()
                found = [m for m in re.finditer(_OP_TEXT[op], gap)]
                if len(found) != 1:
                    return None
                negated = _NEGATED_OPS[op]
                assert isinstance(target.test, ast.Compare)
                target.test.ops = [negated()]
                begin = gap_start + len(gap[: found[0].start()].encode())
                end = gap_start + len(gap[: found[0].end()].encode())
                return [(begin, end, _OP_SPELLING[negated].encode())], intended
            return None
        start = at(test)[0]
        simple = isinstance(test, ast.Name | ast.Call | ast.Attribute | ast.Subscript | ast.Constant)
        target.test = ast.UnaryOp(op=ast.Not(), operand=target.test)
        if simple:
            return [(start, start, b"not ")], intended
        return [(start, start, b"not ("), (at(test)[1], at(test)[1], b")")], intended
    if (
        isinstance(last, ast.Expr)
        and isinstance(last.value, ast.Call)
        and isinstance(last.value.func, ast.Attribute)
        and isinstance(last.value.func.value, ast.Name)
        and last.value.func.value.id == "self"
        and isinstance(target, ast.Expr)
        and isinstance(target.value, ast.Call)
        and isinstance(target.value.func, ast.Attribute)
    ):
        call, method = last.value, last.value.func.attr
        if method in _LITERAL_METHODS and len(call.args) >= 2:
            for index in (1, 0):
                changed = _mutated_literal(call.args[index], lines, first, rng)
                if changed is not None:
                    target.value.args[index] = changed[1]
                    return [(*at(call.args[index]), changed[0])], intended
        if method in _NEGATED_METHODS:
            end = at(call.func)[1]
            target.value.func.attr = _NEGATED_METHODS[method]
            return [(end - len(method.encode()), end, _NEGATED_METHODS[method].encode())], intended
    return None


def _mutated_literal(
    node: ast.expr, lines: _Lines, first: int, rng: random.Random
) -> tuple[bytes, ast.expr] | None:
    """A literal's text with one value in it changed, and the new literal's node; None if it is not a
    literal with a string, number or bool in it. The new value never equals the old one."""
    try:
        value = ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return None
    leaves = [
        n
        for n in ast.walk(node)
        if isinstance(n, ast.Constant)
        and type(n.value) in (str, bytes, int, float, bool)
        and not _is_dict_key(node, n)
    ]
    if not leaves or node.end_lineno is None or node.end_col_offset is None:
        return None
    leaf = rng.choice(leaves)
    whole_start = lines.offset(node.lineno, node.col_offset, first)
    whole = lines.text(first, node.end_lineno)[
        whole_start : lines.offset(node.end_lineno, node.end_col_offset, first)
    ]
    leaf_start = lines.offset(leaf.lineno, leaf.col_offset, first) - whole_start
    leaf_end = lines.offset(leaf.end_lineno or leaf.lineno, leaf.end_col_offset or 0, first) - whole_start
    replacement = _changed_constant(whole[leaf_start:leaf_end].decode(errors="replace"), leaf.value, rng)
    if replacement is None:
        return None
    text = whole[:leaf_start] + replacement.encode() + whole[leaf_end:]
    try:
        new = ast.parse(text.decode(), mode="eval").body
        if ast.literal_eval(new) == value:
            return None
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return None
    return text, new


def _is_dict_key(root: ast.expr, leaf: ast.Constant) -> bool:
    return any(isinstance(n, ast.Dict) and any(k is leaf for k in n.keys) for n in ast.walk(root))


def _changed_constant(text: str, value: object, rng: random.Random) -> str | None:
    """A constant's source text with its value changed, written the way it was (quotes, prefix)."""
    if isinstance(value, bool):
        return "False" if value else "True"
    if isinstance(value, int | float):
        step = rng.randint(2, 9) * (1 if value >= 0 or rng.random() < 0.5 else -1)
        new = value + step
        return None if new == value else (str(new) if isinstance(value, int) else repr(new))
    if isinstance(value, str | bytes):
        chars = list(text)
        plain = re.fullmatch(r"[bB]?('''|\"\"\"|'|\")(.*)\1", text, re.DOTALL)
        inner = [
            i
            for i, c in enumerate(chars)
            if plain
            and c.isascii()
            and c.isalnum()
            and "\\" not in text
            and plain.start(2) <= i < plain.end(2)
        ]
        if inner:
            i = rng.choice(inner)
            pool = "0123456789" if chars[i].isdigit() else "abcdefghijklmnopqrstuvwxyz"
            choice = rng.choice([c for c in pool if c != chars[i].lower()])
            chars[i] = choice.upper() if chars[i].isupper() else choice
            return "".join(chars)
        if plain and "\\" not in text:  # nothing to change in it (empty, spaces): one word more
            q = plain.start(2)
            return text[:q] + rng.choice(("x", "a", "ok", "none")) + text[q:]
        return repr(value + (b"x" if isinstance(value, bytes) else "x"))  # type: ignore[operator]
    return None


# -- names in the file's style -----------------------------------------------------------------------------


def _words(name: str) -> list[str]:
    if "_" in name:
        return [w for w in name.split("_") if w]
    return re.findall(r"[A-Z]+(?![a-z])|[A-Z]?[a-z0-9]+", name)


def _join(words: list[str], like: str) -> str:
    if "_" in like:
        return "_".join(words)
    return words[0] + "".join(w[:1].upper() + w[1:] for w in words[1:])


def _fresh_name(
    original: str, vocabulary: list[str], taken: set[str], source: str, rng: random.Random
) -> str:
    """A name like the file's others: the original's words with one changed or one more, from the words
    of the file's test names; never a name the file or the listed tests already use."""
    words = _words(original) or ["test"]
    for attempt in range(200):
        new = list(words)
        fresh = [w for w in vocabulary if w not in words]
        word = rng.choice(fresh) if fresh and attempt < 150 else str(rng.randint(2, 99))
        if len(new) > 2 and rng.random() < 0.5:
            new[rng.randrange(1, len(new))] = word
        else:
            new.append(word)
        name = _join(new, original)
        if name != original and name not in taken and re.search(rf"\b{re.escape(name)}\b", source) is None:
            return name
    raise ValueError(f"no fresh test name like {original}")


# -- the plan ----------------------------------------------------------------------------------------------


def plan(
    command: str,
    fail_to_pass: Sequence[str],
    pass_to_pass: Sequence[str],
    parser: str,
    sources: Mapping[str, str],
    rng: random.Random | None = None,
) -> Canaries | str:
    """Derive the canaries from the PASS_TO_PASS tests found in `sources` (candidate test files of the
    command, by path); returns them with the files' new texts and the command's extra selectors, or why
    none could be made (the grade then runs without them, and says so)."""
    rng = rng or secrets.SystemRandom()
    listed_ids = set(fail_to_pass) | set(pass_to_pass)
    found: dict[str, list[_Listed]] = {}
    for path, source in sources.items():
        try:
            tree = ast.parse(source)
        except (SyntaxError, ValueError):
            continue
        functions = _functions(tree)
        lines = _Lines(source)
        xfail = _xfail_scopes(tree, lines)
        for test_id in pass_to_pass:
            where = _locate(test_id, parser)
            if where is None:
                continue
            file, scope, name = where
            if file is not None and not (path == file or path.endswith("/" + file)):
                continue
            if (scope, name) not in functions or scope in xfail:
                continue
            node, siblings = functions[(scope, name)]
            listed = _Listed(path, scope, node, siblings, test_id, lines)
            if _plain(listed):
                found.setdefault(path, []).append(listed)
    if parser == _SYMPY_PARSER:  # bare names: one defined in two files is not known to pass in both
        counts: dict[str, int] = {}
        for tests in found.values():
            for t in tests:
                counts[t.node.name] = counts.get(t.node.name, 0) + 1
        found = {p: [t for t in tests if counts[t.node.name] == 1] for p, tests in found.items()}
        found = {p: tests for p, tests in found.items() if tests}
    if not found:
        return "no PASS_TO_PASS test of the command's test files can be copied for the canaries"
    chosen: list[tuple[_Listed, bool]] = []
    files = list(found)
    rng.shuffle(files)
    pools = {path: _shortest_half(found[path], rng) for path in files}
    wanted = [True, False] * min(MUST_FAIL, MUST_PASS) + [True] * (MUST_FAIL - MUST_PASS)
    for want_fail in wanted + [False] * (MUST_PASS - MUST_FAIL):
        for _ in range(len(files)):
            path = files.pop(0)
            files.append(path)
            pool = pools[path]
            pick = next((t for t in pool if not want_fail or _negatable(t)), None)
            if pick is not None:
                pool.remove(pick)
                chosen.append((pick, want_fail))
                break
    if not any(must_fail for _, must_fail in chosen):
        return "no PASS_TO_PASS test of the command's test files ends in an assertion a canary can negate"
    return _build(command, parser, chosen, sources, listed_ids, rng)


def _shortest_half(tests: list[_Listed], rng: random.Random) -> list[_Listed]:
    """The tests in random order, the shorter half first: a canary reruns its test, so keep it cheap."""
    ranked = sorted(tests, key=lambda t: (t.node.end_lineno or 0) - t.node.lineno)
    short, rest = ranked[: max(1, len(ranked) // 2)], ranked[max(1, len(ranked) // 2) :]
    rng.shuffle(short)
    rng.shuffle(rest)
    return short + rest


def _negatable(listed: _Listed) -> bool:
    """Whether a copy of the test can be made to fail: it runs to its last statement, an assertion."""
    if _can_stop_early(listed.node) or not listed.node.body:
        return False
    return _negation(listed.node, listed.lines, random.Random(0)) is not None


def _build(
    command: str,
    parser: str,
    chosen: list[tuple[_Listed, bool]],
    sources: Mapping[str, str],
    listed_ids: set[str],
    rng: random.Random,
) -> Canaries | str:
    copies: dict[str, list[_Copy]] = {}
    canaries: list[Canary] = []
    taken = set(listed_ids) | {name for t in listed_ids if (name := _bare_name(t))}
    for listed, must_fail in chosen:
        source = sources[listed.file]
        lines = listed.lines
        node = listed.node
        vocabulary = sorted(
            {w for f in _all_test_names(source) for w in _words(f)[1:] if len(w) > 1 and not w.isdigit()}
        )
        name = _fresh_name(node.name, vocabulary, taken, source, rng)
        first, last = _start(node), node.end_lineno or node.lineno
        edits: list[_Edit] = []
        intended = copy.deepcopy(node)
        if must_fail:
            negation = _negation(node, lines, rng)
            if negation is None:
                continue
            edits, intended = negation
        text = lines.text(first, last)
        definition = lines.offset(node.lineno, node.col_offset, first)
        header = re.compile(rb"def\s+" + re.escape(node.name.encode()) + rb"\b")
        match = header.search(text, definition)
        if match is None:
            continue
        edits.append((match.start(), match.end(), b"def " + name.encode()))
        for begin, end, new in sorted(edits, reverse=True):
            text = text[:begin] + new + text[end:]
        intended.name = name
        blank = b"\n" if listed.scope else b"\n\n"
        if not text.endswith(b"\n"):
            text += b"\n"
        # Right before its original, or after a later function of its scope, never after the last one:
        # whatever the original's decorators and defaults use is defined by then.
        later = listed.siblings[:-1]
        where = rng.randrange(len(later) + 1)
        if where == len(later):
            at, block = _start(node) - 1, text + blank
        else:
            at, block = later[where].end_lineno or later[where].lineno, blank + text
        copied = _Copy(at, block.decode(), listed.scope, name, _dump(intended))
        if _check(source, [copied]) is None:
            continue
        copies.setdefault(listed.file, []).append(copied)
        taken.add(name)
        canaries.append(_canary(listed, name, must_fail, parser))
    written: list[tuple[str, str]] = []
    for path, file_copies in copies.items():
        new_source = _check(sources[path], file_copies)
        if new_source is None:
            kept = {c.name for c in file_copies}
            canaries = [c for c in canaries if not (c.file == path and c.name in kept)]
            continue
        written.append((path, new_source))
    if not any(c.must_fail for c in canaries):
        return "no PASS_TO_PASS test of the command's test files could be copied into a failing canary"
    tests = tuple(canaries)
    return Canaries(
        tests=tests,
        sources=tuple(written),
        extra_args=_selectors(command, parser, tests),
        sympy=parser == _SYMPY_PARSER,
    )


def _bare_name(test_id: str) -> str | None:
    if match := _DJANGO_ID.match(test_id):
        return match[1]
    return test_id.split("::")[-1].split("[")[0] or None


def _all_test_names(source: str) -> list[str]:
    return re.findall(r"^\s*def\s+(test\w*)", source, re.MULTILINE)


def _dump(node: ast.FunctionDef) -> str:
    return ast.dump(node)


def _check(source: str, file_copies: list[_Copy]) -> str | None:
    """The source with the copies in, if it parses and each copy is exactly the function intended."""
    lines = source.splitlines(keepends=True)
    if lines and not lines[-1].endswith("\n"):
        lines[-1] += "\n"
    for c in sorted(file_copies, key=lambda c: c.after, reverse=True):
        lines.insert(c.after, c.text)
    new_source = "".join(lines)
    try:
        tree = ast.parse(new_source)
    except (SyntaxError, ValueError):
        return None
    functions = _functions(tree)
    for c in file_copies:
        found = functions.get((c.scope, c.name))
        if found is None or _dump(found[0]) != c.expected:
            return None
    return new_source


def _canary(listed: _Listed, name: str, must_fail: bool, parser: str) -> Canary:
    """The canary's id as the log parser will spell it, and its selector, both from its original's id."""
    original = listed.test_id
    if parser == _DJANGO_PARSER:
        match = _DJANGO_ID.match(original)
        assert match is not None
        module, cls = _django_parts(match[1], match[2])
        dotted = match[2][: -len(match[1])] + name if match[2].endswith("." + match[1]) else match[2]
        test_id, selector = f"{name} ({dotted})", ".".join([*module, cls, name])
    elif parser == _SYMPY_PARSER:
        test_id, selector = name, f"{listed.file}::{name}"
    else:
        test_id = original.rsplit("::", 1)[0] + "::" + name
        selector = "::".join([listed.file, *([listed.scope] if listed.scope else []), name])
    return Canary(listed.file, name, test_id, must_fail, original, selector)


# -- selection: run the canaries the way the command runs its tests ------------------------------------------


def _selectors(command: str, parser: str, tests: tuple[Canary, ...]) -> tuple[str, ...]:
    """What to add to the command so the canaries run: nothing when it runs their files (or modules)
    whole; their selectors when it names single tests."""
    args = [a for a in _args(command) if not _ENV_ASSIGNMENT.match(a)]
    if parser == _SYMPY_PARSER:
        # sympy's runner (2023 on) reads `path::name` as the path plus a name filter (`-k`), and a name
        # filter applies to every file: add the canaries' names only when the command filters by name.
        filters = any("::" in a for a in args) or any(
            a in ("-k", "--kw") or a.startswith("--kw=") for a in args
        )
        return tuple(c.selector for c in tests) if filters else ()
    if parser == _DJANGO_PARSER:
        labels = _labels(args)
        if not labels:  # the whole suite runs
            return ()
        return tuple(
            c.selector
            for c in tests
            if not any(_covers(label.split("."), c.selector.split(".")[:-1]) for label in labels)
        )
    node_ids = [a for a in args if "::" in a]
    if not node_ids:
        return ()
    paths = [a.removeprefix("./").rstrip("/") for a in args if "::" not in a and not a.startswith("-")]
    extra = []
    for c in tests:
        parts = c.selector.split("::")
        whole = any(c.file == p or c.file.startswith(p + "/") for p in paths)
        scoped = any(_covers(a.removeprefix("./").split("::"), parts[:-1]) for a in node_ids)
        if not whole and not scoped:
            extra.append(c.selector)
    return tuple(extra)


_VALUED_OPTIONS = ("--verbosity", "--settings", "--parallel", "-v", "--tag", "--exclude-tag", "-k")


def _labels(args: list[str]) -> list[str]:
    """The test labels of a unittest-style runner's arguments (`module`, `module.Class.test`), after the
    script, leaving out options and their values."""
    script = next((i for i, a in enumerate(args) if a.endswith(".py")), None)
    if script is None:
        return []
    labels = []
    for i, arg in enumerate(args[script + 1 :], start=script + 1):
        if arg.startswith("-") or args[i - 1] in _VALUED_OPTIONS:
            continue
        if re.fullmatch(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*", arg):
            labels.append(arg)
    return labels


def _covers(selected: list[str], parts: list[str]) -> bool:
    return 0 < len(selected) <= len(parts) and parts[: len(selected)] == selected


def command_with(command: str, canaries: Canaries) -> str:
    """The test command, running the canaries too when it selects single tests."""
    if not canaries.extra_args:
        return command
    return command + " " + " ".join(shlex.quote(arg) for arg in canaries.extra_args)
