"""Regenerate envhub_textarena/catalog.py and the entry points in pyproject.toml from textarena's registry.

Run after changing the pinned textarena version:

    .venv/bin/python envs/textarena/tools/generate_catalog.py
    .venv/bin/pip install -e envs/textarena     # so the new entry points are installed

Each game module is imported and reset in its own subprocess (some download data at import, one may
hang), with 1 to 6 players until one count is accepted; a game that cannot be imported or reset here
is listed as unavailable with the reason, read from its error.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
CATALOG = ROOT / "envhub_textarena" / "catalog.py"
PYPROJECT = ROOT / "pyproject.toml"
BEGIN, END = "# BEGIN generated entry points", "# END generated entry points"

PROBE = r"""
import contextlib, importlib, io, json, sys
from textarena.envs.registration import ENV_REGISTRY
entry_point, ids = sys.argv[1], sys.argv[2:]
found = {}
for game_id in ids:
    spec = ENV_REGISTRY[game_id]
    module, _, name = spec.entry_point.partition(":")
    try:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            cls = getattr(importlib.import_module(module), name)
    except BaseException as exc:
        found[game_id] = {"error": f"{type(exc).__name__}: {exc}"}
        continue
    errors = []
    for players in range(1, 7):
        try:
            with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
                cls(**spec.kwargs).reset(num_players=players, seed=0)
            found[game_id] = {"players": players}
            break
        except BaseException as exc:
            errors.append(f"{type(exc).__name__}: {exc}")
    else:
        found[game_id] = {"error": errors[0]}
print(json.dumps(found))
"""

# Games the probe accepts that still cannot run here, found by benchmarks/sweep.py: id -> reason.
BAD_MOVE = "textarena 0.7.4 crashes on an invalid move (its reason is passed as the reward: ValueError)"
FIRST_MOVE = "textarena 0.7.4 crashes on the first move (State.add_observation without observation_type)"
KNOWN_UNAVAILABLE: dict[str, str] = {
    "Countdown-v0": BAD_MOVE,
    "Cryptarithm-v0": BAD_MOVE,
    "CharacterConclave-v0": FIRST_MOVE,
    "CharacterConclave-v0-long": FIRST_MOVE,
    "CharacterConclave-v0-extreme": FIRST_MOVE,
}


def envhub_name(textarena_id: str) -> str:
    """'TicTacToe-v0-hard' -> 'tic-tac-toe-hard': envhub's lower-case, hyphenated names."""
    base, _, variant = textarena_id.partition("-v0")
    words = re.sub(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])", "-", base).lower()
    return re.sub(r"[^\w.-]", "-", words + variant)  # 'Taboo-v0-city/country': no '/' in a name


def game_ids() -> dict[str, list[str]]:
    """textarena's own game ids (its `-raw`/`-train` wrapper variants left out), by entry point."""
    from textarena.envs.registration import ENV_REGISTRY  # type: ignore[import-untyped]

    def variant(game_id: str) -> bool:
        return any(game_id.endswith(s) and game_id[: -len(s)] in ENV_REGISTRY for s in ("-raw", "-train"))

    by_module: dict[str, list[str]] = {}
    for game_id, spec in ENV_REGISTRY.items():
        if not variant(game_id):
            by_module.setdefault(str(spec.entry_point), []).append(game_id)
    return by_module


def probe(entry_point: str, ids: list[str]) -> dict[str, dict[str, Any]]:
    try:
        done = subprocess.run(
            [sys.executable, "-c", PROBE, entry_point, *ids], capture_output=True, text=True, timeout=120
        )
    except subprocess.TimeoutExpired:
        return {i: {"error": "import or reset took over 120 s"} for i in ids}
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines:
        return {i: {"error": f"the probe crashed: {done.stderr.strip()[-200:]}"} for i in ids}
    return json.loads(lines[-1])  # type: ignore[no-any-return]


def reason(error: str) -> tuple[str, str | None]:
    """(why the game cannot run, the Python version that would parse it) from its probe error."""
    if "OPENROUTER_API_KEY" in error or "OpenRouter" in error:
        return "needs an external LLM: it calls OpenRouter's API over the network (OPENROUTER_API_KEY)", None
    if "Resource" in error and "words" in error:
        return (
            "needs NLTK's 'words' corpus, which textarena downloads from the network at import "
            "(nltk.download); the wheel does not ship it",
            None,
        )
    if "f-string" in error:
        return "its module uses f-string syntax that needs Python 3.12 or newer", "3.12"
    if error.startswith("SyntaxError"):
        return (
            f"its module does not parse on Python {sys.version_info[0]}.{sys.version_info[1]}: {error}",
            None,
        )
    if error.startswith("FileNotFoundError"):
        missing = re.sub(r"\S*site-packages/", "", error.partition(": ")[2])
        return f"the textarena wheel lacks the game's data files ({missing})", None
    if "No module named 'gym'" in error or "babyai" in error:
        return "needs the gym and babyai_text packages, which textarena does not install", None
    if error.startswith("ModuleNotFoundError"):
        return f"registered by textarena, but its module is missing from the wheel ({error})", None
    return error.splitlines()[0][:200], None


def main() -> None:
    import textarena  # type: ignore[import-untyped]
    from envhub_textarena.games import attribute

    rows = []
    for entry_point, ids in game_ids().items():
        for game_id, found in probe(entry_point, ids).items():
            players = found.get("players")
            why, python = reason(found["error"]) if "error" in found else (None, None)
            why = KNOWN_UNAVAILABLE.get(game_id, why)
            rows.append((envhub_name(game_id), game_id, players or 0, why, python))
            print(f"{game_id:40} players={players} {why or ''}", flush=True)
    names = [r[0] for r in rows]
    clashes = {n for n in names if names.count(n) > 1}
    if clashes:
        raise SystemExit(f"two textarena ids map to one envhub name: {sorted(clashes)}")
    write_catalog(rows, textarena.__version__)
    write_entry_points({n: attribute(n) for n in sorted(names)})


def write_catalog(rows: list[tuple[str, str, int, str | None, str | None]], version: str) -> None:
    lines = [
        f'"""Every textarena {version} game: generated by tools/generate_catalog.py, do not edit by hand."""',
        "",
        "# ruff: noqa: E501",
        "from envhub_textarena.game_record import Game",
        "",
        f'TEXTARENA_VERSION = "{version}"',
        "",
        "GAMES: tuple[Game, ...] = (",
    ]
    for name, game_id, players, why, python in sorted(rows):
        lines.append(f"    Game({name!r}, {game_id!r}, {players}, {why!r}, {python!r}),")
    lines.append(")")
    CATALOG.write_text("\n".join(lines) + "\n")


def write_entry_points(attributes: dict[str, str]) -> None:
    text = PYPROJECT.read_text()
    head, _, rest = text.partition(BEGIN)
    _, _, tail = rest.partition(END)
    block = "\n".join(f'"textarena/{n}-v0" = "envhub_textarena.games:{a}"' for n, a in attributes.items())
    PYPROJECT.write_text(f"{head}{BEGIN}\n{block}\n{END}{tail}")


if __name__ == "__main__":
    main()
