"""The tape's hooks in the sandboxes: each backend's calls and its Python worker's snippets, recorded
with the running episode or answered from its recording (`envhub.record.tape`).

`TapeCalls` is an interceptor of every sandbox's calls (`envhub.sandbox.intercept`, the one way
anything is put around them), in force while the running task has a tape: each backend's own `exec`,
`write_file`, `read_file`, `upload_dir`, `download` and `report` are recorded without the backend
knowing, and its `create` gives a stand-in (`envhub.record.stand_in.ReplaySandbox`) while replaying: no
sandbox starts. Nothing changes a call when no tape is active. Duck-typed rather than a subclass of
`Interceptor`, so that this module imports nothing of `envhub.sandbox` before the sandbox's base does.
"""

from __future__ import annotations

import hashlib
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from envhub.record.calls import Json
from envhub.record.tape import blob, current, inside, kept, unblob

if TYPE_CHECKING:
    from envhub.sandbox.python_repl import PythonWorker

RECORDED = ("exec", "write_file", "read_file", "upload_dir", "download", "report")


class TapeCalls:
    """The tape's interceptor (`envhub.sandbox.intercept.Interceptor`): records each of `RECORDED` with
    the running episode, or answers it from the recording; while replaying, `create` gives a stand-in."""

    async def around(
        self, sandbox: Any, name: str, arguments: dict[str, Any], call: Callable[[], Awaitable[Any]]
    ) -> Any:
        tape = current()
        if tape is None or name not in RECORDED:
            return await call()
        given = _input(name, tape.redact(arguments))
        if tape.replaying:
            recorded = tape.answer("sandbox", name, given)
            _raise_recorded(recorded.error)
            return _replayed(name, recorded.output, arguments)
        with inside():
            try:
                result = await call()
            except Exception as exc:
                tape.record("sandbox", name, given, error=exc)
                raise
        tape.record("sandbox", name, given, _output(name, result, arguments))
        return result

    def around_report(self, sandbox: Any, call: Callable[[], Any]) -> Any:
        tape = current()
        if tape is None:
            return call()
        if tape.replaying:
            from envhub.sandbox.policy import IsolationReport

            return IsolationReport.model_validate(tape.answer("sandbox", "report", None).output)
        result = call()
        tape.record("sandbox", "report", None, result.model_dump(mode="json"))
        return result

    async def around_create(self, cls: type, policy: Any, call: Callable[[], Awaitable[Any]]) -> Any:
        tape = current()
        if tape is not None and tape.replaying:
            return tape.stand_in(policy, getattr(cls, "backend", "replay"))
        return await call()


_TAPE_CALLS = TapeCalls()


def tape_calls() -> TapeCalls | None:
    """The interceptor while this task records or replays an episode (and no recorded call is running)."""
    return None if current() is None else _TAPE_CALLS


def _input(name: str, arguments: dict[str, Any]) -> Json:
    """What identifies a call. Host paths (`local_dir`, `local_dest`) are left out: they are temporary
    folders that differ from run to run; what was uploaded is identified by its content."""
    if name == "upload_dir":
        return {"dest": arguments["dest"], "tree": _tree_digest(Path(arguments["local_dir"]))}
    if name == "download":
        return {"path": arguments["path"]}
    return kept(arguments)


def _output(name: str, result: Any, arguments: dict[str, Any]) -> Json:
    if name == "exec":
        return result.model_dump(mode="json")
    if name == "read_file":
        return blob(result)
    if name == "download":
        return _tree(Path(arguments["local_dest"]))
    return None


def _replayed(name: str, output: Json, arguments: dict[str, Any]) -> Any:
    if name == "exec":
        from envhub.sandbox.results import ExecResult

        return ExecResult.model_validate(output)
    if name == "read_file":
        return unblob(output, f"the file {arguments['path']}")
    if name == "download":
        _write_tree(Path(arguments["local_dest"]), output)
    return None


def _tree_digest(root: Path) -> str:
    digest = hashlib.sha256()
    for path in sorted(p for p in root.rglob("*") if p.is_file() and not p.is_symlink()):
        digest.update(path.relative_to(root).as_posix().encode() + b"\0")
        digest.update(hashlib.sha256(path.read_bytes()).digest())
    return digest.hexdigest()


def _tree(dest: Path) -> Json:
    """What a download left at `dest`: one file, or a folder's files by relative path."""
    if dest.is_file():
        return {"file": blob(dest.read_bytes())}
    files = sorted(p for p in dest.rglob("*") if p.is_file() and not p.is_symlink())
    return {"files": {p.relative_to(dest).as_posix(): blob(p.read_bytes()) for p in files}}


def _write_tree(dest: Path, output: Json) -> None:
    if "file" in output:
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_bytes(unblob(output["file"], f"the downloaded file {dest.name}"))
        return
    for relative, data in output["files"].items():
        path = dest / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(unblob(data, f"the downloaded file {relative}"))
    dest.mkdir(parents=True, exist_ok=True)


def _raise_recorded(error: dict[str, str] | None) -> None:
    """Raise what the recorded call raised: the same class where it is a builtin or a sandbox error."""
    if error is None:
        return
    import builtins

    from envhub.sandbox import results

    cls = getattr(results, error["type"], None) or getattr(builtins, error["type"], None)
    if isinstance(cls, type) and issubclass(cls, Exception):
        raise cls(error["message"])
    raise RuntimeError(f"{error['type']}: {error['message']}")


# -- the Python worker ------------------------------------------------------------------------------------


def attach(worker: PythonWorker) -> bool:
    """Record (or answer) this worker's snippets; True when it must not start (a replay)."""
    tape = current()
    if tape is None:
        return False
    real = worker.run

    async def run(code: str, *, timeout: float | None = None) -> Any:  # noqa: ASYNC109 - the worker's own
        tape = current()
        if tape is None:
            return await real(code, timeout=timeout)
        given = kept(tape.redact({"code": code, "timeout": timeout}))
        if tape.replaying:
            from envhub.sandbox.python_repl import ReplResult

            recorded = tape.answer("worker", "run", given)
            _raise_recorded(recorded.error)
            return ReplResult.model_validate(recorded.output)
        with inside():
            try:
                result = await real(code, timeout=timeout)
            except Exception as exc:
                tape.record("worker", "run", given, error=exc)
                raise
        tape.record("worker", "run", given, result.model_dump(mode="json"))
        return result

    setattr(worker, "run", run)  # noqa: B010 - this worker only: one made outside a tape stays as it is
    return tape.replaying
