"""`envhub bench sandbox`'s table (`envhub.sandbox.bench.to_table`) stays readable on an 80-column
terminal (issue 16.8): one line per metric, and what each measures in full under the table."""

from __future__ import annotations

from rich.console import Console

from envhub.sandbox.bench import Row, to_table, verdicts


def test_the_sandbox_benchmark_table_is_readable_at_80_columns() -> None:
    rows = [
        Row("cold", "cold start", "cold start + `python -c pass` + close, p50", "ms", {}),
        Row("worker", "worker call", "persistent worker `run('pass')` round trip, p50", "ms", {}),
        Row("rate", "create+close", "sandboxes created + closed per second, 2 workers", "/s", {}),
    ]
    for row, value in zip(rows, (1234.56, 0.42, 98.7), strict=True):
        row.values = {"subprocess": value, "local": value * 3, "docker": value * 40}
    console = Console(width=80, record=True)
    console.print(to_table(rows))
    lines = console.export_text().splitlines()
    for row in rows:
        (line,) = [line for line in lines if line.startswith(f"│ {row.name}")]  # one line per metric
        assert all(f"{v:.2f}" in line for v in row.values.values()) and "3.00x" in line
        assert f"{row.name}: {row.metric}" in lines  # what it measures, in full, under the table


def test_verdicts_hold_each_row_with_a_goal_to_it() -> None:
    exec_row = Row("true", "exec", "`true` in an open sandbox", "ms", {"subprocess": 1.0, "local": 1.4})
    cold_row = Row("cold", "cold start", "open + run + close", "ms", {"subprocess": 10.0, "local": 26.0})
    rate_row = Row("rate", "create+close", "per second", "/s", {"subprocess": 900.0, "local": 300.0})
    assert verdicts([exec_row, cold_row, rate_row]) == [
        "exec: 1.40x (goal <= 1.5x): met",
        "cold start: 2.60x (goal <= 2x): MISSED",
    ]  # a row without a goal (the rate) gets no verdict
    console = Console(width=80, record=True)
    console.print(to_table([exec_row, cold_row], load=(0.5, 0.75)))
    text = console.export_text()
    assert "cold start: 2.60x (goal <= 2x): MISSED" in text and "0.50 before, 0.75 after" in text
