"""OSWorld's evaluator functions (a subset), judged on the bytes of the files the apps leave.

OSWorld's metrics take paths of files copied out of its VM; here they take the bytes the env read from
the sandbox (`Saved.files`), so nothing is copied to the host's disk. A metric is chosen and its options
checked when the task file loads (`metric()`), and what it returns is total: any bytes, a missing file,
a document that is not one, all score False, never raise.

Semantics follow OSWorld's `desktop_env/evaluators/metrics` (general.py, docs.py, table.py), within this
subset:

| func | result | expected | options |
|---|---|---|---|
| `exact_match` | the file's text | rule `{"expected": str}` | |
| `check_include_exclude` | the file's text | rule `{"include": [...], "exclude": [...]}` | |
| `check_list` | the file's lines | rule `{"expect": [regex], "unexpect": [regex]}` | |
| `compare_text_file` | the file's text | a file | `ignore_blanks`, `ignore_case` |
| `compare_csv` | the file's lines | a file | `strict`, `ignore_case` |
| `check_csv` | CSV rows by header | rule `{"expect": [row], "unexpect": [row]}` | |
| `compare_table` | a sheet: .ods .fods .xlsx .csv | a sheet file, or none | `rules`: see TABLE_RULES |

Where OSWorld hands a string metric (exact_match, check_include_exclude) a command's output, here the
result getter is always `vm_file`, so these metrics read the file's text. Spreadsheets are read by
hand-written code for OpenDocument (the flat `.fods` and zipped `.ods` that Calc saves, via
`envhub_desktop.odf.content_xml`; no ODF reader on PyPI reads flat ODS) and by openpyxl for `.xlsx`; a
`.csv` cell that reads as a number is one, as Calc reads it.
"""

from __future__ import annotations

import csv
import io
import operator
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any
from xml.etree import ElementTree as ET

from envhub_desktop.odf import OFFICE, TABLE, TEXT, cell_index, content_xml

Cell = str | int | float | None
Grid = list[list[Cell]]
MAX_ROWS = 10_000
"""The most rows (and, below, columns) a sheet is read to: a task's sheet is far smaller, and a
row repeated a million times (as ODF writes the empty rest of a sheet) must not be expanded."""
MAX_COLUMNS = 1_024
MAX_FILE_BYTES = 32 * 1024 * 1024


class UnsupportedEvaluator(ValueError):
    """The task's evaluator asks for something this subset does not do; the message names it."""


@dataclass(frozen=True)
class Expected:
    """What a metric compares against: a rule (a JSON value) or a file's bytes and name."""

    rules: Any = None
    data: bytes | None = None
    name: str = ""


Judge = Callable[[bytes | None, str], bool]
"""A metric bound to its expected value and options: (the result file's bytes or None, its name)."""


# --- text metrics -----------------------------------------------------------------------------------


def _text(data: bytes | None) -> str | None:
    if data is None or len(data) > MAX_FILE_BYTES:
        return None
    try:
        return data.decode()
    except UnicodeDecodeError:
        return None


def _exact_match(text: str, expected: Expected, options: Mapping[str, Any]) -> bool:
    return bool(text == expected.rules["expected"])


def _include_exclude(text: str, expected: Expected, options: Mapping[str, Any]) -> bool:
    rules = expected.rules
    include, exclude = rules.get("include", []), rules.get("exclude", [])
    return all(r in text for r in include) and not any(r in text for r in exclude)


def _check_list(text: str, expected: Expected, options: Mapping[str, Any]) -> bool:
    expect = [re.compile(p) for p in expected.rules.get("expect", [])]
    unexpect = [re.compile(p) for p in expected.rules.get("unexpect", [])]
    lines = text.splitlines()
    found = all(any(p.search(line) for line in lines) for p in expect)
    return found and not any(p.search(line) for p in unexpect for line in lines)


def _normal_text(text: str, options: Mapping[str, Any]) -> str:
    if options.get("ignore_blanks", False):
        text = re.sub(r"\s+", " ", re.sub(r"[\t\n]", " ", text).strip())
    return text.lower() if options.get("ignore_case", False) else text


