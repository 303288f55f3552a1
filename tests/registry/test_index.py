"""registry.yaml: a malformed index names the file, the line and the field."""

from __future__ import annotations

from pathlib import Path

import pytest

from envhub.index import RegistryIndexError, load_index

GOOD_ENTRY = """\
    package: envhub-games
    entry_point: envhub_games.arithmetic:Arithmetic
    versions: [0]
    description: Arithmetic.
"""


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "registry.yaml"
    path.write_text(text)
    return path


def test_the_hubs_own_index_is_valid() -> None:
    index = load_index(Path(__file__).parents[2] / "registry.yaml")
    assert "arithmetic-v0" in index.ids()


def test_missing_field_names_file_line_and_field(tmp_path: Path) -> None:
    path = write(
        tmp_path, f"schema: 1\nenvs:\n  good:\n{GOOD_ENTRY}  bad:\n    package: x\n    versions: [0]\n"
    )
    with pytest.raises(RegistryIndexError) as caught:
        load_index(path)
    lines = str(caught.value).splitlines()
    assert f"{path}:8: envs.bad.entry_point: Field required" in lines[0]
    assert "(each env needs: package, entry_point, versions" in lines[0]
    assert any(line.startswith(f"{path}:8: envs.bad.description: Field required") for line in lines)


def test_wrong_type_points_at_the_value_line(tmp_path: Path) -> None:
    text = "schema: 1\nenvs:\n  good:\n" + GOOD_ENTRY.replace("versions: [0]", "versions: [zero]")
    with pytest.raises(
        RegistryIndexError, match=r":6: envs.good.versions.0: Input should be a valid integer"
    ):
        load_index(write(tmp_path, text))


def test_unknown_field_is_rejected_with_the_known_fields(tmp_path: Path) -> None:
    text = "schema: 1\nenvs:\n  good:\n" + GOOD_ENTRY + "    sandbox: local\n"
    with pytest.raises(
        RegistryIndexError, match=r":8: envs.good.sandbox: Extra inputs .*known fields: package"
    ):
        load_index(write(tmp_path, text))


def test_bad_entry_point(tmp_path: Path) -> None:
    text = "schema: 1\nenvs:\n  good:\n" + GOOD_ENTRY.replace("arithmetic:Arithmetic", "arithmetic")
    with pytest.raises(RegistryIndexError, match=r":5: envs\.good\.entry_point: String should match pattern"):
        load_index(write(tmp_path, text))


def test_versioned_key_is_rejected_at_its_line(tmp_path: Path) -> None:
    text = "schema: 1\nenvs:\n  good:\n" + GOOD_ENTRY + "  other-v1:\n" + GOOD_ENTRY
    with pytest.raises(
        RegistryIndexError, match=r":8: envs.other-v1.\[key\]: .*index keys are unversioned names"
    ):
        load_index(write(tmp_path, text))


def test_unknown_schema_version(tmp_path: Path) -> None:
    with pytest.raises(RegistryIndexError, match=r":1: schema: Input should be 1"):
        load_index(write(tmp_path, "schema: 2\nenvs: {}\n"))


def test_invalid_yaml_names_the_line(tmp_path: Path) -> None:
    with pytest.raises(RegistryIndexError, match=r"registry.yaml:4: not valid YAML: expected ',' or ']'"):
        load_index(write(tmp_path, "schema: 1\nenvs:\n  a: [1, 2\n  b: 3\n"))


def test_not_a_mapping(tmp_path: Path) -> None:
    with pytest.raises(
        RegistryIndexError, match=r":1: the index must be a mapping with keys 'schema' and 'envs'"
    ):
        load_index(write(tmp_path, "- just\n- a list\n"))


def test_unreadable_file(tmp_path: Path) -> None:
    with pytest.raises(RegistryIndexError, match="cannot read the registry index"):
        load_index(tmp_path / "missing.yaml")
