"""Lockfiles through the real command line: a throwaway plugin installed as pip would, its files edited.

Each test installs `envhub-locktest` (a dist-info and a package with a data file) into its own folder,
runs `python -m envhub` there with that folder on the path, and edits the plugin's real files to see
`envhub rollout --locked` refuse, naming what changed.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import os
import shutil
import subprocess
import sys
import textwrap
import tomllib
from pathlib import Path

import docker
import pytest
from typer.testing import CliRunner

import envhub.sandbox as sandbox
from envhub.cli import app
from envhub.core import Provenance
from envhub.index import index_path
from envhub.lock import LockError, lockfile
from envhub.lock.lockfile import Locked, LockMismatch, check, current, dumps, read
from envhub.messages import Message
from envhub.records import Episode, episode_id
from envhub.registration import Registry
from envhub.sandbox import IsolationPolicy
from envhub.store import BatchSpec, BatchStore, read_episodes

ENV_ID = "locktest/say-v0"
ENVHUB = Path(lockfile.__file__).parents[1]  # envhub/lock/lockfile.py: the package envhub
"""The envhub package the tests run on; the tests that edit envhub's files edit a copy of it."""
PLUGIN = '''
    """A throwaway plugin whose files the tests edit."""

    import random
    from pathlib import Path

    import envhub

    WORDS = (Path(__file__).parent / "words.txt").read_text().split()


    class Say(envhub.SingleTurnEnv):
        """Repeat the word."""

        def __init__(self, backend: str = "none", image: str | None = None) -> None:
            super().__init__()
            self.backend, self.image = backend, image

        def setup(self, rng: random.Random) -> str:
            self.word = rng.choice(WORDS)
            return f"Say {self.word}."

        @envhub.reward
        def said(self, answer: str) -> float:
            return float(answer.strip() == self.word)

        def reference_action(self, messages: list[envhub.Message]) -> str:
            return self.word
'''


