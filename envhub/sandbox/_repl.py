"""The persistent Python worker's server side: runs *inside* the sandbox, one JSON line in, one out.

Sent as `python3 -I -u -c <this file's source>`, so it must import only the standard library. User code's
stdout and stderr (fd 1 and 2, so subprocesses and C extensions are captured too) go to unlinked files
in /tmp, reset per call; the protocol uses private duplicates of the original pipes.
"""

import ast
import json
import linecache
import os
import resource
import signal
import sys
import time
import traceback


class CellTimeout(BaseException):
    """Raised in the user's code by SIGALRM: a BaseException, so `except Exception` cannot swallow it."""


def _alarm(signum: int, frame: object) -> None:
    raise CellTimeout


def _run(code: str, filename: str, ns: dict[str, object]) -> None:
    linecache.cache[filename] = (len(code), None, code.splitlines(True), filename)
    tree = ast.parse(code, filename, "exec")
    last: ast.Expression | None = None
    if tree.body and isinstance(tree.body[-1], ast.Expr):
        expr = tree.body.pop()
        assert isinstance(expr, ast.Expr)
        last = ast.Expression(expr.value)
    exec(compile(tree, filename, "exec"), ns)
    if last is not None:
        value = eval(compile(last, filename, "eval"), ns)
        if value is not None:
            print(repr(value))


def _print_exception(exc: BaseException, filename: str) -> None:
    tb = exc.__traceback__
    while tb is not None and tb.tb_frame.f_code.co_filename != filename:
        tb = tb.tb_next
    traceback.print_exception(type(exc), exc, tb if tb is not None else exc.__traceback__)


def _capture_file() -> int:
    """An unlinked file in /tmp: counted against the sandbox's disk cap, gone when the worker is."""
    return os.open("/tmp", os.O_TMPFILE | os.O_RDWR | os.O_APPEND, 0o600)


def main() -> None:
    cap = int(sys.argv[1])
    proto_in = os.fdopen(os.dup(0), "rb")
    proto_out = os.fdopen(os.dup(1), "wb")
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.dup2(_capture_file(), 1)
    os.dup2(_capture_file(), 2)
    # Replacing the standard streams for the whole session; they live as long as the process.
    sys.stdout = open(1, "w", buffering=1, closefd=False, errors="backslashreplace")  # noqa: SIM115
    sys.stderr = open(2, "w", buffering=1, closefd=False, errors="backslashreplace")  # noqa: SIM115
    sys.stdin = open(0, closefd=False)  # noqa: SIM115
    signal.signal(signal.SIGALRM, _alarm)
    ns: dict[str, object] = {"__name__": "__main__", "__builtins__": __builtins__}
    proto_out.write(b'{"ready": true}\n')
    proto_out.flush()
    for n, line in enumerate(proto_in):
        req = json.loads(line)
        os.ftruncate(1, 0)
        os.ftruncate(2, 0)
        filename = f"<cell {n}>"
        code, timed_out = 0, False
        t0, r0 = time.perf_counter(), resource.getrusage(resource.RUSAGE_SELF)
        try:
            try:
                signal.setitimer(signal.ITIMER_REAL, req["timeout"])
                _run(req["code"], filename, ns)
            finally:
                signal.setitimer(signal.ITIMER_REAL, 0)
        except CellTimeout:
            code, timed_out = -1, True
            sys.stderr.write(f"TimeoutError: the cell ran past {req['timeout']} s and was interrupted\n")
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        except BaseException as exc:
            code = 1
            _print_exception(exc, filename)
        sys.stdout.flush()
        sys.stderr.flush()
        r1 = resource.getrusage(resource.RUSAGE_SELF)
        out, err = os.pread(1, cap + 1, 0), os.pread(2, cap + 1, 0)
        reply = {
            "stdout": out[:cap].decode(errors="replace"),
            "stderr": err[:cap].decode(errors="replace"),
            "exit_code": code,
            "timed_out": timed_out,
            "output_truncated": len(out) > cap or len(err) > cap,
            "wall_time_s": time.perf_counter() - t0,
            "cpu_time_s": (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime),
            "peak_memory_bytes": r1.ru_maxrss * 1024,
        }
        proto_out.write(json.dumps(reply).encode() + b"\n")
        proto_out.flush()


if __name__ == "__main__":
    main()
