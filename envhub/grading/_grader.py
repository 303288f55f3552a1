"""The trusted half of the grader: runs *inside* the grading sandbox, but never beside the solution.

Sent as `python3 -I -c <this file's source>` with the hidden tests on stdin (they never touch the
disk), so it imports only the standard library and nothing from the solution's directory. It makes
itself non-dumpable, so processes of the same uid cannot read its memory, fds or environment; starts
the solution in a child process (`_probe.py`) that is given each test's probe but never its check;
judges each returned value itself; and signs every line it prints with an HMAC keyed by a nonce only
it and the host know, so nothing the solution prints or writes can pass for a grade.
"""

import builtins
import contextlib
import ctypes
import hashlib
import hmac
import json
import math
import os
import select
import signal
import sys
import time
from collections.abc import Callable
from typing import Any

PR_SET_DUMPABLE = 4
MAX_LINE = 16 * 1024 * 1024


def make_private() -> bool:
    """Non-dumpable: /proc/<pid>/mem, fd, environ of this process become closed to its own uid."""
    try:
        return int(ctypes.CDLL(None, use_errno=True).prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)) == 0
    except Exception:
        return False


def same(a: object, b: object) -> bool:
    """Type-strict deep equality: `True` is not `1`, `1.0` is not `1`, a tuple is not a list."""
    if type(a) is not type(b):
        return False
    if isinstance(a, list | tuple) and isinstance(b, list | tuple):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    return bool(a == b)


def judge(check: str, value: object, checks: dict[str, Any]) -> dict[str, Any]:
    """Evaluate a test's check over a value rebuilt from plain builtins: whether it passed, and why not.

    `checks` holds the tests' prelude and check prelude; `same` and `math` are always there.
    Importable on the host, so a sweep of our own trusted answers can be judged exactly as the grader
    judges them.
    """
    namespace = {"__builtins__": builtins, "same": same, "math": math, **checks, "result": value}
    try:
        ok = bool(eval(check, namespace))
    except Exception as exc:
        return {"passed": False, "error": f"check raised {type(exc).__name__}: {str(exc)[:200]}"}
    return {"passed": ok, "error": None if ok else f"got {shown(value)}"}


def shown(value: object) -> str:
    """The value's repr for a failure message, cut short; an int too long to print is said so.

    The grader lifts CPython's int-to-decimal limit for the checks; a repr under it would be quadratic
    in the digits, and an answer of `1 << 50_000_000` held the grader until the sandbox's wall time.
    """
    limit = sys.get_int_max_str_digits()
    sys.set_int_max_str_digits(4300)  # CPython's default
    try:
        return repr(value)[:300]
    except ValueError:
        return "a value with an int too long to print"
    finally:
        sys.set_int_max_str_digits(limit)


def kill_others() -> None:
    """SIGKILL every process in this pid namespace but its init and this grader: the solution's."""
    me = os.getpid()
    for name in os.listdir("/proc"):
        if name.isdigit() and int(name) not in (1, me):
            with contextlib.suppress(OSError):
                os.kill(int(name), signal.SIGKILL)


