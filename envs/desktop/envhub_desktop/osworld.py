"""OSWorld-style task files played on this desktop: `desktop-osworld-v0` with `tasks=<a JSON file or a
folder of them>`, so users bring their own tasks in the format OSWorld's benchmark uses.

A task file is OSWorld's JSON: `id`, `instruction` (the goal), `config` (set-up steps) and `evaluator`
(`func`, `result`, `expected`, `options`; lists of them with `conj`). This loader reads a documented
subset and refuses anything else when the file loads, naming the field and what is supported:

- Paths: OSWorld's VM user home maps to the sandbox's working folder, `/home/user/X` (or `~/X`) ->
  `/work/X`; a path outside that home is refused (nothing else of the VM exists here).
- `config` steps: `download` (`files: [{url, path}]`) and `upload_file` (`files: [{local_path, path}]`)
  copy a LOCAL file, relative to the task's JSON file and inside the task folder (symlinks resolved), into
  the sandbox (a URL is refused: the sandbox has no network and an episode must not change with a
  server; download the file and point to it);
  `open` (`path`) starts the app for the file: .txt and other text Mousepad, .ods/.fods/.xlsx/.xls/.csv
  Calc, .odt/.fodt/.docx/.doc Writer, a folder PCManFM; `launch` (`command`) starts one of the
  desktop's apps (mousepad, soffice/libreoffice with --calc or --writer, xterm, pcmanfm) on at most one
  mapped path (xterm on none; no document: an untitled one), never through a shell; `sleep` is accepted
  and adds nothing (the episode starts once the app's window shows and the screen is still, which is
  what OSWorld's sleeps wait for). Exactly one `open` or
  `launch`: an episode starts on one app. `execute`/`command` are refused: OSWorld runs them as the VM's
  user with its tools (python, pip, gsettings, sudo), which this sandbox does not have and a task file
  should not need; put the files they would make into `upload_file` steps instead.
- `evaluator`: `result` is `vm_file` (`path`: the file the app saves, read from the sandbox);
  `expected` is `rule` (`rules`) or `cloud_file` from a local path; `func` is one of
  `envhub_desktop.osworld_eval.METRICS`; `postconfig` may hold only `sleep` steps (nothing is run after
  the episode: the agent saves the file itself). `infeasible` tasks are refused (no FAIL reward here).
- `envhub_oracle` (an envhub addition, optional): a list of pyautogui strings (OSWorld's action form,
  parsed by `envhub_desktop.pyautogui`), one per turn, that solve the task; OSWorld tasks ship none, so
  without it the oracle policy only calls done().

OSWorld tasks are fixed, not seeded: the seed picks which of the loaded tasks is played.
"""

from __future__ import annotations

import json
import posixpath
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import envhub
from envhub.messages import Message, ToolCall
from envhub_desktop.env import DesktopEnv
from envhub_desktop.office import OFFICE_OPTIONS
from envhub_desktop.osworld_eval import Expected, Judge, UnsupportedEvaluator, metric
from envhub_desktop.pyautogui import UnsupportedAction, parse
from envhub_desktop.tasks.base import Episode, Saved, Task
from envhub_desktop.tasks.files import FM_CONFIG
from envhub_desktop.tasks.terminal import WINDOW, XTERM
from envhub_desktop.tasks.writer import writer

VM_HOME = "/home/user"
SANDBOX_HOME = "/work"
MAX_TASK_FILE_BYTES = 16 * 1024 * 1024
"""The most a file copied in by a set-up step may hold (the sandbox's disk is 512 MiB)."""

APPS_BY_SUFFIX: dict[str, str] = {
    **dict.fromkeys((".txt", ".md", ".log", ".py", ".json", ".xml", ".html", ".ini", ".conf"), "mousepad"),
    **dict.fromkeys((".ods", ".fods", ".xlsx", ".xls", ".csv"), "libreoffice-calc"),
    **dict.fromkeys((".odt", ".fodt", ".docx", ".doc"), "libreoffice-writer"),
}
"""`open`: the app for a file, by its suffix (a folder opens in PCManFM)."""
LAUNCHABLE = ("mousepad", "soffice", "libreoffice", "xterm", "pcmanfm")
"""`launch`: the desktop's apps a task may start."""
CSV_FILTER = "--infilter=Text - txt - csv (StarCalc):44,34,76,1"
"""Opens a .csv as comma-separated UTF-8 without Calc's Text Import dialog (OSWorld's VM does the same
by its own LibreOffice settings; a dialog first would make the start depend on the dialog's defaults)."""


