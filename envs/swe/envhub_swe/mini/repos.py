# ruff: noqa: E501
"""The swe-mini repositories and their issues, as source text: `build.py` turns them into git bundles.

Each repository is tiny but real (a package, its tests, a test runner); each instance is a bug in its
base commit, an issue-style report, the upstream fix (`gold`) and the tests that came with the fix.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Edit:
    """Replace `old` with `new` in `path` (`old` empty: append `new` to the file)."""

    path: str
    old: str
    new: str


@dataclass(frozen=True)
class Issue:
    number: int
    problem: str
    gold: tuple[Edit, ...]
    tests: tuple[Edit, ...]
    fail_to_pass: tuple[str, ...]
    hints: str = ""


@dataclass(frozen=True)
class Repo:
    name: str
    style: str
    """`pytest` or `unittest` (a django-style `runtests.py`)."""
    files: dict[str, str]
    later: dict[str, str]
    """Files of a later commit on top of the base: the workspace must not show it to the agent."""
    issues: tuple[Issue, ...]
    version: str = "0.1"
    test_files: dict[str, tuple[str, ...]] = field(default_factory=dict)
    """Each test file's tests at the base commit, by id, for PASS_TO_PASS."""


PYTEST_INI = "[pytest]\npythonpath = .\n"

RUNTESTS = '''"""Run the test suite: python runtests.py [--verbosity N] [module ...]"""
import sys
import unittest


class Result(unittest.TextTestResult):
    def getDescription(self, test):
        return "%s (%s.%s)" % (test._testMethodName, type(test).__module__, type(test).__qualname__)


def main(argv):
    verbosity = 1
    labels = []
    args = iter(argv)
    for arg in args:
        if arg == "--verbosity":
            verbosity = int(next(args))
        else:
            labels.append(arg)
    suite = unittest.defaultTestLoader.loadTestsFromNames(labels or ["tests"])
    runner = unittest.TextTestRunner(verbosity=verbosity, resultclass=Result, stream=sys.stderr)
    result = runner.run(suite)
    return 0 if result.wasSuccessful() else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
'''

TEXTKIT = Repo(
    name="mini/textkit",
    style="pytest",
    files={
        "pytest.ini": PYTEST_INI,
        "README.md": "# textkit\n\nSmall text helpers: slugs, truncation, word counts.\n",
        "textkit/__init__.py": "from textkit.text import count_words, slugify, truncate\n\n"
        '__all__ = ["count_words", "slugify", "truncate"]\n',
        "textkit/text.py": '''"""Text helpers."""
import re


def slugify(text):
    """Lowercase words joined by single dashes."""
    text = text.strip().lower()
    return re.sub(r"[^a-z0-9]", "-", text).strip("-")


def truncate(text, width, ellipsis="..."):
    """At most `width` characters, ending with `ellipsis` when cut."""
    if len(text) <= width:
        return text
    return text[: width] + ellipsis


def count_words(text):
    """How many words the text has."""
    return len(text.split(" "))
''',
        "tests/test_text.py": """import pytest

from textkit import count_words, slugify, truncate


def test_slugify_simple():
    assert slugify("Hello World") == "hello-world"


@pytest.mark.parametrize("text", ["abc", "a-b"])
def test_slugify_keeps_clean(text):
    assert slugify(text) == text


def test_truncate_short():
    assert truncate("abc", 5) == "abc"


def test_count_words_simple():
    assert count_words("one two three") == 3
""",
    },
    later={"CHANGELOG.md": "# 0.2\n\n- slugify collapses runs of separators (#1)\n"},
    test_files={
        "tests/test_text.py": (
            "tests/test_text.py::test_slugify_simple",
            "tests/test_text.py::test_slugify_keeps_clean[abc]",
            "tests/test_text.py::test_slugify_keeps_clean[a-b]",
            "tests/test_text.py::test_truncate_short",
            "tests/test_text.py::test_count_words_simple",
        )
    },
    issues=(
        Issue(
            1,
            "slugify leaves repeated dashes\n\n`slugify('Hello,  World!')` returns `'hello---world'`; "
            "it should collapse runs of separators into one dash: `'hello-world'`.",
            gold=(Edit("textkit/text.py", 'r"[^a-z0-9]", "-"', 'r"[^a-z0-9]+", "-"'),),
            tests=(
                Edit(
                    "tests/test_text.py",
                    "",
                    '\n\ndef test_slugify_collapses_separators():\n    assert slugify("Hello,  World!") == "hello-world"\n',
                ),
            ),
            fail_to_pass=("tests/test_text.py::test_slugify_collapses_separators",),
        ),
        Issue(
            2,
            "truncate returns more than `width` characters\n\n`truncate('abcdefgh', 5)` returns "
            "`'abcde...'` (8 characters). The result, ellipsis included, must be at most `width` long: "
            "`'ab...'`.",
            gold=(
                Edit(
                    "textkit/text.py",
                    "    return text[: width] + ellipsis",
                    "    return text[: max(width - len(ellipsis), 0)] + ellipsis",
                ),
            ),
            tests=(
                Edit(
                    "tests/test_text.py",
                    "",
                    '\n\n@pytest.mark.parametrize("width", [5, 6])\ndef test_truncate_fits_width(width):\n'
                    '    assert len(truncate("abcdefgh", width)) == width\n',
                ),
            ),
            fail_to_pass=(
                "tests/test_text.py::test_truncate_fits_width[5]",
                "tests/test_text.py::test_truncate_fits_width[6]",
            ),
        ),
        Issue(
            3,
            "count_words miscounts whitespace\n\n`count_words('one  two\\nthree')` returns 3 only by "
            "luck of the input; `count_words('  one two ')` returns 4 and `count_words('')` returns 1. "
            "Any run of whitespace should separate words, and an empty text has 0 words.",
            gold=(Edit("textkit/text.py", 'len(text.split(" "))', "len(text.split())"),),
            tests=(
                Edit(
                    "tests/test_text.py",
                    "",
                    '\n\ndef test_count_words_whitespace():\n    assert count_words("  one two ") == 2\n'
                    '    assert count_words("a\\tb\\nc") == 3\n\n\ndef test_count_words_empty():\n'
                    '    assert count_words("") == 0\n',
                ),
            ),
            fail_to_pass=(
                "tests/test_text.py::test_count_words_whitespace",
                "tests/test_text.py::test_count_words_empty",
            ),
        ),
    ),
)

