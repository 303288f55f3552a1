"""Child processes in tests: servers that say `listening on PORT` when they accept requests; Ray actors."""

from __future__ import annotations

import select
import subprocess
import sys
import tempfile
from types import TracebackType
from typing import Self


class ServerProcess:
    """A server started with `python -m MODULE ... --host H --port 0`; stopped on exit or `stop()`."""

    def __init__(self, process: subprocess.Popen[str], host: str, port: int) -> None:
        self.process = process
        self.host = host
        self.port = port

    @classmethod
    def launch(cls, module: str, args: list[str], *, host: str, timeout: float, what: str) -> Self:
        """Start `module` on a free port of `host` and wait until it listens (or fail with its stderr).

        The module is found as this interpreter finds it: envhub installed, as plugin authors have it.
        """
        command = [sys.executable, "-m", module, *args, "--host", host, "--port", "0"]
        # stderr goes to a file, not a pipe: a pipe nobody reads would fill and stall the server
        with tempfile.TemporaryFile(mode="w+") as errors:
            process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=errors, text=True)
            assert process.stdout is not None
            ready, _, _ = select.select([process.stdout], [], [], timeout)
            line = process.stdout.readline() if ready else ""
            if not line.startswith("listening on "):
                process.kill()
                process.wait()
                errors.seek(0)
                raise RuntimeError(f"the {what} did not start within {timeout} s: {errors.read()[-2000:]}")
        return cls(process, host, int(line.split()[-1]))

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        if self.process.stdout is not None:
            self.process.stdout.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()