@pytest.fixture
def site(tmp_path: Path) -> Path:
    """`envhub-locktest` installed as pip leaves a distribution: a dist-info and its package; beside it
    a copy of envhub (as a wheel installs it, registry.yaml inside), which the command imports first,
    so a test can edit envhub's files without touching the tree other tests run on."""
    site = tmp_path / "site"
    shutil.copytree(ENVHUB, site / "envhub", ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    shutil.copyfile(index_path(), site / "envhub" / "registry.yaml")
    info = site / "envhub_locktest-0.1.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: envhub-locktest\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(f"[envhub.envs]\n{ENV_ID} = envhub_locktest:Say\n")
    package = site / "envhub_locktest"
    package.mkdir()
    (package / "__init__.py").write_text(textwrap.dedent(PLUGIN))
    (package / "words.txt").write_text("apple pear plum\n")
    return site


def envhub(site: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """`python -m envhub ARGS` in a fresh interpreter that sees the throwaway plugin, from its folder."""
    return subprocess.run(
        [sys.executable, "-m", "envhub", *args],
        capture_output=True,
        text=True,
        cwd=site.parent,
        env={**os.environ, "PYTHONPATH": str(site), "COLUMNS": "200"},
        timeout=300,
    )


def lock(site: Path, *args: str) -> Path:
    result = envhub(site, "lock", *args)
    assert result.returncode == 0, result.stderr
    path = site.parent / "envhub.lock"
    path.write_text(result.stdout)
    return path


def test_a_lock_lets_an_unchanged_env_run_and_is_the_same_every_time(site: Path) -> None:
    path = lock(site, ENV_ID)
    table = tomllib.loads(path.read_text())["envs"][ENV_ID]
    assert set(table) == {"hash", "options", "code", "data", "sandbox", "core", "registry"}
    assert table["code"]["parts"].keys() == {"envhub_locktest/__init__.py"}
    assert table["data"]["parts"].keys() == {"envhub_locktest/words.txt"}
    core = table["core"]["parts"]  # every file of envhub, not a list of the ones that score
    assert {"envhub/authoring/rewards.py", "envhub/rollout/runner.py", "envhub/grading/python_tests.py"} <= (
        core.keys()
    )
    copied = site / "envhub"
    assert core.keys() == {
        f"envhub/{p.relative_to(copied).as_posix()}" for p in copied.rglob("*") if p.is_file()
    }
    assert table["sandbox"]["parts"] == {"kind": "none"}
    assert table["registry"]["parts"]["entry point"] == "envhub_locktest:Say"
    assert "locktest/say-v0" in envhub(site, "lock", ENV_ID).stderr  # the summary table, on stderr
    assert lock(site, ENV_ID).read_text() == path.read_text()  # stable: no mtimes, sorted

    ran = envhub(site, "rollout", ENV_ID, "-n", "2", "--locked", path.name, "--out", "run")
    assert ran.returncode == 0, ran.stderr
    assert [e.reward for e in read_episodes(site.parent / "run")] == [1.0, 1.0]


def test_an_edited_plugin_file_is_refused_naming_the_component_and_file(site: Path) -> None:
    path = lock(site, ENV_ID)
    module = site / "envhub_locktest" / "__init__.py"
    module.write_text(module.read_text().replace("answer.strip() ==", "answer.strip().lower() =="))

    refused = envhub(site, "rollout", ENV_ID, "-n", "2", "--locked", path.name, "--out", "run")
    assert refused.returncode != 0
    assert f"{ENV_ID} no longer runs on what {path.name} pins" in refused.stderr
    assert "code changed: envhub_locktest/__init__.py changed" in refused.stderr
    assert "data changed" not in refused.stderr and "sandbox changed" not in refused.stderr
    assert "core changed" not in refused.stderr
    assert (
        f"re-lock with `envhub lock {ENV_ID} --out {path.name}` if the change is intended" in refused.stderr
    )
    assert not (site.parent / "run").exists()  # refused before anything ran or was stored

    (site / "envhub_locktest" / "words.txt").write_text("apple pear plum fig\n")
    (site / "envhub_locktest" / "extra.py").write_text("")
    refused = envhub(site, "rollout", ENV_ID, "--locked", path.name)
    assert "data changed: envhub_locktest/words.txt changed" in refused.stderr
    assert "envhub_locktest/extra.py added" in refused.stderr


def wrong_answers(site: Path) -> str:
    """A scripted policy that answers every episode with a word that is never the one asked for."""
    script = site.parent / "wrong.json"
    script.write_text(json.dumps(["banana"]))
    return f"scripted:{script}"


def test_an_edited_reward_aggregator_is_refused_naming_the_file(site: Path) -> None:
    """The red team's edit (issue 28): the weighted sum of components made to pay at least 1.0. It
    really pays 1.0 for wrong answers, and `--locked` refuses to run it, naming envhub's file."""
    path = lock(site, ENV_ID)
    wrong = wrong_answers(site)
    ran = envhub(
        site, "rollout", ENV_ID, "-n", "2", "--policy", wrong, "--locked", path.name, "--out", "honest"
    )
    assert ran.returncode == 0, ran.stderr  # the unchanged tree passes
    assert [e.reward for e in read_episodes(site.parent / "honest")] == [0.0, 0.0]

    aggregator = site / "envhub" / "authoring" / "rewards.py"
    text = aggregator.read_text()
    assert text.count("    return total, components\n") == 1
    aggregator.write_text(
        text.replace(
            "    return total, components\n", "    total = max(total, 1.0)\n    return total, components\n"
        )
    )
    refused = envhub(
        site, "rollout", ENV_ID, "-n", "2", "--policy", wrong, "--locked", path.name, "--out", "run"
    )
    assert refused.returncode != 0
    assert "core changed: envhub/authoring/rewards.py changed" in refused.stderr
    assert "code changed" not in refused.stderr and "data changed" not in refused.stderr
    assert not (site.parent / "run").exists()

    paid = envhub(site, "rollout", ENV_ID, "-n", "2", "--policy", wrong, "--out", "unlocked")
    assert paid.returncode == 0, paid.stderr  # the edit is a real attack: unlocked, wrong answers pay 1.0
    assert [e.reward for e in read_episodes(site.parent / "unlocked")] == [1.0, 1.0]


def test_an_edited_runner_file_or_an_added_core_module_is_refused(site: Path) -> None:
    """Not only the files that score: the runner that stores the reward, and a module dropped in."""
    path = lock(site, ENV_ID)
    runner = site / "envhub" / "rollout" / "runner.py"
    runner.write_text(runner.read_text() + "\n# an edit\n")
    (site / "envhub" / "grading" / "extra.py").write_text("")
    refused = envhub(site, "rollout", ENV_ID, "-n", "1", "--locked", path.name)
    assert refused.returncode != 0
    assert "core changed: envhub/grading/extra.py added; envhub/rollout/runner.py changed" in refused.stderr


def test_the_whole_plugin_distribution_is_pinned_wheel_or_editable(site: Path, tmp_path: Path) -> None:
    """A second package of the env's distribution, which no entry point names, is pinned from the
    RECORD a wheel leaves, and so is an envhub plugin it requires (as envhub-humaneval requires
    envhub-code); an editable install (RECORD lists a .pth only) is read from its source folder,
    found where Python imports it. A library it requires that is not built on envhub is not pinned."""
    helpers = site / "envhub_locktest_helpers"
    helpers.mkdir()
    (helpers / "__init__.py").write_text("def normalise(text: str) -> str:\n    return text.strip()\n")
    info = site / "envhub_locktest-0.1.dist-info"
    (info / "RECORD").write_text(
        "envhub_locktest/__init__.py,,\nenvhub_locktest/words.txt,,\n"
        "envhub_locktest_helpers/__init__.py,,\nenvhub_locktest-0.1.dist-info/RECORD,,\n"
    )
    requires = "Requires-Dist: envhub-core>=0.1\nRequires-Dist: envhub_LockGrader\nRequires-Dist: locklib\n"
    (info / "METADATA").write_text((info / "METADATA").read_text() + requires)
    for name, needs in (("envhub_lockgrader", "Requires-Dist: envhub-core\n"), ("locklib", "")):
        (site / f"{name}-1.0.dist-info").mkdir()
        (site / f"{name}-1.0.dist-info" / "METADATA").write_text(
            f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n{needs}"
        )
        (site / f"{name}-1.0.dist-info" / "top_level.txt").write_text(f"{name}\n")
        (site / f"{name}.py").write_text("def grade(answer: str) -> float:\n    return 0.0\n")
    path = lock(site, ENV_ID)
    code = tomllib.loads(path.read_text())["envs"][ENV_ID]["code"]["parts"]
    assert code.keys() == {
        "envhub_locktest/__init__.py",
        "envhub_locktest_helpers/__init__.py",
        "envhub_lockgrader.py",
    }
    (helpers / "__init__.py").write_text("def normalise(text: str) -> str:\n    return 'apple'\n")
    (site / "envhub_lockgrader.py").write_text("def grade(answer: str) -> float:\n    return 1.0\n")
    refused = envhub(site, "rollout", ENV_ID, "-n", "1", "--locked", path.name)
    assert refused.returncode != 0
    assert (
        "code changed: envhub_lockgrader.py changed; envhub_locktest_helpers/__init__.py changed"
        in refused.stderr
    )

    # editable: the package lives in the project and the RECORD names only a .pth; Python reads a .pth
    # only in site-packages, so the project's folder goes on the path as that .pth would put it
    source = tmp_path / "src"
    shutil.move(site / "envhub_locktest", source / "envhub_locktest")
    (site / "_envhub_locktest.pth").write_text(f"{source}\n")
    (info / "RECORD").write_text("_envhub_locktest.pth,,\nenvhub_locktest-0.1.dist-info/RECORD,,\n")
    shutil.rmtree(helpers)
    (info / "METADATA").write_text((info / "METADATA").read_text().replace(requires, ""))
    result = subprocess.run(
        [sys.executable, "-m", "envhub", "lock", ENV_ID],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": os.pathsep.join([str(site), str(source)]), "COLUMNS": "200"},
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    parts = tomllib.loads(result.stdout)["envs"][ENV_ID]
    assert parts["code"]["parts"].keys() == {"envhub_locktest/__init__.py"}
    assert parts["data"]["parts"].keys() == {"envhub_locktest/words.txt"}


def test_episodes_carry_the_hash_they_ran_under_and_show_displays_it(site: Path) -> None:
    path = lock(site, ENV_ID)
    locked = tomllib.loads(path.read_text())["envs"][ENV_ID]["hash"]
    ran = envhub(site, "rollout", ENV_ID, "-n", "3", "--locked", path.name, "--out", "run")
    assert ran.returncode == 0, ran.stderr
    episodes = read_episodes(site.parent / "run")
    assert [e.provenance.lock_hash for e in episodes] == [locked] * 3

    shown = envhub(site, "show", "run", "--html", "report.html")
    assert shown.returncode == 0, shown.stderr
    assert f"lock: {locked} (3 episodes)" in shown.stdout
    assert f"lock {locked}" in envhub(site, "show", "run", "--episode", "0").stdout
    report = (site.parent / "report.html").read_text()
    assert f"<code>{locked}</code> (3 episodes)" in report


def test_a_docker_tag_moved_to_another_image_is_refused(site: Path, tmp_path: Path) -> None:
    """The image is built offline from the sandbox image already in the engine, then built again
    differently under the same tag: the lock names the image id that changed."""
    client = docker.from_env()
    tag = f"envhub-locktest:{tmp_path.name.lower()}"
    built: list[str] = []

    def build(label: str) -> str:
        dockerfile = f"FROM envhub/python:3-bookworm\nLABEL envhub.locktest={label}\n".encode()
        image, _ = client.images.build(fileobj=io.BytesIO(dockerfile), tag=tag, pull=False, rm=True)
        built.append(str(image.id))
        return str(image.id)

    try:
        first = build("one")
        path = lock(site, ENV_ID, "--kwarg", "backend=docker", "--kwarg", f"image={tag}")
        sandbox_parts = tomllib.loads(path.read_text())["envs"][ENV_ID]["sandbox"]["parts"]
        assert sandbox_parts == {"kind": "docker", "image": tag, "image id": first}
        kwargs = ("--kwarg", "backend=docker", "--kwarg", f"image={tag}")
        ran = envhub(site, "rollout", ENV_ID, "-n", "1", *kwargs, "--locked", path.name, "--out", "run")
        assert ran.returncode == 0, ran.stderr

        second = build("two")
        assert second != first
        refused = envhub(site, "rollout", ENV_ID, "-n", "1", *kwargs, "--locked", path.name)
        assert refused.returncode != 0
        assert f"sandbox changed: image id was {first}, now {second}" in refused.stderr
        assert '--kwarg backend="docker"' in refused.stderr  # the re-lock command keeps the options
        without_docker = envhub(site, "rollout", ENV_ID, "-n", "1", "--locked", path.name)
        assert "sandbox changed: image removed; image id removed; kind was docker, now none" in (
            without_docker.stderr
        )
    finally:
        for image_id in built:  # the first build lost its tag to the second: removed by id
            with contextlib.suppress(docker.errors.ImageNotFound):
                client.images.remove(image_id, force=True)
        client.close()


def test_the_local_sandbox_component_is_the_interpreter_the_sandbox_runs() -> None:
    """tool-use runs in the local sandbox: its lock pins the `python3` that sandbox really executes
    (asked inside a real bubblewrap sandbox) and its standard library, the same on every reading."""
    parts = current("tool-use-v0").components["sandbox"].parts
    assert parts["kind"] == "local"
    assert parts["python binary"].startswith("sha256:") and parts["stdlib"].split()[1].startswith("sha256:")
    assert current("tool-use-v0").components["sandbox"].parts == parts

    async def inside() -> str:
        box = await sandbox.open("local", policy=IsolationPolicy())
        try:
            result = await box.exec(
                ["python3", "-c", "import os, sys; print(os.path.realpath(sys.executable))"]
            )
            return result.stdout.strip()
        finally:
            await box.close()

    assert asyncio.run(inside()) == parts["python"]
    assert parts["stdlib"].split()[0] == str(
        Path(parts["python"]).parent.parent / "lib" / Path(parts["python"]).name
    )


def test_a_hand_edited_or_foreign_lockfile_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "envhub.lock"
    path.write_text(dumps([Locked(current("arithmetic-v0"), {})]))
    assert read(path)["arithmetic-v0"].entry.hash == current("arithmetic-v0").hash
    assert check(path, "arithmetic").hash == current("arithmetic-v0").hash  # an unversioned id resolves
    with pytest.raises(
        ValueError, match=r"guess-number-v0 is not in .*envhub lock arithmetic-v0 guess-number-v0"
    ):
        check(path, "guess-number-v0")
    text = path.read_text()
    edited = text.replace('"kind" = "none"', '"kind" = "docker"')
    assert edited != text
    path.write_text(edited)
    with pytest.raises(
        ValueError, match="the combined and sandbox hashes of arithmetic-v0 do not match its parts"
    ):
        read(path)
    path.write_text(text.replace("version = 2", "version = 7"))
    with pytest.raises(ValueError, match="lockfile version 7"):
        read(path)
    path.write_text(text.replace("version = 2", "version = 1"))  # before envhub-core was pinned whole
    with pytest.raises(ValueError, match="lockfile version 1; this envhub reads version 2: write it again"):
        read(path)


def test_an_env_registered_in_a_script_pins_its_own_module(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No distribution: the lock pins the module that defines the env (not the folder around it)."""
    (tmp_path / "lockscript_coin.py").write_text(
        textwrap.dedent(PLUGIN).replace(
            '(Path(__file__).parent / "words.txt").read_text().split()', '["heads", "tails"]'
        )
    )
    (tmp_path / "unrelated.txt").write_text("not part of the env\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    script_registry = Registry(discover_plugins=False)  # the shared registry stays as other tests see it
    monkeypatch.setattr(lockfile, "registry", script_registry)
    script_registry.register("lockscript/coin-v0", "lockscript_coin:Say")
    path = tmp_path / "envhub.lock"
    path.write_text(dumps([Locked(current("lockscript/coin-v0"), {})]))
    parts = read(path)["lockscript/coin-v0"].entry.components
    assert parts["code"].parts.keys() == {"lockscript_coin.py"} and parts["data"].parts == {}
    assert parts["registry"].parts["package"] == "none (registered in code)"
    check(path, "lockscript/coin-v0")

    (tmp_path / "unrelated.txt").write_text("changed\n")
    check(path, "lockscript/coin-v0")
    module = tmp_path / "lockscript_coin.py"
    module.write_text(module.read_text() + "\nEXTRA = 1\n")
    with pytest.raises(LockMismatch, match=r"code changed: lockscript_coin\.py changed"):
        check(path, "lockscript/coin-v0")


def test_ids_made_from_files_elsewhere_are_refused_saying_what_to_do(tmp_path: Path) -> None:
    """A served id's files are on its server, a format id's outside the registry: neither can be hashed
    here, and saying so beats a lock that pins nothing."""
    path = tmp_path / "envhub.lock"
    path.write_text(dumps([Locked(current("arithmetic-v0"), {})]))
    with pytest.raises(LockError, match="on the machine that serves it"):
        current("ws://127.0.0.1:9/arithmetic-v0")
    with pytest.raises(LockError, match="on the machine that serves it"):
        check(path, "ws://127.0.0.1:9/arithmetic-v0")
    with pytest.raises(LockError, match="made by a format plugin"):
        check(path, f"harbor:{tmp_path}")


def test_the_hash_an_episode_carries_is_stored_and_shown(tmp_path: Path) -> None:
    """Through the real store, `envhub show` and the HTML report: two hashes and an episode from before
    locks existed, each counted."""
    hashes = ["sha256:" + "a" * 64, "sha256:" + "b" * 64, "sha256:" + "a" * 64, None]
    store = BatchStore.open(
        tmp_path / "batch",
        BatchSpec(env_id="arithmetic-v0", policy="oracle", seed=0),
        episodes=4,
        resume=False,
    )
    for index, lock_hash in enumerate(hashes):
        store.add(
            Episode(
                episode_id=episode_id(index),
                env_id="arithmetic-v0",
                provenance=Provenance(package="envhub-games", lock_hash=lock_hash),
                seed=index,
                policy="oracle",
                prompt=[Message(role="user", content="2 + 2?")],
            )
        )
    store.close()
    assert [e.provenance.lock_hash for e in read_episodes(tmp_path / "batch")] == hashes

    shown = CliRunner().invoke(app, ["show", str(tmp_path / "batch"), "--html", str(tmp_path / "r.html")])
    assert shown.exit_code == 0, shown.output
    assert f"lock: {hashes[0]} (2 episodes), {hashes[1]} (1 episode); 1 episode without one" in shown.output
    one = CliRunner().invoke(app, ["show", str(tmp_path / "batch"), "--episode", "1"])
    assert f"lock {hashes[1]}" in " ".join(one.output.split())  # the header wraps at the terminal's width
    report = (tmp_path / "r.html").read_text()
    assert f"<code>{hashes[0]}</code> (2 episodes), <code>{hashes[1]}</code> (1 episode)" in report