STATS = Repo(
    name="mini/stats",
    style="pytest",
    files={
        "pytest.ini": PYTEST_INI,
        "stats/__init__.py": "",
        "stats/core.py": '''"""Descriptive statistics over lists of numbers."""


def mean(values):
    return sum(values) / len(values)


def median(values):
    ordered = sorted(values)
    return ordered[len(ordered) // 2]


def clamp(value, lo, hi):
    return min(max(value, lo), hi)
''',
        "tests/test_core.py": """from stats.core import clamp, mean, median


def test_mean():
    assert mean([1, 2, 3]) == 2


def test_median_odd():
    assert median([3, 1, 2]) == 2


def test_clamp():
    assert clamp(5, 0, 3) == 3
    assert clamp(-1, 0, 3) == 0
""",
    },
    later={"stats/version.py": '__version__ = "0.2"\n'},
    test_files={
        "tests/test_core.py": (
            "tests/test_core.py::test_mean",
            "tests/test_core.py::test_median_odd",
            "tests/test_core.py::test_clamp",
        )
    },
    issues=(
        Issue(
            1,
            "mean([]) raises ZeroDivisionError\n\nThe mean of an empty list should raise "
            "`ValueError('mean of empty data')`, like the statistics module does, not ZeroDivisionError.",
            gold=(
                Edit(
                    "stats/core.py",
                    "def mean(values):\n",
                    'def mean(values):\n    if not values:\n        raise ValueError("mean of empty data")\n',
                ),
            ),
            tests=(
                Edit("tests/test_core.py", "from stats.core", "import pytest\n\nfrom stats.core"),
                Edit(
                    "tests/test_core.py",
                    "",
                    '\n\ndef test_mean_empty():\n    with pytest.raises(ValueError, match="empty"):\n'
                    "        mean([])\n",
                ),
            ),
            fail_to_pass=("tests/test_core.py::test_mean_empty",),
        ),
        Issue(
            2,
            "median is wrong for an even number of values\n\n`median([1, 2, 3, 4])` returns 3; "
            "it should be the mean of the two middle values, 2.5.",
            gold=(
                Edit(
                    "stats/core.py",
                    "    return ordered[len(ordered) // 2]\n",
                    "    mid = len(ordered) // 2\n    if len(ordered) % 2:\n        return ordered[mid]\n"
                    "    return (ordered[mid - 1] + ordered[mid]) / 2\n",
                ),
            ),
            tests=(
                Edit(
                    "tests/test_core.py",
                    "",
                    "\n\ndef test_median_even():\n    assert median([4, 1, 3, 2]) == 2.5\n",
                ),
            ),
            fail_to_pass=("tests/test_core.py::test_median_even",),
        ),
        Issue(
            3,
            "clamp accepts an empty range\n\n`clamp(5, 3, 0)` silently returns 0. A range whose "
            "lower bound is above its upper bound is a caller error: raise ValueError.",
            gold=(
                Edit(
                    "stats/core.py",
                    "def clamp(value, lo, hi):\n",
                    "def clamp(value, lo, hi):\n    if lo > hi:\n"
                    '        raise ValueError(f"empty range: {lo} > {hi}")\n',
                ),
            ),
            tests=(
                Edit(
                    "tests/test_core.py",
                    "",
                    "\n\ndef test_clamp_empty_range():\n    try:\n        clamp(5, 3, 0)\n"
                    "    except ValueError:\n        pass\n    else:\n"
                    '        raise AssertionError("no ValueError")\n',
                ),
            ),
            fail_to_pass=("tests/test_core.py::test_clamp_empty_range",),
        ),
    ),
)

