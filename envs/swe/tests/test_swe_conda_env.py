"""Conda `environment.yml` environments (xarray, matplotlib 3.5+) prepared with pip (`conda_env.py`):
the translation on real environment files, the plans the official specs now give instead of a
refusal, a prepare that records every entry's fate, and the refusals that remain.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
from pathlib import Path

import pytest
import swe_fixture
from envhub_swe.conda_env import DROPPED, RENAMED, Entry, pip_version, translate
from envhub_swe.data import Instance, load_lite
from envhub_swe.prepare import MANIFEST, Unsupported, downloads, prepare, prepared
from envhub_swe.pythons import probe
from envhub_swe.runtime import _sandbox_python, grade
from envhub_swe.specs import NoSpec, SetupPlan, Step, adapt_script, harness, setup_plan, specs_for
from packaging.requirements import Requirement
from test_swe_data import LITE, needs_lite

DATA = Path(__file__).parent / "data" / "conda"
XARRAY_YML = DATA / "xarray-1c198a19-ci-requirements-environment.yml"
MATPLOTLIB_YML = DATA / "matplotlib-0023ec6c-environment.yml"
QHULL = "http://www.qhull.org/download/qhull-2020-src-8.0.2.tgz"


def _requirements(entries: list[Entry]) -> list[str]:
    return [e.requirement for e in entries if e.requirement is not None]


def _fake_clone(where: Path, files: dict[str, str]) -> tuple[Path, str]:
    """A one-commit repository holding `files` (an environment file where the harness looks for it)."""
    repo = where / "clone"
    for name, text in files.items():
        (repo / name).parent.mkdir(parents=True, exist_ok=True)
        (repo / name).write_text(text)
    swe_fixture._git(repo.parent, "init", "-q", "-b", "main", str(repo))
    swe_fixture._git(repo, "add", "-A")
    swe_fixture._git(repo, "commit", "-q", "-m", "fake")
    return repo, swe_fixture._git(repo, "rev-parse", "HEAD")


def _row(repo: str, version: str, commit: str) -> Instance:
    return Instance(
        repo=repo,
        instance_id=f"{repo.replace('/', '__')}-1",
        base_commit=commit,
        patch="",
        test_patch="",
        problem_statement="",
        version=version,
        FAIL_TO_PASS=(),
        PASS_TO_PASS=(),
        environment_setup_commit=commit,
    )


# -- the translation, on real environment files ------------------------------------------------------


def test_xarray_environment_file_becomes_pip_requirements_with_the_specs_pins() -> None:
    pins = specs_for(_row("pydata/xarray", "0.12", "0" * 40))["pip_packages"]
    entries = translate(XARRAY_YML.read_text(), pins)
    fates = {e.written: e for e in entries}
    assert {w for w, e in fates.items() if e.requirement is None} == {"cdms2", "hdf5", "pip"}
    assert fates["iris"].requirement == "scitools-iris"
    assert fates["matplotlib-base"].requirement == "matplotlib"
    assert all(e.note for e in entries if e.requirement is None or e.requirement != e.written)
    requirements = _requirements(entries)
    assert requirements[-len(pins) :] == pins  # the spec's pins last, in one install with the rest
    assert "numbagg" in requirements  # the file's own pip section
    assert len(entries) == 40 + len(pins)  # 39 conda entries and 1 pip entry: each has a fate
    for requirement in requirements:
        Requirement(requirement)


def test_matplotlib_environment_file_drops_tools_c_libraries_and_the_interpreter() -> None:
    entries = translate(MATPLOTLIB_YML.read_text(), [])
    dropped = {e.written: e.note for e in entries if e.requirement is None}
    assert set(dropped) == {
        "c-compiler", "cxx-compiler", "pkg-config", "pygobject", "python>=3.12", "wxpython",
        "graphviz", "pip", "gtk4",
    }  # fmt: skip
    assert "interpreter" in dropped["python>=3.12"] and "build tool" in dropped["c-compiler"]
    requirements = _requirements(entries)
    assert "pyqt5" in requirements
    assert "pydata-sphinx-theme==0.18.0.*" in requirements  # conda's `=0.18.0` (a comment after it)
    assert "nbconvert[execute]!=6.0.0,!=6.0.1,!=7.3.0,!=7.3.1" in requirements
    assert requirements[-3:] == [
        "mpl-sphinx-theme~=3.11.0", "sphinxcontrib-svg2pdfconverter>=1.1.0", "sphinxcontrib-video>=0.2.1",
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("conda", "pip"),
    [
        ("", ""),
        ("=1.2", "==1.2.*"),
        ("=1.2.*", "==1.2.*"),
        ("1.2.*", "==1.2.*"),
        (" 1.2", "==1.2"),
        ("==1.2", "==1.2"),
        ("=1.2=py39_0", "==1.2.*"),
        ("1.2 py39_0", "==1.2"),
        (">= 1.2, <2", ">=1.2,<2"),
        ("!=1.3", "!=1.3"),
    ],
)
def test_conda_version_constraints_in_pips_syntax(conda: str, pip: str) -> None:
    assert pip_version(conda) == pip


def test_the_maps_are_small_and_name_pypi_projects() -> None:
    assert len(DROPPED) <= 15 and len(RENAMED) <= 5
    assert all(reason.strip() for reason in DROPPED.values())
    for target in RENAMED.values():
        Requirement(target)


@pytest.mark.parametrize(
    ("text", "refusal"),
    [
        ("dependencies:\n  - numpy >=1.20|<1.10\n", "has no pip equivalent"),
        ("dependencies:\n  - {conda: numpy}\n", "neither a package nor `pip:`"),
        ("name: no-dependencies\n", "no `dependencies:` list"),
        ("dependencies:\n  - '@weird'\n", "not a conda package specification"),
    ],
)
def test_an_environment_file_pip_cannot_express_is_refused(text: str, refusal: str) -> None:
    with pytest.raises(NoSpec, match=refusal):
        translate(text, [])


# -- the official specs: planned, no longer refused ---------------------------------------------------


def test_an_xarray_row_is_planned_from_its_environment_file_instead_of_refused() -> None:
    where = swe_fixture.open_folder()
    clone, commit = _fake_clone(where, {"ci/requirements/environment.yml": XARRAY_YML.read_text()})
    plan = setup_plan(_row("pydata/xarray", "0.12", commit), clone, str(where / "ws" / "repo"))
    assert plan.python == "3.10"
    installs = [s for s in plan.steps if s.run and "environment-requirements.txt" in s.command]
    assert len(installs) == 1
    assert "\nscitools-iris\n" in installs[0].command and "\nnumpy==1.23.0\n" in installs[0].command
    noted = {s.command: s.note for s in plan.steps if s.command.startswith("environment.yml: ")}
    assert set(noted) == {
        f"environment.yml: {n}" for n in ("cdms2", "hdf5", "iris", "matplotlib-base", "pip")
    }
    assert not any(s.run and s.command.startswith("conda") for s in plan.steps)


def test_a_matplotlib_row_is_planned_and_its_download_is_found() -> None:
    where = swe_fixture.open_folder()
    clone, commit = _fake_clone(where, {"environment.yml": MATPLOTLIB_YML.read_text()})
    repo_dir = str(where / "ws" / "repo")
    plan = setup_plan(_row("matplotlib/matplotlib", "3.5", commit), clone, repo_dir)
    assert plan.python == "3.11"  # `conda install python=3.11` (skipped), not the file's python>=3.12
    assert downloads(plan) == [QHULL]
    assert any(s.run and s.command == f'QHULL_BUILD_DIR="{repo_dir}/build"' for s in plan.steps)
    assert not any(s.run and "conda" in s.command.split()[:3] for s in plan.steps)


# -- prepare -----------------------------------------------------------------------------------------

TINY_YML = """name: testbed
channels:
  - conda-forge