def _compare_text_file(text: str, expected: Expected, options: Mapping[str, Any]) -> bool:
    other = _text(expected.data)
    return other is not None and _normal_text(text, options) == _normal_text(other, options)


def _csv_lines(text: str, options: Mapping[str, Any]) -> list[str]:
    lines = text.splitlines()
    if not options.get("strict", True):
        lines = [line.strip() for line in lines]
    return [line.lower() for line in lines] if options.get("ignore_case", False) else lines


def _compare_csv(text: str, expected: Expected, options: Mapping[str, Any]) -> bool:
    other = _text(expected.data)
    return other is not None and _csv_lines(text, options) == _csv_lines(other, options)


def _check_csv(text: str, expected: Expected, options: Mapping[str, Any]) -> bool:
    def matches(pattern: Mapping[str, Any], row: Mapping[str, Any]) -> bool:
        return all(key in row and row[key] == value for key, value in pattern.items())

    rows = list(csv.DictReader(io.StringIO(text)))
    expect, unexpect = expected.rules.get("expect", []), expected.rules.get("unexpect", [])
    return all(any(matches(p, r) for r in rows) for p in expect) and not any(
        matches(p, r) for p in unexpect for r in rows
    )


# --- spreadsheets -----------------------------------------------------------------------------------


def _trim(grid: Grid) -> Grid:
    """Trailing empty cells and rows dropped: where a sheet ends is not part of its data."""
    rows = [list(row) for row in grid]
    for row in rows:
        while row and row[-1] in (None, ""):
            row.pop()
    while rows and not rows[-1]:
        rows.pop()
    return rows


def _number(value: Cell) -> Cell:
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def _ods_cell(cell: ET.Element) -> Cell:
    kind = cell.get(f"{{{OFFICE}}}value-type")
    if kind in ("float", "percentage", "currency"):
        return _number(float(cell.get(f"{{{OFFICE}}}value", "nan")))
    if kind == "boolean":
        return cell.get(f"{{{OFFICE}}}boolean-value") == "true"
    paragraphs = ["".join(p.itertext()) for p in cell.iter(f"{{{TEXT}}}p")]
    return "\n".join(paragraphs) if paragraphs else None


def _ods_sheets(data: bytes) -> list[tuple[str, Grid]]:
    root = ET.fromstring(content_xml(data))
    sheets = []
    for table in root.iter(f"{{{TABLE}}}table"):
        grid: Grid = []
        for row in table.iter(f"{{{TABLE}}}table-row"):
            values: list[Cell] = []
            for cell in row:
                if cell.tag in (f"{{{TABLE}}}table-cell", f"{{{TABLE}}}covered-table-cell"):
                    repeat = int(cell.get(f"{{{TABLE}}}number-columns-repeated", "1"))
                    values += [_ods_cell(cell)] * min(repeat, MAX_COLUMNS - len(values))
            repeat = int(row.get(f"{{{TABLE}}}number-rows-repeated", "1"))
            grid += [list(values) for _ in range(min(repeat, MAX_ROWS - len(grid)))]
        sheets.append((table.get(f"{{{TABLE}}}name", ""), _trim(grid)))
    return sheets


def _xlsx_sheets(data: bytes) -> list[tuple[str, Grid]]:
    import openpyxl  # type: ignore[import-untyped,unused-ignore]  # only .xlsx tasks import it

    book = openpyxl.load_workbook(io.BytesIO(data), read_only=True, data_only=True)
    try:
        sheets = []
        for sheet in book.worksheets:
            grid: Grid = []
            for row in sheet.iter_rows(max_row=MAX_ROWS, max_col=MAX_COLUMNS, values_only=True):
                grid.append([_number(v) if isinstance(v, int | float | str) else _other(v) for v in row])
            sheets.append((sheet.title, _trim(grid)))
        return sheets
    finally:
        book.close()


def _other(value: object) -> Cell:
    return None if value is None else str(value)


