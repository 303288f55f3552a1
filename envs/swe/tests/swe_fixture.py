"""A tiny SWE-bench-style instance made on the spot, offline: the parts of real repositories that a
prepared environment must get right, in a few files.

`tinypkg` has a src/ layout (not importable from the repository root), a version module its setup.py
generates at install time (as setuptools_scm does for pytest), a console script (`tinycli`), and a
dependency (`tinydep`) that only its install brings in, from a wheel made here. Its row is in Lite's
format: the official eval script's shape, a django-style runner, FAIL_TO_PASS and PASS_TO_PASS.
"""

from __future__ import annotations

import base64
import hashlib
import subprocess
import tempfile
import zipfile
from importlib import metadata
from pathlib import Path

from envhub_swe.data import Instance
from envhub_swe.runtime import cache_root
from envhub_swe.specs import SetupPlan, Step

FILES = {
    "setup.py": """import pathlib
from setuptools import find_packages, setup

# Generated at install time, like setuptools_scm's version module: absent from git.
pathlib.Path(__file__).parent.joinpath("src", "tinypkg", "_version.py").write_text('version = "1.2.3"\\n')
setup(
    name="tinypkg",
    version="1.2.3",
    package_dir={"": "src"},
    packages=find_packages("src"),
    install_requires=["tinydep"],
    entry_points={"console_scripts": ["tinycli = tinypkg.cli:main"]},
)
""",
    ".gitignore": "src/tinypkg/_version.py\n*.egg-info/\nbuild/\n",
    "src/tinypkg/__init__.py": "from tinypkg._version import version\n",
    "src/tinypkg/core.py": "from tinydep import double\n\n\ndef triple(x):\n    return double(x)\n",
    "src/tinypkg/cli.py": "from tinypkg import version\n\n\ndef main():\n    print('tinycli', version)\n",
    "runtests.py": """import sys
import unittest


class Result(unittest.TextTestResult):
    def getDescription(self, test):
        return "%s (%s.%s)" % (test._testMethodName, type(test).__module__, type(test).__qualname__)


def main(argv):
    labels = [a for a in argv if not a.startswith("--") and not a.isdigit()]
    suite = unittest.defaultTestLoader.loadTestsFromNames(labels or ["tests"])
    runner = unittest.TextTestRunner(verbosity=2, resultclass=Result, stream=sys.stderr)
    return 0 if runner.run(suite).wasSuccessful() else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
""",
    "tests/__init__.py": "",
    "tests/test_core.py": """import subprocess
import unittest

import tinypkg
from tinypkg.core import triple


class CoreTests(unittest.TestCase):
    def test_version(self):
        self.assertEqual(tinypkg.version, "1.2.3")

    def test_cli(self):
        out = subprocess.run(["tinycli"], capture_output=True, text=True, check=True).stdout
        self.assertEqual(out.strip(), "tinycli 1.2.3")
""",
}
GOLD = "\n".join(
    [
        "diff --git a/src/tinypkg/core.py b/src/tinypkg/core.py",
        "--- a/src/tinypkg/core.py",
        "+++ b/src/tinypkg/core.py",
        "@@ -2,4 +2,4 @@ from tinydep import double",
        " ",  # blank context lines of a diff are one space
        " ",
        " def triple(x):",
        "-    return double(x)",
        "+    return double(x) + x",
        "",
    ]
)
TEST_PATCH = """diff --git a/tests/test_core.py b/tests/test_core.py
--- a/tests/test_core.py
+++ b/tests/test_core.py
@@ -13,3 +13,6 @@ class CoreTests(unittest.TestCase):
     def test_cli(self):
         out = subprocess.run(["tinycli"], capture_output=True, text=True, check=True).stdout
         self.assertEqual(out.strip(), "tinycli 1.2.3")
+
+    def test_triple(self):
+        self.assertEqual(triple(2), 6)
"""
TEST_COMMAND = "python runtests.py --verbosity 2 tests.test_core"


def eval_script(base: str, test_command: str = TEST_COMMAND, before_tests: str = "") -> str:
    """The official eval script's shape (see any Lite row's `eval_script`)."""
    return f"""#!/bin/bash
set -uxo pipefail
source /opt/miniconda3/bin/activate
conda activate testbed
cd /testbed
git config --global --add safe.directory /testbed
cd /testbed
git status
git -c core.fileMode=false diff {base}
source /opt/miniconda3/bin/activate
conda activate testbed
python -m pip install -e .
git checkout {base} tests/test_core.py
git apply -v - <<'EOF_114329324912'
{TEST_PATCH}
EOF_114329324912
{before_tests}: '>>>>> Start Test Output'
{test_command}
: '>>>>> End Test Output'
git checkout {base} tests/test_core.py
"""