class OsworldTaskError(ValueError):
    """A task file this loader cannot play; the message names the file, the field and the fix."""


@dataclass(frozen=True)
class OsworldTask(Task):
    oracle_code: tuple[str, ...] = ()
    """The task's `envhub_oracle`: pyautogui strings, one per turn."""
    source: str = ""
    """The JSON file it was read from."""


@dataclass
class _Setup:
    """What the `config` steps build up: the sandbox's files, folders, and the one app to start."""

    folder: Path
    """The task file's folder: local paths are relative to it."""
    root: Path
    """The folder given to `load_tasks` (or the task file's own): no local file may lie outside it."""
    files: dict[str, bytes] = field(default_factory=dict)
    dirs: list[str] = field(default_factory=list)
    app: tuple[str, list[str], str] | None = None
    """(app name, argv, window title regex)."""


def sandbox_path(path: Any, where: str) -> str:
    """OSWorld's VM path as the sandbox's: `/home/user/X` or `~/X` -> `/work/X`."""
    if not isinstance(path, str) or not path:
        raise OsworldTaskError(f"{where}: a path is a non-empty string, got {path!r}")
    full = VM_HOME + path[1:] if path == "~" or path.startswith("~/") else path
    normal = posixpath.normpath(full)
    if normal != VM_HOME and not normal.startswith(VM_HOME + "/"):
        raise OsworldTaskError(
            f"{where}: {path!r} is outside the VM user's home {VM_HOME}; only paths under it exist here "
            f"(mapped to the sandbox's {SANDBOX_HOME})"
        )
    return SANDBOX_HOME + normal[len(VM_HOME) :]


def _local_file(setup: _Setup, name: Any, where: str) -> bytes:
    """A file a step copies in, from the task's folder; a URL is refused naming the fix."""
    if not isinstance(name, str) or not name:
        raise OsworldTaskError(f"{where}: a local file path is a non-empty string, got {name!r}")
    if re.match(r"^[A-Za-z][A-Za-z0-9+.-]+://", name):
        raise OsworldTaskError(
            f"{where}: {name!r} is a URL; envhub plays tasks from local files only (the sandbox has no "
            "network, and an episode must not change with a server): download the file next to the task's "
            "JSON and give its path relative to that file"
        )
    local = (setup.folder / name).resolve()
    if not local.is_relative_to(setup.root.resolve()):
        raise OsworldTaskError(
            f"{where}: {name!r} lies outside the task folder {setup.root} (symbolic links followed); copy "
            "the file into that folder: a task set may copy in only its own files"
        )
    try:
        if local.stat().st_size > MAX_TASK_FILE_BYTES:
            raise OsworldTaskError(f"{where}: {local} is over {MAX_TASK_FILE_BYTES} bytes")
        return local.read_bytes()
    except OSError as exc:
        raise OsworldTaskError(f"{where}: cannot read {local}: {exc.strerror or exc}") from None


def _copy_step(setup: _Setup, params: dict[str, Any], kind: str, where: str) -> None:
    source_key = "url" if kind == "download" else "local_path"
    files = params.get("files")
    if not isinstance(files, list) or not files:
        raise OsworldTaskError(f"{where}: {kind} takes files: [{{{source_key}, path}}, ...]")
    for n, entry in enumerate(files):
        here = f"{where}.files[{n}]"
        if not isinstance(entry, dict):
            raise OsworldTaskError(f"{here}: an object {{{source_key}, path}}, got {entry!r}")
        target = sandbox_path(entry.get("path"), f"{here}.path")
        setup.files[target] = _local_file(setup, entry.get(source_key), f"{here}.{source_key}")


def _is_folder(setup: _Setup, path: str) -> bool:
    """The sandbox's home, a folder a step made, or one holding a copied-in file."""
    return path == SANDBOX_HOME or path in setup.dirs or any(f.startswith(path + "/") for f in setup.files)


def _opener(app: str, path: str) -> tuple[str, list[str], str]:
    """(app, argv, window regex) that open `path` in `app`, as the desktop's families start them."""
    title = re.escape(posixpath.basename(path))
    if app == "pcmanfm":
        return app, ["pcmanfm", "--no-desktop", path], f"^{title}$"
    if app == "mousepad":
        return app, ["mousepad", path], title
    if app == "libreoffice-writer":
        return app, writer(path), title
    extra = [CSV_FILTER] if path.lower().endswith(".csv") else []
    return app, ["soffice", "--calc", *OFFICE_OPTIONS, *extra, path], title


