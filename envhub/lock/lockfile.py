"""The lockfile: one TOML table per env id with each component's hash and parts, and checking against it.

    version = 2

    [envs."arithmetic-v0"]
    hash = "sha256:..."            # the combined hash every episode of this id carries
    options = "{}"                  # the env options it was locked with (they choose the sandbox)

    [envs."arithmetic-v0".code]
    hash = "sha256:..."

    [envs."arithmetic-v0".code.parts]
    "envhub_games/arithmetic.py" = "sha256:..."

Keys and tables are written sorted, so one set of files always gives the same bytes.
"""

from __future__ import annotations

import json
import tomllib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from envhub.lock.components import COMPONENTS, Component, LockEntry, LockError, lock_entry
from envhub.registration import is_external, registry, scheme_of

LOCKFILE_VERSION = 2
"""2: envhub-core and the env's whole distribution are pinned (1 pinned only the grading packages)."""
HEADER = (
    "# What each env id runs on, written by `envhub lock`. `envhub rollout ID --locked FILE` refuses to\n"
    "# run when anything here differs; after an intended change, lock again.\n"
)
MAX_NAMED_PARTS = 5
"""How many changed parts of one component a refusal names before it says how many more."""


class LockMismatch(ValueError):
    """An env id no longer runs on what the lockfile pins."""


@dataclass(frozen=True)
class Locked:
    """One id's table in a lockfile: its components and the options it was locked with."""

    entry: LockEntry
    options: dict[str, Any]


def current(env_id: str, env_kwargs: Mapping[str, Any] | None = None, *, reuse: bool = False) -> LockEntry:
    """What `env_id` (with these env options) runs on now, read from disk; with `reuse`, a package this
    process has read already is not read again (`envhub lock` of many ids sharing envhub and a plugin)."""
    _refuse_external(env_id)
    return lock_entry(registry.resolve(env_id), registry.index, dict(env_kwargs or {}), reuse=reuse)


def _refuse_external(env_id: str) -> None:
    """A served id or a format id is made from files this machine's registry does not hold."""
    if scheme_of(env_id) is not None:
        raise LockError(
            f"{env_id} is served by another machine, whose files cannot be read from here: "
            "run `envhub lock ID` on the machine that serves it"
        )
    if is_external(env_id):
        raise LockError(
            f"{env_id} is made by a format plugin from outside files, which envhub cannot lock yet: "
            "lock the ids of registered plugins, or pin the files yourself (a commit of the task folder)"
        )


def dumps(entries: Iterable[Locked]) -> str:
    """The lockfile's text: TOML, keys sorted, one table per id and component."""
    lines = [HEADER, f"version = {LOCKFILE_VERSION}\n"]
    for locked in sorted(entries, key=lambda e: e.entry.env_id):
        table = f"envs.{_string(locked.entry.env_id)}"
        lines.append(f"\n[{table}]\nhash = {_string(locked.entry.hash)}\n")
        lines.append(f"options = {_string(json.dumps(locked.options, sort_keys=True, default=str))}\n")
        for name in COMPONENTS:
            component = locked.entry.components[name]
            lines.append(f"\n[{table}.{name}]\nhash = {_string(component.hash)}\n")
            lines.append(f"\n[{table}.{name}.parts]\n")
            lines.extend(
                f"{_string(part)} = {_string(value)}\n" for part, value in sorted(component.parts.items())
            )
    return "".join(lines)


def _string(value: str) -> str:
    """A TOML basic string: JSON's escapes are TOML's, and DEL, which JSON leaves as it is, is escaped."""
    return json.dumps(value, ensure_ascii=False).replace("\x7f", "\\u007f")


def read(path: Path) -> dict[str, Locked]:
    """The lockfile at `path`, by env id; a malformed or hand-edited one is refused, saying which."""
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as exc:
        raise LockError(f"{path} is not a valid lockfile ({exc}); write it again with `envhub lock`") from exc
    if data.get("version") != LOCKFILE_VERSION:
        raise LockError(
            f"{path} is lockfile version {data.get('version')!r}; this envhub reads version "
            f"{LOCKFILE_VERSION}: write it again with `envhub lock`"
        )
    return {env_id: _locked(path, env_id, table) for env_id, table in dict(data.get("envs", {})).items()}


def _locked(path: Path, env_id: str, table: Mapping[str, Any]) -> Locked:
    try:
        components = {name: Component(dict(table[name]["parts"])) for name in COMPONENTS}
        entry = LockEntry(env_id=env_id, components=components)
        options = json.loads(table.get("options", "{}"))
        stated = {name: table[name]["hash"] for name in COMPONENTS} | {"combined": table["hash"]}
    except (KeyError, TypeError, json.JSONDecodeError) as exc:
        raise LockError(f"{path}: the table of {env_id} is incomplete ({exc}); lock it again") from exc
    computed = {name: c.hash for name, c in components.items()} | {"combined": entry.hash}
    edited = sorted(name for name in stated if stated[name] != computed[name])
    if edited:
        raise LockError(
            f"{path}: the {' and '.join(edited)} hashes of {env_id} do not match its parts "
            f"(edited by hand?); lock it again with `envhub lock {env_id}`"
        )
    return Locked(entry, options)


def check(path: Path, env_id: str, env_kwargs: Mapping[str, Any] | None = None) -> LockEntry:
    """Refuse (LockMismatch) unless `env_id` runs now on exactly what the lockfile at `path` pins."""
    lockfile = read(path)
    _refuse_external(env_id)
    resolved = registry.resolve(env_id).id
    locked = lockfile.get(resolved)
    if locked is None:
        listed = ", ".join(sorted(lockfile)) or "no ids"
        raise LockMismatch(
            f"{resolved} is not in {path} (it locks {listed}); add it with "
            f"`envhub lock {' '.join(sorted({*lockfile, resolved}))} --out {path}`"
        )
    now = current(resolved, env_kwargs)
    changes = differences(locked.entry, now)
    if changes:
        options = "".join(f" --kwarg {k}={json.dumps(v)}" for k, v in sorted((env_kwargs or {}).items()))
        raise LockMismatch(
            f"{resolved} no longer runs on what {path} pins:\n"
            + "\n".join(f"  {line}" for line in changes)
            + f"\nre-lock with `envhub lock {' '.join(sorted(lockfile))}{options} --out {path}` "
            "if the change is intended"
        )
    return now


def differences(locked: LockEntry, now: LockEntry) -> list[str]:
    """One line per changed component, naming its changed parts (files, image id, entry point)."""
    lines = []
    for name in COMPONENTS:
        was, is_ = locked.components[name].parts, now.components[name].parts
        if was == is_:
            continue
        changed = [_change(part, was.get(part), is_.get(part)) for part in sorted(was.keys() | is_.keys())]
        named = [c for c in changed if c is not None]
        more = f", and {len(named) - MAX_NAMED_PARTS} more" if len(named) > MAX_NAMED_PARTS else ""
        lines.append(f"{name} changed: {'; '.join(named[:MAX_NAMED_PARTS])}{more}")
    return lines


def _change(part: str, was: str | None, now: str | None) -> str | None:
    if was == now:
        return None
    if was is None:
        return f"{part} added"
    if now is None:
        return f"{part} removed"
    if was.startswith("sha256:") and now.startswith("sha256:") and "image id" not in part:
        return f"{part} changed"
    return f"{part} was {_short(was)}, now {_short(now)}"


def _short(value: str, limit: int = 80) -> str:
    return value if len(value) <= limit else value[: limit - 1] + "…"