dependencies:
  - python=3.11
  - pip
  - hdf5
  - c-compiler
  - setuptools>=70.1
  - pip:
    - tinydep==1.0
"""


def _harness_lines(yml: str) -> list[str]:
    """The official env script's lines for a `no_use_env` environment file (xarray's shape)."""
    return [
        "source /opt/miniconda3/bin/activate",
        f"cat <<'EOF_59812759871' > environment.yml\n{yml}\nEOF_59812759871",
        "conda create -c conda-forge -n testbed python=3.11 -y",
        "conda env update -f environment.yml",
        "rm environment.yml",
        "conda activate testbed",
    ]


def test_an_environment_file_is_prepared_offline_with_every_entrys_fate_in_the_manifest(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    where = swe_fixture.open_folder()
    repo = swe_fixture.make_repo(where)
    wheels = swe_fixture.make_wheelhouse(where)
    (where / "no-index").mkdir()
    monkeypatch.setenv("PIP_INDEX_URL", f"file://{where / 'no-index'}")  # offline: the wheelhouse only
    monkeypatch.setenv("PIP_FIND_LINKS", str(wheels))
    row = swe_fixture.row(repo)
    interpreter = probe(_sandbox_python())
    assert interpreter is not None
    lines = _harness_lines(TINY_YML)
    steps = adapt_script(lines, ["python -m pip install --no-build-isolation -e ."], {}, str(repo))
    plan = SetupPlan(python=interpreter.minor, steps=tuple(steps), source="conda fixture")
    dest = prepare(row, repo, where / "ws", plan=plan)
    manifest = json.loads((dest / MANIFEST).read_text())
    fates = {s["command"]: s for s in manifest["steps"]}
    for entry in ("python=3.11", "pip", "hdf5", "c-compiler"):
        assert fates[f"environment.yml: {entry}"]["run"] is False
        assert str(fates[f"environment.yml: {entry}"]["note"]).startswith("dropped: ")
    (install,) = [s for s in manifest["steps"] if "environment-requirements.txt" in str(s["command"])]
    assert str(install["note"]).startswith("conda env update -f environment.yml: ")
    log = (dest / "prepare.log").read_text()
    from_file = log.index("Successfully installed", log.index("environment-requirements.txt"))
    assert "tinydep-1.0" in log[from_file : log.index("\n", from_file)]  # the file's pip section
    runtime, workspace = prepared(row, where / "ws", "local")
    assert asyncio.run(grade(row, row.patch, runtime, workspace)).resolved
    assert not asyncio.run(grade(row, "", runtime, workspace)).resolved


def test_a_set_up_that_downloads_from_an_unreachable_host_is_refused_before_building() -> None:
    where = swe_fixture.open_folder()
    repo = swe_fixture.make_repo(where)
    url = "http://qhull.envhub-test.invalid/qhull-2020-src-8.0.2.tgz"  # .invalid never resolves
    plan = SetupPlan(
        python="3",
        steps=(Step(f'QHULL_URL="{url}"'), Step('wget -O /tmp/qhull.tgz "$QHULL_URL"')),
        source="matplotlib's shape",
    )
    with pytest.raises(Unsupported, match=r"downloads http://qhull\.envhub-test\.invalid/.*cannot reach"):
        prepare(swe_fixture.row(repo), repo, where / "ws", plan=plan)
    assert not (where / "ws" / "fixture__tinypkg-1").exists()
    assert not (where / "ws" / "fixture__tinypkg-1.prepare.log").exists()  # refused before any step


def test_downloads_ignore_comments_and_skipped_lines() -> None:
    plan = SetupPlan(
        python="3",
        steps=(
            Step("cat <<'EOF' > r.txt\n# see https://example.invalid/why\nnumpy\nEOF"),
            Step("wget https://skipped.invalid/x", run=False),
            Step("pip install 'pkg @ git+https://example.invalid/pkg.git'"),
        ),
        source="test",
    )
    assert downloads(plan) == ["https://example.invalid/pkg.git"]


def test_a_matplotlib_row_is_refused_where_qhull_cannot_be_downloaded() -> None:
    where = swe_fixture.open_folder()
    clone, commit = _fake_clone(where, {"environment.yml": MATPLOTLIB_YML.read_text()})
    probe_qhull = subprocess.run(
        ["getent", "hosts", "www.qhull.org"], capture_output=True, check=False
    ).returncode
    if probe_qhull == 0:
        pytest.skip("www.qhull.org resolves here: matplotlib's download would be tried")
    with pytest.raises(Unsupported, match=r"downloads http://www\.qhull\.org/.*docker runtime"):
        prepare(_row("matplotlib/matplotlib", "3.5", commit), clone, where / "ws", python="3.11")


class _RawFiles:
    """Stands in for the harness's downloads from raw.githubusercontent.com: the real environment
    files of this folder for `.yml` paths, a one-line requirements file otherwise."""

    def get(self, url: str, headers: object = None, **_: object) -> object:
        text = (
            (XARRAY_YML if "xarray" in url else MATPLOTLIB_YML).read_text()
            if url.endswith(".yml")
            else "six\n"
        )
        return type("Response", (), {"status_code": 200, "text": text})()


@needs_lite
def test_every_lite_repo_version_is_planned_without_running_conda(monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 13: `prepare` supports every repo/version of Lite from the official specs."""
    module = harness()
    monkeypatch.setattr(module, "requests", _RawFiles())
    planned: dict[tuple[str, str], list[Step]] = {}
    for row in load_lite("test", LITE) + load_lite("dev", LITE):
        if (row.repo, row.version) in planned:
            continue
        spec = specs_for(row)
        env = module.make_env_script_list_py(row.model_dump(), spec, "testbed")
        repo = module.make_repo_script_list_py(spec, row.repo, "/ws/repo", row.base_commit, "testbed")
        planned[(row.repo, row.version)] = adapt_script(list(env), list(repo), spec, "/ws/repo")
    assert len(planned) == 81
    for steps in planned.values():
        run = [s.command for s in steps if s.run]
        assert not [c for c in run if c.split()[:1] == ["conda"] or "/testbed" in c]
    yml_specs = [
        k for k, steps in planned.items() if any("environment-requirements" in s.command for s in steps)
    ]
    assert {repo for repo, _ in yml_specs} == {"pydata/xarray", "matplotlib/matplotlib"}