def _app_for(setup: _Setup, path: str, where: str) -> tuple[str, list[str], str]:
    """`open`: the app for a sandbox path, as OSWorld's VM opens it with its default apps."""
    if _is_folder(setup, path):
        return _opener("pcmanfm", path)
    if path not in setup.files:
        raise OsworldTaskError(
            f"{where}: {path} is not put there by an earlier download or upload_file step (the sandbox "
            "starts empty)"
        )
    suffix = posixpath.splitext(path)[1].lower()
    if suffix not in APPS_BY_SUFFIX:
        raise OsworldTaskError(
            f"{where}: no app here opens {suffix or 'a file without a suffix'}; the supported are "
            f"{', '.join(sorted(APPS_BY_SUFFIX))} and folders"
        )
    return _opener(APPS_BY_SUFFIX[suffix], path)


LAUNCH_FLAGS = {"soffice": {"--calc", "--writer"}, "libreoffice": {"--calc", "--writer"}}
"""The options a launched app may take (others take one path, or none)."""


def _launch(setup: _Setup, params: dict[str, Any], where: str) -> tuple[str, list[str], str]:
    """`launch`: one of the desktop's apps on at most one mapped path; never through a shell."""
    command, shell = params.get("command"), params.get("shell", False)
    if shell:
        raise OsworldTaskError(f"{where}: shell=true is refused; give the command as a list of arguments")
    argv = shlex.split(command) if isinstance(command, str) else command
    if not isinstance(argv, list) or not argv or not all(isinstance(a, str) for a in argv):
        raise OsworldTaskError(f"{where}: command is a list of strings, got {command!r}")
    program = posixpath.basename(argv[0])
    if program not in LAUNCHABLE:
        raise OsworldTaskError(
            f"{where}: {argv[0]!r} is not one of the desktop's apps; launch one of {', '.join(LAUNCHABLE)}"
        )
    flags = [a for a in argv[1:] if a.startswith("-")]
    paths = [sandbox_path(a, f"{where}.command") for a in argv[1:] if not a.startswith("-")]
    allowed = LAUNCH_FLAGS.get(program, set())
    if set(flags) - allowed or len(flags) > 1 or len(paths) > (program != "xterm"):
        takes = f"one of {' or '.join(sorted(allowed))} and " if allowed else ""
        raise OsworldTaskError(
            f"{where}: {argv[1:]} is not supported; {program} takes {takes}"
            + ("no path (it starts in the sandbox's home)" if program == "xterm" else "at most one path")
        )
    if program == "xterm":
        return "xterm", list(XTERM), WINDOW
    path = paths[0] if paths else SANDBOX_HOME if program == "pcmanfm" else None
    if path is None:  # an app with no document: an untitled one
        app = (
            "libreoffice-writer"
            if flags == ["--writer"]
            else "mousepad"
            if program == "mousepad"
            else "libreoffice-calc"
        )
        argv = ["mousepad"] if app == "mousepad" else ["soffice", "--" + app.split("-")[1], *OFFICE_OPTIONS]
        return app, argv, "Untitled"
    if not (path in setup.files or _is_folder(setup, path)):
        raise OsworldTaskError(
            f"{where}: {path} is not put there by an earlier step (the sandbox starts empty)"
        )
    if program == "pcmanfm":
        return _opener("pcmanfm", path)
    if program == "mousepad":
        return _opener("mousepad", path)
    wanted = {"--writer": "libreoffice-writer", "--calc": "libreoffice-calc"}
    by_suffix = APPS_BY_SUFFIX.get(posixpath.splitext(path)[1].lower(), "libreoffice-calc")
    return _opener(wanted[flags[0]] if flags else by_suffix, path)


SETUP_STEPS = ("download", "upload_file", "open", "launch", "sleep")