KVSTORE = Repo(
    name="mini/kvstore",
    style="unittest",
    files={
        "runtests.py": RUNTESTS,
        "kvstore/__init__.py": "from kvstore.store import LRUStore\n",
        "kvstore/store.py": '''"""A bounded in-memory key-value store that evicts the least recently used key."""
from collections import OrderedDict


class LRUStore:
    def __init__(self, capacity):
        self.capacity = capacity
        self._data = OrderedDict()

    def set(self, key, value):
        self._data[key] = value
        self._data.move_to_end(key)
        if len(self._data) > self.capacity:
            self._data.popitem(last=True)

    def get(self, key, default=None):
        if key not in self._data:
            return None
        self._data.move_to_end(key)
        return self._data[key]

    def delete(self, key):
        del self._data[key]
        return True

    def __len__(self):
        return len(self._data)
''',
        "tests/__init__.py": "",
        "tests/test_store.py": """import unittest

from kvstore import LRUStore


class StoreTests(unittest.TestCase):
    def test_set_get(self):
        s = LRUStore(2)
        s.set("a", 1)
        self.assertEqual(s.get("a"), 1)

    def test_len(self):
        s = LRUStore(3)
        s.set("a", 1)
        s.set("b", 2)
        self.assertEqual(len(s), 2)

    def test_delete(self):
        s = LRUStore(2)
        s.set("a", 1)
        self.assertTrue(s.delete("a"))
        self.assertEqual(len(s), 0)
""",
    },
    later={"kvstore/ttl.py": '"""Expiring keys: not yet."""\n'},
    test_files={
        "tests/test_store.py": (
            "test_set_get (tests.test_store.StoreTests)",
            "test_len (tests.test_store.StoreTests)",
            "test_delete (tests.test_store.StoreTests)",
        )
    },
    issues=(
        Issue(
            1,
            "LRUStore evicts the newest key\n\nWith capacity 2, `set('a')`, `set('b')`, `set('c')` "
            "leaves `a` and `b`: the key just written is evicted. The least recently used key (`a`) "
            "should go.",
            gold=(Edit("kvstore/store.py", "popitem(last=True)", "popitem(last=False)"),),
            tests=(
                Edit(
                    "tests/test_store.py",
                    "    def test_len(self):",
                    '    def test_evicts_least_recent(self):\n        s = LRUStore(2)\n        s.set("a", 1)\n'
                    '        s.set("b", 2)\n        s.get("a")\n        s.set("c", 3)\n'
                    '        self.assertIsNone(s.get("b"))\n        self.assertEqual(s.get("a"), 1)\n'
                    '        self.assertEqual(s.get("c"), 3)\n\n    def test_len(self):',
                ),
            ),
            fail_to_pass=("test_evicts_least_recent (tests.test_store.StoreTests)",),
        ),
        Issue(
            2,
            "get() ignores its default\n\n`LRUStore(1).get('missing', 0)` returns None instead of 0.",
            gold=(Edit("kvstore/store.py", "            return None\n", "            return default\n"),),
            tests=(
                Edit(
                    "tests/test_store.py",
                    "",
                    "\n\nclass DefaultTests(unittest.TestCase):\n    def test_get_default(self):\n"
                    '        self.assertEqual(LRUStore(1).get("missing", 0), 0)\n',
                ),
            ),
            fail_to_pass=("test_get_default (tests.test_store.DefaultTests)",),
        ),
        Issue(
            3,
            "delete() of a missing key raises KeyError\n\n`delete` is documented to return whether "
            "the key was there; for a missing key it raises KeyError instead of returning False.",
            gold=(
                Edit(
                    "kvstore/store.py",
                    "        del self._data[key]\n        return True\n",
                    "        return self._data.pop(key, _MISSING) is not _MISSING\n",
                ),
                Edit("kvstore/store.py", "\n\nclass LRUStore:", "\n_MISSING = object()\n\n\nclass LRUStore:"),
            ),
            tests=(
                Edit(
                    "tests/test_store.py",
                    "    def test_len(self):",
                    '    def test_delete_missing(self):\n        self.assertFalse(LRUStore(1).delete("x"))\n\n'
                    "    def test_len(self):",
                ),
            ),
            fail_to_pass=("test_delete_missing (tests.test_store.StoreTests)",),
        ),
    ),
)

