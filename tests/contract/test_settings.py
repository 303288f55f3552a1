"""One settings object for every `ENVHUB_*` variable: read when used (not when envhub is imported), a bad
value named with its variable, and every variable, the core's and the plugins', documented in one page."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from envhub.sandbox.slots import SlotPool
from envhub.settings import DOC, Settings, SettingsError, render, settings, variable

ROOT = Path(__file__).resolve().parents[2]
SOURCES = [ROOT / "envhub", *ROOT.glob("envs/*/envhub_*"), ROOT / "trainer" / "envhub_trainer"]


def source_files() -> list[Path]:
    return [path for folder in SOURCES for path in sorted(folder.rglob("*.py"))]


def test_a_variable_set_after_import_is_what_the_next_sandbox_slot_uses(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The slot lock folder, uid base and slot count were read when `envhub.sandbox.slots` was imported:
    set afterwards (as a test, a notebook or a driver does), they were silently ignored."""
    monkeypatch.setenv("ENVHUB_SANDBOX_LOCK_DIR", str(tmp_path / "locks"))
    monkeypatch.setenv("ENVHUB_CGROUP_ROOT", str(tmp_path / "no-cgroups"))  # no cgroups: nothing shared
    monkeypatch.setenv("ENVHUB_SANDBOX_UID_BASE", "70000")
    monkeypatch.setenv("ENVHUB_SANDBOX_MAX_SLOTS", "1")
    pool = SlotPool()
    slot = pool.acquire()
    try:
        assert (tmp_path / "locks" / "slot0.lock").exists()
        assert slot.uid in (70000, os.getuid())
        assert slot.cgroups == {}
        with pytest.raises(RuntimeError, match=r"all 1 sandbox slots are in use.*ENVHUB_SANDBOX_MAX_SLOTS"):
            pool.acquire()
    finally:
        pool.release(slot)


def test_a_bad_value_names_its_variable_its_value_and_what_it_sets(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ENVHUB_SANDBOX_MAX_SLOTS", "lots")
    with pytest.raises(
        SettingsError, match="ENVHUB_SANDBOX_MAX_SLOTS='lots' is not a whole number; it sets how"
    ):
        settings()
    monkeypatch.setenv("ENVHUB_SANDBOX_MAX_SLOTS", "0")
    with pytest.raises(SettingsError, match="ENVHUB_SANDBOX_MAX_SLOTS='0' is not greater than or equal to 1"):
        settings()


def test_an_empty_variable_is_unset_and_tokens_stay_out_of_reprs(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ENVHUB_SANDBOX_SPARES", "")
    monkeypatch.setenv("ENVHUB_SERVE_TOKEN", "hunter2")
    now = settings()
    assert now.sandbox_spares == Settings.model_fields["sandbox_spares"].default
    assert now.serve_token is not None and now.serve_token.get_secret_value() == "hunter2"
    assert "hunter2" not in repr(now)
    assert variable("serve_token") == "ENVHUB_SERVE_TOKEN"


def test_the_documented_table_is_the_model() -> None:
    document = DOC.read_text()
    assert document == render(document), "docs/settings.md is stale: run python -m envhub.settings --write"


def test_every_envhub_variable_in_the_source_is_documented() -> None:
    """Core and plugins alike: a quoted `ENVHUB_*` name in the code is a variable someone may meet."""
    documented = set(re.findall(r"`(ENVHUB_[A-Z0-9_]+)`", DOC.read_text()))
    named = {
        (name, path.relative_to(ROOT).as_posix())
        for path in source_files()
        for name in re.findall(r"""["'](ENVHUB_[A-Z0-9_]+)["']""", path.read_text())
    }
    assert named, "the scan found nothing: it no longer reads the source"
    missing = sorted(f"{name} ({where})" for name, where in named if name not in documented)
    assert not missing, f"not in docs/settings.md: {', '.join(missing)}"


def test_the_core_reads_its_variables_only_through_the_settings() -> None:
    """A direct read is one the table and the model do not govern (and, at import time, one set too late)."""
    direct = re.compile(r"""(?:environ\.get|environ\.pop|environ\[|getenv)\(?\s*["']ENVHUB_""")
    readers = [
        path.relative_to(ROOT).as_posix()
        for path in sorted((ROOT / "envhub").rglob("*.py"))
        if direct.search(path.read_text())
    ]
    assert not readers, f"read ENVHUB_* from os.environ directly: {readers}"


def test_a_changed_variable_is_seen_by_the_next_read(monkeypatch: pytest.MonkeyPatch) -> None:
    """Parsed settings are reused only while every variable holds the same value."""
    monkeypatch.setenv("ENVHUB_SANDBOX_SPARES", "2")
    first = settings()
    assert first.sandbox_spares == 2 and settings() is first
    monkeypatch.setenv("ENVHUB_SANDBOX_SPARES", "3")
    assert settings().sandbox_spares == 3
    monkeypatch.setenv("ENVHUB_SANDBOX_SPARES", "three")
    with pytest.raises(SettingsError, match="ENVHUB_SANDBOX_SPARES='three'"):
        settings()