def open_folder() -> Path:
    """A fresh folder the sandbox's uid can traverse (pytest's tmp_path is closed to it)."""
    path = Path(tempfile.mkdtemp(dir=cache_root(), prefix="fixture-"))
    path.chmod(0o755)
    return path


def _git(cwd: Path, *args: str) -> str:
    env = {"GIT_CONFIG_GLOBAL": "/dev/null", "GIT_CONFIG_NOSYSTEM": "1", "PATH": "/usr/bin:/bin"}
    identity = ["-c", "user.name=fixture", "-c", "user.email=fixture@invalid"]
    done = subprocess.run(
        ["git", *identity, *args], cwd=cwd, env=env, capture_output=True, text=True, check=True
    )
    return done.stdout.strip()


def make_repo(where: Path) -> Path:
    """tinypkg's repository (one commit) at where/tinypkg."""
    repo = where / "tinypkg"
    for name, text in FILES.items():
        (repo / name).parent.mkdir(parents=True, exist_ok=True)
        (repo / name).write_text(text)
    _git(repo, "init", "-q", "-b", "main")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", "tinypkg")
    return repo


def _write_wheel(path: Path, files: dict[str, bytes], dist_info: str) -> None:
    record = []
    for name, data in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.append(f"{name},sha256={digest},{len(data)}")
    record.append(f"{dist_info}/RECORD,,")
    with zipfile.ZipFile(path, "w") as wheel:
        for name, data in files.items():
            wheel.writestr(name, data)
        wheel.writestr(f"{dist_info}/RECORD", "\n".join(record) + "\n")


def _wheel_of_installed(name: str, wheels: Path) -> None:
    """A wheel of a pure-Python distribution installed here (the tests' own setuptools), for offline use."""
    dist = metadata.distribution(name)
    info = f"{dist.metadata['Name'].replace('-', '_')}-{dist.version}.dist-info"
    files = {}
    for file in dist.files or ():
        text = str(file)
        if (
            text.startswith("..")
            or "__pycache__" in text
            or text.endswith(("RECORD", "INSTALLER", "REQUESTED"))
        ):
            continue
        if text.endswith("direct_url.json"):
            continue
        files[text] = Path(str(dist.locate_file(file))).read_bytes()
    _write_wheel(wheels / f"{info.removesuffix('.dist-info')}-py3-none-any.whl", files, info)


def make_wheelhouse(where: Path) -> Path:
    """A folder with tinydep's wheel (written by hand) and setuptools' (from this environment): the
    fixture installs with no index."""
    wheels = where / "wheels"
    wheels.mkdir()
    files = {
        "tinydep/__init__.py": b"def double(x):\n    return 2 * x\n",
        "tinydep-1.0.dist-info/METADATA": b"Metadata-Version: 2.1\nName: tinydep\nVersion: 1.0\n",
        "tinydep-1.0.dist-info/WHEEL": (
            b"Wheel-Version: 1.0\nGenerator: fixture\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
        ),
    }
    _write_wheel(wheels / "tinydep-1.0-py3-none-any.whl", files, "tinydep-1.0.dist-info")
    _wheel_of_installed("setuptools", wheels)
    return wheels


def row(repo: Path, *, test_command: str = TEST_COMMAND, before_tests: str = "") -> Instance:
    base = _git(repo, "rev-parse", "HEAD")
    return Instance(
        repo="fixture/tinypkg",
        instance_id="fixture__tinypkg-1",
        base_commit=base,
        patch=GOLD,
        test_patch=TEST_PATCH,
        problem_statement="triple(2) returns 4",
        version="1.0",
        FAIL_TO_PASS=("test_triple (tests.test_core.CoreTests)",),
        PASS_TO_PASS=("test_version (tests.test_core.CoreTests)", "test_cli (tests.test_core.CoreTests)"),
        environment_setup_commit=base,
        eval_script=eval_script(base, test_command, before_tests),
        log_parser="parse_log_django",
    )


def plan(python: str, wheels: Path) -> SetupPlan:
    """The install the official specs give most repositories (`pip install -e .`), kept offline."""
    offline = f"python -m pip install --no-index --find-links {wheels}"
    steps = (Step(f"{offline} 'setuptools>=70.1'"), Step(f"{offline} --no-build-isolation -e ."))
    return SetupPlan(python=python, steps=steps, source="fixture")