def _csv_cell(text: str) -> Cell:
    try:
        return _number(float(text)) if text.strip() else None
    except ValueError:
        return text


def sheets(data: bytes, name: str) -> list[tuple[str, Grid]]:
    """A workbook's sheets, named, each a grid of values (trailing empties trimmed); by the file's
    name: .csv one sheet, .xlsx/.xlsm openpyxl, else OpenDocument (flat or zipped)."""
    if len(data) > MAX_FILE_BYTES:
        raise ValueError(f"{name} is {len(data)} bytes, more than a task's sheet holds")
    lower = name.lower()
    if lower.endswith(".csv"):
        rows = list(csv.reader(io.StringIO(data.decode())))[:MAX_ROWS]
        return [("Sheet1", _trim([[_csv_cell(c) for c in row[:MAX_COLUMNS]] for row in rows]))]
    if lower.endswith((".xlsx", ".xlsm")):
        return _xlsx_sheets(data)
    return _ods_sheets(data)


SHEET_INDEX = re.compile(r"^([RE])(I\d+|N.+)$")


def _sheet(
    index: Any, result: list[tuple[str, Grid]], expected: list[tuple[str, Grid]] | None
) -> Grid | None:
    """OSWorld's sheet index: an int (the result's nth), or "RI0"/"EI0" (result's/expected's by
    position), "RNSheet1"/"ENSheet1" (by name); None when there is no such sheet."""
    book: list[tuple[str, Grid]] | None = result
    if isinstance(index, int):
        key = f"I{index}"
    else:
        found = SHEET_INDEX.match(str(index))
        assert found is not None, "checked when the task loaded"
        book, key = (result if found[1] == "R" else expected), found[2]
    if book is None:
        return None
    if key.startswith("I"):
        position = int(key[1:])
        return book[position][1] if position < len(book) else None
    return next((grid for name, grid in book if name == key[1:]), None)


def _rounded(grid: Grid, digits: int) -> Grid:
    return [[round(v, digits) if isinstance(v, float) else v for v in row] for row in grid]


CELL_METHODS: dict[str, Callable[[Any, Any], bool]] = {
    "eq": operator.eq,
    "ne": operator.ne,
    "lt": operator.lt,
    "le": operator.le,
    "gt": operator.gt,
    "ge": operator.ge,
    "re": lambda value, ref: re.search(ref, str(value)) is not None,
}
"""check_cell's methods (OSWorld's `_match_value_to_rule`); `approx:T` is |value - ref| <= T too."""


def _cell_matches(value: Cell, rule: Mapping[str, Any]) -> bool:
    method = rule["method"]
    if method.startswith("approx:"):
        if not isinstance(value, int | float) or isinstance(value, bool):
            return False
        return bool(abs(value - rule["ref"]) <= float(method.removeprefix("approx:")))
    try:
        return bool(CELL_METHODS[method](value, rule["ref"]))
    except TypeError:  # a text cell compared with a number: not the asked-for value
        return False


def _table_rule(rule: Mapping[str, Any], result: list[tuple[str, Grid]], expected: Any) -> bool:
    kind = rule["type"]
    if kind == "sheet_name":
        return expected is not None and [n for n, _ in result] == [n for n, _ in expected]
    if kind == "sheet_data":
        one = _sheet(rule["sheet_idx0"], result, expected)
        two = _sheet(rule["sheet_idx1"], result, expected)
        digits = int(rule.get("precision", 4))
        return one is not None and two is not None and _rounded(one, digits) == _rounded(two, digits)
    grid = _sheet(rule["sheet_idx"], result, expected)  # check_cell
    if grid is None:
        return False
    row, column = cell_index(rule["coordinate"])
    value = grid[row][column] if row < len(grid) and column < len(grid[row]) else None
    return all(_cell_matches(value, r) for r in rule["props"].values())


def _compare_table(data: bytes, name: str, expected: Expected, options: Mapping[str, Any]) -> bool:
    result = sheets(data, name)
    other = sheets(expected.data, expected.name) if expected.data is not None else None
    rules = options.get("rules") or [{"type": "sheet_data", "sheet_idx0": "RI0", "sheet_idx1": "EI0"}]
    return all(_table_rule(rule, result, other) for rule in rules)