SEMVER = Repo(
    name="mini/semver",
    style="unittest",
    files={
        "runtests.py": RUNTESTS,
        "semver/__init__.py": "from semver.version import Version, parse\n",
        "semver/version.py": '''"""Semantic versions: parse, compare, bump."""
import re

_PATTERN = re.compile(r"^(\\d+)\\.(\\d+)\\.(\\d+)(?:-([0-9A-Za-z.-]+))?$")


class Version:
    def __init__(self, major, minor, patch, pre=None):
        self.major, self.minor, self.patch, self.pre = major, minor, patch, pre

    def _key(self):
        return (self.major, self.minor, self.patch, self.pre or "")

    def __eq__(self, other):
        return self._key() == other._key()

    def __lt__(self, other):
        return self._key() < other._key()

    def bump_minor(self):
        return Version(self.major, self.minor + 1, self.patch)

    def __str__(self):
        core = f"{self.major}.{self.minor}.{self.patch}"
        return f"{core}-{self.pre}" if self.pre else core


def parse(text):
    match = _PATTERN.match(text)
    if not match:
        raise ValueError(f"not a semantic version: {text!r}")
    major, minor, patch, pre = match.groups()
    return Version(int(major), int(minor), int(patch), pre)
''',
        "tests/__init__.py": "",
        "tests/test_version.py": """import unittest

from semver import Version, parse


class ParseTests(unittest.TestCase):
    def test_parse(self):
        self.assertEqual(parse("1.2.3"), Version(1, 2, 3))

    def test_parse_pre(self):
        self.assertEqual(str(parse("1.0.0-rc.1")), "1.0.0-rc.1")

    def test_invalid(self):
        with self.assertRaises(ValueError):
            parse("1.2")


class OrderTests(unittest.TestCase):
    def test_order(self):
        self.assertLess(parse("1.2.3"), parse("1.10.0"))
""",
    },
    later={"semver/cli.py": '"""Command line: coming soon."""\n'},
    test_files={
        "tests/test_version.py": (
            "test_parse (tests.test_version.ParseTests)",
            "test_parse_pre (tests.test_version.ParseTests)",
            "test_invalid (tests.test_version.ParseTests)",
            "test_order (tests.test_version.OrderTests)",
        )
    },
    issues=(
        Issue(
            1,
            "pre-releases sort after their release\n\n`parse('1.0.0-rc.1') < parse('1.0.0')` is "
            "False. By the semver spec a pre-release has lower precedence than the release.",
            gold=(
                Edit(
                    "semver/version.py",
                    '        return (self.major, self.minor, self.patch, self.pre or "")',
                    '        return (self.major, self.minor, self.patch, self.pre is None, self.pre or "")',
                ),
            ),
            tests=(
                Edit(
                    "tests/test_version.py",
                    "",
                    "\n    def test_prerelease_first(self):\n"
                    '        self.assertLess(parse("1.0.0-rc.1"), parse("1.0.0"))\n',
                ),
            ),
            fail_to_pass=("test_prerelease_first (tests.test_version.OrderTests)",),
        ),
        Issue(
            2,
            "parse() rejects a leading 'v'\n\nGit tags are often written `v1.2.3`; `parse('v1.2.3')` "
            "raises ValueError. Accept an optional leading `v` (or `V`).",
            gold=(Edit("semver/version.py", 're.compile(r"^(', 're.compile(r"^[vV]?('),),
            tests=(
                Edit(
                    "tests/test_version.py",
                    "\n\nclass OrderTests",
                    '\n    def test_leading_v(self):\n        self.assertEqual(parse("v1.2.3"), Version(1, 2, 3))\n'
                    "\n\nclass OrderTests",
                ),
            ),
            fail_to_pass=("test_leading_v (tests.test_version.ParseTests)",),
        ),
        Issue(
            3,
            "bump_minor keeps the patch number\n\n`parse('1.2.3').bump_minor()` gives `1.3.3`; "
            "bumping the minor version must reset the patch: `1.3.0`.",
            gold=(
                Edit(
                    "semver/version.py",
                    "Version(self.major, self.minor + 1, self.patch)",
                    "Version(self.major, self.minor + 1, 0)",
                ),
            ),
            tests=(
                Edit(
                    "tests/test_version.py",
                    "",
                    "\n\nclass BumpTests(unittest.TestCase):\n    def test_bump_minor(self):\n"
                    '        self.assertEqual(str(parse("1.2.3").bump_minor()), "1.3.0")\n',
                ),
            ),
            fail_to_pass=("test_bump_minor (tests.test_version.BumpTests)",),
        ),
    ),
)

REPOS = (TEXTKIT, STATS, KVSTORE, SEMVER)
