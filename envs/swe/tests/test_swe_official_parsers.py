"""envhub's log parsers against the official harness's (the `swebench` package), on real logs.

The fixtures under data/real_logs are the status lines of real Lite runs (benchmarks/swe_fidelity.py,
`--keep-logs`): pytest 4 to 7, sympy's bin/test, seaborn's, pylint's and requests' suites, django's
runtests.py (3.1 on Python 3.6, 4.0, 5.0). For every test the official parser reports, envhub's must
agree on passed or not, and it must see the run end.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from envhub_swe.data import load_lite, select
from envhub_swe.parsers import PARSERS, PASSING, finished, parser_name
from test_swe_data import LITE, needs_lite

pytest.importorskip("swebench", reason="the official harness: pip install -e 'envs/swe[harness]'")

LOGS = Path(__file__).parent / "data" / "real_logs"
FIXTURES = sorted(LOGS.glob("*.log"))
REPOS = {
    "pallets": "pallets/flask",
    "sympy": "sympy/sympy",
    "pytest-dev": "pytest-dev/pytest",
    "mwaskom": "mwaskom/seaborn",
    "pylint-dev": "pylint-dev/pylint",
    "psf": "psf/requests",
    "django": "django/django",
}


def _official(repo: str, log: str) -> dict[str, str]:
    from swebench.harness.log_parsers import MAP_REPO_TO_PARSER  # type: ignore[import-untyped]

    parsed: dict[str, str] = MAP_REPO_TO_PARSER[repo](log, None)
    return parsed


def _repo(fixture: Path) -> str:
    return REPOS[fixture.name.split("__")[0]]


@pytest.mark.parametrize("fixture", FIXTURES, ids=[f.stem for f in FIXTURES])
def test_envhub_and_the_official_parser_agree_on_every_test(fixture: Path) -> None:
    log = fixture.read_text()
    repo = _repo(fixture)
    name = parser_name(repo)
    official = _official(repo, log)
    ours: dict[str, Any] = dict(PARSERS[name](log))
    assert official, "the official parser found no tests: the fixture is not a test log"
    differ = {
        test: (status, ours.get(test))
        for test, status in official.items()
        if (status in ("PASSED", "XFAIL")) != (ours.get(test) in PASSING)
    }
    assert differ == {}
    assert finished(name, log), "envhub does not see this complete run's closing line"


@needs_lite
@pytest.mark.parametrize("fixture", FIXTURES, ids=[f.stem for f in FIXTURES])
def test_the_listed_tests_get_the_same_verdict(fixture: Path) -> None:
    (row,) = select(load_lite("test", LITE), instance=fixture.stem)
    log = fixture.read_text()
    official = _official(row.repo, log)
    ours: dict[str, Any] = dict(PARSERS[parser_name(row.repo, row.log_parser)](log))
    for test in (*row.FAIL_TO_PASS, *row.PASS_TO_PASS):
        assert (official.get(test) in ("PASSED", "XFAIL")) == (ours.get(test) in PASSING), test
