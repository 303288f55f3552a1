"""`envhub.verifiers` was renamed `envhub.grading` (the `verifiers` library owns the name); the old name
still imports, says where to go, and hands out the very same objects."""

from __future__ import annotations

import importlib
import sys

import pytest

import envhub.grading


def test_the_old_name_warns_and_reexports_the_grading_package(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delitem(sys.modules, "envhub.verifiers", raising=False)
    with pytest.warns(DeprecationWarning, match="envhub.verifiers is now envhub.grading"):
        old = importlib.import_module("envhub.verifiers")
    assert old.grade_python is envhub.grading.grade_python
    assert old.HiddenTest is envhub.grading.HiddenTest
    assert set(old.__all__) == set(envhub.grading.__all__)