# --- the table of metrics, and load-time checks -----------------------------------------------------


@dataclass(frozen=True)
class Metric:
    expects: str
    """What `expected` must be: "rule", "file", or "file or none"."""
    options: frozenset[str]
    judge: Callable[[bytes, str, Expected, Mapping[str, Any]], bool]


def _on_text(
    judge: Callable[[str, Expected, Mapping[str, Any]], bool],
) -> Callable[[bytes, str, Expected, Mapping[str, Any]], bool]:
    def on_bytes(data: bytes, name: str, expected: Expected, options: Mapping[str, Any]) -> bool:
        text = _text(data)
        return text is not None and judge(text, expected, options)

    return on_bytes


METRICS: dict[str, Metric] = {
    "exact_match": Metric("rule", frozenset(), _on_text(_exact_match)),
    "check_include_exclude": Metric("rule", frozenset(), _on_text(_include_exclude)),
    "check_list": Metric("rule", frozenset(), _on_text(_check_list)),
    "compare_text_file": Metric(
        "file", frozenset({"ignore_blanks", "ignore_case"}), _on_text(_compare_text_file)
    ),
    "compare_csv": Metric("file", frozenset({"strict", "ignore_case"}), _on_text(_compare_csv)),
    "check_csv": Metric("rule", frozenset(), _on_text(_check_csv)),
    "compare_table": Metric("file or none", frozenset({"rules"}), _compare_table),
}


def _check_rules(func: str, rules: Any) -> None:
    """The rule's keys and value types for each rule-taking metric, checked before any episode."""
    shapes: dict[str, dict[str, type | tuple[type, ...]]] = {
        "exact_match": {"expected": (str,)},
        "check_include_exclude": {"include": list, "exclude": list},
        "check_list": {"expect": list, "unexpect": list},
        "check_csv": {"expect": list, "unexpect": list},
    }
    shape = shapes[func]
    if not isinstance(rules, dict):
        raise UnsupportedEvaluator(
            f"evaluator.expected.rules of {func} must be an object with {sorted(shape)}"
        )
    for key, value in rules.items():
        if key not in shape or not isinstance(value, shape[key]):
            raise UnsupportedEvaluator(
                f"evaluator.expected.rules of {func}: {key!r} is not one of its rules "
                f"({', '.join(f'{k}: {t}' for k, t in shape.items())})"
            )
    if func == "exact_match" and "expected" not in rules:
        raise UnsupportedEvaluator("evaluator.expected.rules of exact_match needs 'expected' (a string)")
    if func == "check_list":
        for pattern in [*rules.get("expect", []), *rules.get("unexpect", [])]:
            try:
                re.compile(pattern)
            except (re.error, TypeError) as exc:
                raise UnsupportedEvaluator(
                    f"check_list: {pattern!r} is not a regular expression: {exc}"
                ) from None
    if func == "check_csv" and not all(
        isinstance(r, dict) for r in [*rules.get("expect", []), *rules.get("unexpect", [])]
    ):
        raise UnsupportedEvaluator("check_csv: each expect/unexpect entry is an object {column: value}")


TABLE_RULES = {
    "sheet_name": (),
    "sheet_data": ("sheet_idx0", "sheet_idx1"),
    "check_cell": ("sheet_idx", "coordinate", "props"),
}
"""compare_table's rules in this subset, with the keys each needs (sheet_data may add `precision`)."""


def _check_sheet_index(index: Any, has_expected: bool) -> None:
    found = SHEET_INDEX.match(str(index)) if not isinstance(index, int) else None
    if not isinstance(index, int) and found is None:
        raise UnsupportedEvaluator(
            f"compare_table: sheet index {index!r} is not a number nor RI0/EI0 (by position) or "
            "RNname/ENname (by name)"
        )
    if found is not None and found[1] == "E" and not has_expected:
        raise UnsupportedEvaluator(
            f"compare_table: sheet index {index!r} names the expected file, but there is none"
        )