class Child:
    """One solution process: imports the solution, answers probes in order on a private pipe (fd 3).

    Started with posix_spawn rather than subprocess: the import time of subprocess is paid per grade.
    """

    def __init__(self, request: dict[str, Any], source: str) -> None:
        read_fd, write_fd = os.pipe()
        stdin_r, stdin_w = os.pipe()
        self.fd = read_fd
        self.buffer = b""
        self.status: int | None = None
        try:
            self.pid = os.posix_spawn(
                sys.executable,
                [sys.executable, "-I", "-c", source, "3"],
                {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LANG": "C.UTF-8", "TMPDIR": "/tmp"},
                file_actions=[
                    (os.POSIX_SPAWN_DUP2, stdin_r, 0),
                    (os.POSIX_SPAWN_OPEN, 1, os.devnull, os.O_WRONLY, 0),
                    (os.POSIX_SPAWN_OPEN, 2, os.devnull, os.O_WRONLY, 0),
                    (os.POSIX_SPAWN_DUP2, write_fd, 3),
                ],
            )
        except OSError:
            os.close(read_fd)
            raise
        finally:
            os.close(write_fd)
            os.close(stdin_r)
        try:
            data = json.dumps(request).encode()
            while data:
                data = data[os.write(stdin_w, data) :]
        except OSError:
            pass  # it died already; the first read says so
        finally:
            os.close(stdin_w)

    def wait(self, timeout: float) -> int | None:
        """Its exit status (128+N for signal N), once it has exited within `timeout` seconds."""
        deadline = time.monotonic() + timeout
        while self.status is None:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                self.status = os.waitstatus_to_exitcode(status)
                if self.status < 0:
                    self.status = 128 - self.status
            elif time.monotonic() >= deadline:
                break
            else:
                time.sleep(0.005)
        return self.status

    def next(self, timeout: float) -> dict[str, Any] | str:
        """The next message, or why there is none: 'timeout', 'exited', 'garbled'."""
        deadline = time.monotonic() + timeout
        while b"\n" not in self.buffer:
            left = deadline - time.monotonic()
            if left <= 0:
                return "timeout"
            ready, _, _ = select.select([self.fd], [], [], left)
            if not ready:
                continue
            chunk = os.read(self.fd, 1 << 20)
            if not chunk:
                return "exited"
            self.buffer += chunk
            if len(self.buffer) > MAX_LINE:
                return "garbled"
        line, _, self.buffer = self.buffer.partition(b"\n")
        try:
            message = json.loads(line)
        except (ValueError, RecursionError):
            return "garbled"
        return message if isinstance(message, dict) else "garbled"

    def stop(self) -> None:
        if self.wait(0) is None:
            with contextlib.suppress(OSError):
                os.kill(self.pid, signal.SIGKILL)
            self.wait(5.0)
        os.close(self.fd)
        kill_others()


def why(reason: str, child: Child, timeout: float) -> str:
    if reason == "timeout":
        return f"timed out after {timeout:g} s (or the suite's time limit ran out)"
    if reason == "exited":
        return f"the solution's process exited before answering (status {child.wait(1.0)})"
    return "the solution's process broke the result protocol"


def run_tests(
    payload: dict[str, Any], verdict: Callable[[dict[str, Any], dict[str, Any]], dict[str, Any]]
) -> tuple[list[Any], int]:
    """Each test's result, and how many solution processes it took: a crash, a timeout or an answer out
    of order costs the test it happened on, and a fresh process runs the tests left."""
    tests: list[dict[str, Any]] = payload["tests"]
    results: list[dict[str, Any] | None] = [None] * len(tests)
    pending = list(range(len(tests)))
    children = 0
    end = time.monotonic() + float(payload["time_limit"])

    def left(timeout: float) -> float:
        return max(0.0, min(timeout, end - time.monotonic()))

    while pending:
        if end - time.monotonic() <= 0:
            for i in pending:
                results[i] = {"passed": False, "error": "the test suite's time limit ran out"}
            break
        request = {
            "workdir": payload["workdir"],
            "module": payload["module"],
            "prelude": payload["prelude"],
            "probes": [[i, tests[i]["probe"], tests[i]["mode"]] for i in pending],
        }
        try:
            child = Child(request, payload["probe_source"])
        except OSError as exc:
            for i in pending:
                results[i] = {"passed": False, "error": f"could not start the solution: {exc}"}
            break
        children += 1
        first = child.next(left(payload["import_timeout"]))
        if isinstance(first, str) or first.get("ready") is not True:
            if isinstance(first, str):
                reason = why(first, child, payload["import_timeout"]) + " while being imported"
            else:
                reason = f"importing the solution failed: {str(first.get('import_error'))[:2000]}"
            for i in pending:
                results[i] = {"passed": False, "error": reason}
            child.stop()
            break
        while pending:
            i = pending.pop(0)
            message = child.next(left(tests[i]["timeout"]))
            if isinstance(message, str) or message.get("i") != i:
                reason = why(message, child, tests[i]["timeout"]) if isinstance(message, str) else ""
                results[i] = {"passed": False, "error": reason or "answered out of order"}
                break  # a fresh process for the tests left
            results[i] = verdict(tests[i], message)
        child.stop()
    return results, children


def main() -> None:
    private = make_private()
    payload = json.loads(sys.stdin.buffer.read())
    key = bytes.fromhex(payload["nonce"])
    sys.set_int_max_str_digits(0)

    def emit(record: dict[str, Any]) -> None:
        body = json.dumps(record, separators=(",", ":"))
        mac = hmac.new(key, body.encode(), hashlib.sha256).hexdigest()
        sys.stdout.write(f"ENVHUB-GRADE {mac} {body}\n")
        sys.stdout.flush()

    emit({"event": "started", "private": private})
    helpers: dict[str, Any] = {"__name__": "envhub_probe"}
    exec(payload["probe_source"], helpers)  # encode/decode, shared with the child; defines, runs nothing
    decode = helpers["decode"]
    checks: dict[str, Any] = {"__builtins__": builtins, "same": same, "math": math}
    try:
        exec(payload["prelude"], checks)
        exec(payload["check_prelude"], checks)  # the checks' own values: never sent to the child
    except Exception as exc:
        emit({"event": "error", "message": f"the tests' prelude failed: {type(exc).__name__}: {exc}"})
        return

    def verdict(test: dict[str, Any], message: dict[str, Any]) -> dict[str, Any]:
        """The test's result from the solution's answer; `answered` tells it from a crash or timeout."""
        if message.get("ok") is not True:
            return {"passed": False, "error": str(message.get("error", "failed"))[:2000], "answered": True}
        if test["mode"] == "statement":
            return {"passed": True, "error": None, "answered": True}
        try:
            value = decode(message["value"])
        except Exception:
            return {"passed": False, "error": "the solution's value could not be read", "answered": True}
        return {**judge(test["check"], value, checks), "answered": True}

    results, children = run_tests(payload, verdict)
    kill_others()
    emit({"event": "done", "children": children, "results": results})


if __name__ == "__main__":
    main()