def _setup(config: Any, folder: Path, root: Path) -> _Setup:
    """The sandbox's starting state from OSWorld's `config` steps (see the module's docstring)."""
    if not isinstance(config, list):
        raise OsworldTaskError(f"config is a list of set-up steps, got {type(config).__name__}")
    setup = _Setup(folder, root)
    for n, step in enumerate(config):
        where = f"config[{n}]"
        kind = step.get("type") if isinstance(step, dict) else None
        params = step.get("parameters", {}) if isinstance(step, dict) else None
        if not isinstance(params, dict):
            raise OsworldTaskError(f"{where}: a step is {{type, parameters}}, got {step!r}")
        if kind in ("execute", "command"):
            raise OsworldTaskError(
                f"{where}: {kind} steps are refused: OSWorld runs them in its VM with tools this sandbox has "
                "not (python packages, gsettings, sudo); put the files they would make into upload_file "
                f"steps; supported steps: {', '.join(SETUP_STEPS)}"
            )
        if kind not in SETUP_STEPS:
            raise OsworldTaskError(
                f"{where}: step type {kind!r} is not supported; the supported are {', '.join(SETUP_STEPS)}"
            )
        if kind in ("download", "upload_file"):
            _copy_step(setup, params, kind, where)
        elif kind == "sleep":
            seconds = params.get("seconds")
            if not isinstance(seconds, int | float) or isinstance(seconds, bool) or not 0 <= seconds <= 60:
                raise OsworldTaskError(f"{where}: sleep takes seconds, 0 to 60, got {seconds!r}")
        else:
            if setup.app is not None:
                raise OsworldTaskError(
                    f"{where}: a second {kind} step; an episode here starts on one app: keep one open or "
                    "launch step"
                )
            if kind == "open":
                setup.app = _app_for(setup, sandbox_path(params.get("path"), f"{where}.path"), where)
            else:
                setup.app = _launch(setup, params, where)
    if setup.app is None:
        raise OsworldTaskError("config has no open or launch step; an episode starts on one app's window")
    if setup.app[0] == "pcmanfm":  # its settings, as the files family seeds them (no trash, no status bar)
        setup.files.update({path: content.encode() for path, content in FM_CONFIG.items()})
    return setup


def _listed(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


def _expected(spec: Any, folder: Path, root: Path, where: str) -> Expected | None:
    if spec is None:
        return None
    kind = spec.get("type") if isinstance(spec, dict) else None
    if kind == "rule":
        return Expected(rules=spec.get("rules"))
    if kind == "cloud_file":
        if spec.get("multi"):
            raise OsworldTaskError(f"{where}: multi=true is not supported; give one file")
        setup = _Setup(folder, root)
        name = spec.get("path")
        return Expected(data=_local_file(setup, name, f"{where}.path"), name=str(name))
    raise OsworldTaskError(
        f"{where}: expected type {kind!r} is not supported; the supported are rule and cloud_file (a "
        "local path)"
    )


def _result(spec: Any, where: str) -> str:
    kind = spec.get("type") if isinstance(spec, dict) else None
    if kind != "vm_file":
        raise OsworldTaskError(
            f"{where}: result type {kind!r} is not supported; the supported is vm_file (the file an app "
            "saves)"
        )
    if spec.get("multi"):
        raise OsworldTaskError(f"{where}: multi=true is not supported; give one file")
    return sandbox_path(spec.get("path"), f"{where}.path")


def _evaluator(spec: Any, folder: Path, root: Path) -> tuple[tuple[str, ...], Any]:
    """The files to read and the checker, from OSWorld's `evaluator`."""
    if not isinstance(spec, dict):
        raise OsworldTaskError("evaluator is an object {func, result, expected, options}")
    post = spec.get("postconfig", [])
    if not isinstance(post, list) or any(not isinstance(s, dict) or s.get("type") != "sleep" for s in post):
        raise OsworldTaskError(
            "evaluator.postconfig: only sleep steps are accepted; nothing runs after the episode here (the "
            "agent saves the file itself, as the goal should say)"
        )
    funcs = _listed(spec.get("func"))
    if "infeasible" in funcs:
        raise OsworldTaskError("evaluator.func infeasible is not supported: this env has no reward for FAIL")
    n = len(funcs)
    results, expecteds = _listed(spec.get("result")), _listed(spec.get("expected"))
    options = _listed(spec.get("options", [{}] * n if n > 1 else {}))
    if n > 1 and not all(isinstance(v, list) for v in (spec.get("result"), spec.get("expected", []))):
        raise OsworldTaskError(
            "evaluator: with a list of funcs, result and expected are lists of the same length"
        )
    if spec.get("expected") is None:
        expecteds = [None] * n
    if not (len(results) == len(expecteds) == len(options) == n):
        raise OsworldTaskError(f"evaluator: {n} funcs need {n} results, expecteds and options")
    conj = spec.get("conj", "and")
    if conj not in ("and", "or"):
        raise OsworldTaskError(f"evaluator.conj is and or or, got {conj!r}")
    paths: list[str] = []
    judges: list[tuple[str, Judge]] = []
    for i, func in enumerate(funcs):
        where = f"evaluator.result[{i}]" if n > 1 else "evaluator.result"
        path = _result(results[i], where)
        try:
            judge = metric(
                func, _expected(expecteds[i], folder, root, where.replace("result", "expected")), options[i]
            )
        except UnsupportedEvaluator as exc:
            raise OsworldTaskError(str(exc)) from None
        paths.append(path)
        judges.append((path, judge))

    def check(saved: Saved) -> bool:
        scores = [judge(saved.files.get(path), posixpath.basename(path)) for path, judge in judges]
        return all(scores) if conj == "and" else any(scores)

    return tuple(dict.fromkeys(paths)), check


def _oracle(value: Any) -> tuple[str, ...]:
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(s, str) for s in value):
        raise OsworldTaskError("envhub_oracle is a list of pyautogui strings, one per turn")
    for n, code in enumerate(value):
        try:
            parse(code)
        except UnsupportedAction as exc:
            raise OsworldTaskError(f"envhub_oracle[{n}]: {exc}") from None
    return tuple(value)