def _check_table_rules(rules: Any, has_expected: bool) -> None:
    if not isinstance(rules, list) or not all(isinstance(r, dict) for r in rules):
        raise UnsupportedEvaluator("compare_table: options.rules is a list of objects, each with a type")
    for rule in rules:
        kind = rule.get("type")
        if kind not in TABLE_RULES:
            raise UnsupportedEvaluator(
                f"compare_table: rule type {kind!r} is not supported; the supported are "
                f"{', '.join(TABLE_RULES)}"
            )
        missing = [key for key in TABLE_RULES[kind] if key not in rule]
        if missing:
            raise UnsupportedEvaluator(f"compare_table: a {kind} rule needs {', '.join(missing)}")
        if kind in ("sheet_name", "sheet_data") and not has_expected:
            raise UnsupportedEvaluator(
                f"compare_table: a {kind} rule compares with an expected file; give one"
            )
        for key in ("sheet_idx", "sheet_idx0", "sheet_idx1"):
            if key in rule:
                _check_sheet_index(rule[key], has_expected)
        if kind == "check_cell":
            _check_cell_rule(rule)


def _check_cell_rule(rule: Mapping[str, Any]) -> None:
    try:
        cell_index(str(rule["coordinate"]))
    except ValueError as exc:
        raise UnsupportedEvaluator(f"compare_table check_cell: {exc}") from None
    props = rule["props"]
    if not isinstance(props, dict) or set(props) != {"value"}:
        raise UnsupportedEvaluator(
            'compare_table check_cell: only the cell\'s value is read here (props: {"value": {...}}), '
            f"not {sorted(props) if isinstance(props, dict) else props!r} (styles are not read)"
        )
    method = props["value"].get("method") if isinstance(props["value"], dict) else None
    approx = isinstance(method, str) and re.fullmatch(r"approx:\d+(\.\d+)?", method) is not None
    if not (method in CELL_METHODS or approx) or "ref" not in props["value"]:
        raise UnsupportedEvaluator(
            f"compare_table check_cell: method {method!r} with a ref; the supported are "
            f"{', '.join(CELL_METHODS)} and approx:T"
        )


def metric(func: Any, expected: Expected | None, options: Any) -> Judge:
    """The named metric bound to its expected value and options, checked now so that a task file
    asking for more than this subset fails when it loads, naming what it asked for."""
    if func not in METRICS:
        raise UnsupportedEvaluator(
            f"evaluator.func {func!r} is not supported here; the supported are {', '.join(METRICS)}"
        )
    spec = METRICS[func]
    options = options if options is not None else {}
    if not isinstance(options, dict) or set(options) - spec.options:
        raise UnsupportedEvaluator(
            f"evaluator.options of {func}: {sorted(options) if isinstance(options, dict) else options!r}; "
            f"it takes {', '.join(sorted(spec.options)) or 'none'}"
        )
    if spec.expects == "rule" and (expected is None or expected.data is not None):
        raise UnsupportedEvaluator(
            f'{func} compares with a rule: evaluator.expected is {{"type": "rule", ...}}'
        )
    if spec.expects == "file" and (expected is None or expected.data is None):
        raise UnsupportedEvaluator(
            f"{func} compares with a file: evaluator.expected is a cloud_file (a local path)"
        )
    if spec.expects == "file or none" and expected is not None and expected.data is None:
        raise UnsupportedEvaluator(f"{func} compares with a file (cloud_file, a local path) or with none")
    if spec.expects == "rule":
        assert expected is not None
        _check_rules(func, expected.rules)
    if func == "compare_table":
        _check_table_rules(options.get("rules", []), expected is not None)
    bound = expected if expected is not None else Expected()

    def judge(data: bytes | None, name: str) -> bool:
        if data is None:
            return False
        try:
            return spec.judge(data, name, bound, options)
        except Exception:  # not a document of the kind, garbage, too big: the task is not done
            return False

    return judge