def load_task(path: str | Path, *, root: str | Path | None = None) -> OsworldTask:
    """One OSWorld-style task file, checked whole now: an error names the file and the field. Its
    local files must lie in `root` (default: the file's own folder)."""
    file = Path(path)
    try:
        data = json.loads(file.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise OsworldTaskError(f"{file}: not a readable JSON task file: {exc}") from None
    try:
        return _task(data, file, Path(root) if root is not None else file.parent)
    except OsworldTaskError as exc:
        raise OsworldTaskError(f"{file}: {exc}") from None


def _task(data: Any, file: Path, root: Path) -> OsworldTask:
    if not isinstance(data, dict):
        raise OsworldTaskError("a task file holds one JSON object")
    instruction = data.get("instruction")
    if not isinstance(instruction, str) or not instruction.strip():
        raise OsworldTaskError("instruction (the goal) is a non-empty string")
    name = str(data.get("id") or file.stem)
    setup = _setup(data.get("config", []), file.parent, root)
    reads, check = _evaluator(data.get("evaluator"), file.parent, root)
    oracle = _oracle(data.get("envhub_oracle"))
    app, argv, window = setup.app  # type: ignore[misc]  # _setup refuses a task without one
    episode = Episode(
        goal=instruction,
        files=dict(setup.files),
        app=argv,
        window=window,
        reads=reads,
        check=check,
        oracle=[action for code in oracle for action in parse(code).actions],
        dirs=tuple(setup.dirs),
    )
    summary = instruction if len(instruction) <= 80 else instruction[:77] + "..."
    return OsworldTask(name, app, summary, lambda rng: episode, oracle_code=oracle, source=str(file))


def load_tasks(path: str | Path) -> tuple[OsworldTask, ...]:
    """A task file, or every `*.json` under a folder (OSWorld keeps one folder per app); ids unique."""
    root = Path(path)
    if not root.exists():
        raise OsworldTaskError(f"{root}: no such file or folder of OSWorld-style task files")
    files = sorted(root.rglob("*.json")) if root.is_dir() else [root]
    if not files:
        raise OsworldTaskError(f"{root}: no *.json task files in this folder")
    tasks = [load_task(file, root=root if root.is_dir() else root.parent) for file in files]
    seen: dict[str, str] = {}
    for task in tasks:
        if task.name in seen:
            raise OsworldTaskError(f"task id {task.name!r} is in both {seen[task.name]} and {task.source}")
        seen[task.name] = task.source
    return tuple(tasks)


class OsworldDesktopEnv(DesktopEnv):
    """`desktop-osworld-v0`: the user's OSWorld-style tasks (`tasks=PATH`) on this desktop."""

    def __init__(self, task: str | None = None, *, tasks: str | None = None, **options: Any) -> None:
        if tasks is None:
            raise ValueError(
                "desktop-osworld-v0 plays OSWorld-style task files: give tasks=PATH (a task's JSON file or a "
                "folder of them), e.g. envhub play desktop-osworld --kwarg tasks=DIR --kwarg task=ID"
            )
        self.osworld_tasks = {t.name: t for t in load_tasks(tasks)}
        super().__init__(task, **options)

    @property
    def tasks(self) -> dict[str, Task]:
        return dict(self.osworld_tasks)

    def reference_action(self, messages: list[Message]) -> envhub.Action:
        """The task's `envhub_oracle` strings, each one turn of the pyautogui tool, then done()."""
        taken = sum(1 for m in messages if m.role == "assistant")
        steps = self.osworld_tasks[self.drawn].oracle_code
        call = (
            ToolCall.create("pyautogui", {"code": steps[taken]}, id=f"call_{taken}")
            if taken < len(steps)
            else ToolCall.create("done", {}, id=f"call_{taken}")
        )
        return Message(role="assistant", tool_calls=[call])
