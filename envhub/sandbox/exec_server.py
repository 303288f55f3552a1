"""The exec server's in-sandbox side: pid 1 of a local sandbox, it runs one command at a time for the host.

Read from its stdin by `python3 -I -S -c <bootstrap>`; it imports only C modules of the standard library
(`_ctypes`, not the `ctypes` package over it: 2 ms less), since its start-up is on the path of a
sandbox's first command. Where the host has a C compiler, sandboxes start `exec_server.c` instead, the
same server in C (envhub/sandbox/native.py says why); this one is the fallback, and the reference.
The host talks to it over one end of a unix socket pair (fd in argv[1]): a request is a length-prefixed
run of NUL-ended fields (exec_client.encode_request), sent with the command's stdout, stderr (and stdin)
pipe ends as SCM_RIGHTS; a reply is a length-prefixed JSON object. The output never passes through
here: the host reads its own ends of those pipes.

Why the code it runs cannot turn it against the host or against another command:
- It is the pid namespace's init and handles no signal (glibc's two internal ones are set to ignored):
  the kernel drops every signal sent to an init from inside its namespace unless the init handles it,
  SIGKILL and SIGSTOP included. SIGCHLD is blocked and read from a signalfd: all one can do with it is
  wake the server to reap, which a dying child does anyway.
- It makes itself non-dumpable, so nothing in the sandbox may ptrace it, read or write /proc/1/mem or open
  its descriptors through /proc/1/fd (the sandbox holds no capability).
- Commands get their three stdio pipes and nothing else: every other descriptor is close-on-exec.
- After each command it SIGKILLs every other process of the namespace (kill(-1) spares only the caller)
  and reaps them all, so nothing one command started is alive when the next one starts.
- Its own CPU time is capped by the same RLIMIT_CPU as each command (inherited from the launcher); it
  retires, and the host starts a fresh one, long before reaching it.
"""

from __future__ import annotations

import _ctypes
import _signal  # type: ignore[import-not-found, unused-ignore]
import _socket
import os
import resource
import select
import struct
import sys
import time

TYPE_CHECKING = False  # typing itself is a slow import; mypy reads this name as typing's
if TYPE_CHECKING:
    from collections.abc import Iterator
    from typing import Any

HEADER = struct.Struct("!I")
FD = struct.Struct("i")
PR_SET_DUMPABLE, PR_GET_DUMPABLE = 4, 3
RT_SIGACTION = {"x86_64": 13, "aarch64": 134}
"""rt_sigaction's number per architecture: glibc will not let a program touch its two internal signals."""
GLIBC_INTERNAL_SIGNALS = (32, 33)
SFD_NONBLOCK, SFD_CLOEXEC = os.O_NONBLOCK, os.O_CLOEXEC
SIGINFO_SIZE = 128
"""What one read of a signalfd returns per pending signal (struct signalfd_siginfo)."""
KILL_GRACE_S = 5.0
"""How long SIGKILLed processes may take to die before the server gives up (the host then kills it)."""
MAX_REQUEST = 64 << 20
DEFAULT_SIGNALS = [s for s in _signal.valid_signals() if s not in (_signal.SIGKILL, _signal.SIGSTOP)]
NOT_THERE = (FileNotFoundError, NotADirectoryError)


def send(sock: _socket.socket, reply: dict[str, object]) -> None:
    """A reply as JSON; its values are ints, bools and plain strings (`repr` of a str without
    quotes, backslashes or non-ASCII is valid JSON)."""
    parts = []
    for key, value in reply.items():
        if isinstance(value, bool):
            text = "true" if value else "false"
        elif isinstance(value, int):
            text = str(value)
        else:
            text = '"' + "".join(c if _plain(c) else "?" for c in str(value)) + '"'
        parts.append(f'"{key}": {text}')
    data = ("{" + ", ".join(parts) + "}").encode()
    sock.sendall(HEADER.pack(len(data)) + data)


def _plain(c: str) -> bool:
    return c.isascii() and c.isprintable() and c not in "\"'\\"


def receive(sock: _socket.socket) -> tuple[dict[str, Any] | None, list[int]]:
    """One request and the descriptors sent with it; (None, []) when the host has gone."""
    room = _socket.CMSG_SPACE(3 * FD.size)
    data, ancillary, flags, _ = sock.recvmsg(1 << 16, room, _socket.MSG_CMSG_CLOEXEC)
    fds: list[int] = []
    for level, kind, payload in ancillary:
        if level == _socket.SOL_SOCKET and kind == _socket.SCM_RIGHTS:
            usable = len(payload) - len(payload) % FD.size
            fds += [FD.unpack_from(payload, i)[0] for i in range(0, usable, FD.size)]
    if flags & _socket.MSG_CTRUNC:
        raise ValueError("a request came with more descriptors than a command takes")
    if not data:
        return None, fds
    while len(data) < HEADER.size:
        more = sock.recv(HEADER.size - len(data))
        if not more:
            return None, fds
        data += more
    (size,) = HEADER.unpack_from(data)
    if size > MAX_REQUEST:
        raise ValueError(f"a request of {size} bytes is past the {MAX_REQUEST} byte limit")
    body = bytearray(data[HEADER.size :])
    while len(body) < size:
        more = sock.recv(min(1 << 20, size - len(body)))
        if not more:
            return None, fds
        body += more
    return decode(bytes(body)), fds


def decode(body: bytes) -> dict[str, Any]:
    """A request's fields (exec_client.encode_request): NUL-ended timeout, cwd, argument count,
    arguments, then KEY=VALUE entries. ValueError if malformed."""
    fields = [os.fsdecode(field) for field in body.split(b"\0")]
    if len(fields) < 5 or fields.pop() != "":
        raise ValueError("a request the exec server could not read")
    count = int(fields[2])
    if count < 1 or count > len(fields) - 3:
        raise ValueError("a request the exec server could not read")
    argv, entries = fields[3 : 3 + count], fields[3 + count :]
    env = dict(entry.partition("=")[::2] for entry in entries)
    return {"timeout": float(fields[0]), "cwd": fields[1], "argv": argv, "env": env}


def exit_code(status: int) -> int:
    """The shell's convention, as bubblewrap reports it: 128+N for a death by signal N."""
    if os.WIFSIGNALED(status):
        return 128 + os.WTERMSIG(status)
    return os.WEXITSTATUS(status)


class ChildEvents:
    """SIGCHLD as a readable descriptor: blocked, and read from a signalfd, so a child's end wakes the one
    thread that waits for the command (its deadline and the host's hang-up in the same `select`).

    Why not a blocking waitpid on a thread of its own (as before, and as bwrap's init does): every
    command's end then took two thread hand-offs (the reaper's wake-up, then its record to the main
    thread), more than a short command's whole run; and a handler for SIGCHLD would let the sandbox
    reach pid 1 with any signal it handles. Orphans are still reaped as they die: each SIGCHLD wakes it.
    """

    def __init__(self, libc: Libc) -> None:
        _signal.pthread_sigmask(_signal.SIG_BLOCK, {_signal.SIGCHLD})
        mask = struct.pack("=Q", 1 << (_signal.SIGCHLD - 1))
        self.fd = libc("signalfd", -1, mask, SFD_NONBLOCK | SFD_CLOEXEC)  # glibc adds the mask's size
        if self.fd < 0:
            sys.exit("could not open a signalfd for SIGCHLD")

    def clear(self) -> None:
        """Take what is pending (the reaping that follows finds what it announced, and more)."""
        try:
            while os.read(self.fd, SIGINFO_SIZE * 64):
                pass
        except BlockingIOError:
            pass


class Server:
    def __init__(self, sock: _socket.socket, cpu_budget: float, children: ChildEvents) -> None:
        self.sock = sock
        self.cpu_budget = cpu_budget
        self.devnull = os.open("/dev/null", os.O_RDONLY | os.O_CLOEXEC)
        self.children = children
        self.statuses: dict[int, int] = {}
        self.empty = True

    def collect(self, timeout: float) -> bool:
        """Reap what has ended, waiting up to `timeout` for a child to end if none has; False when the
        host closed its end."""
        self.children.clear()
        if self.reap():
            return True
        ready, _, _ = select.select([self.children.fd, self.sock.fileno()], [], [], max(0.0, timeout))
        return self.sock.fileno() not in ready  # the host sends nothing while a command runs: it closed

    def reap(self) -> bool:
        """Reap every child that has ended; whether there is no reason to wait before looking again:
        some child was reaped, or none is left (then `empty` is set too)."""
        took = False
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                self.empty = True
                return True
            if pid == 0:
                return took
            self.statuses[pid] = status
            took = True

    def run(self, req: dict[str, Any], fds: list[int]) -> dict[str, object]:
        stdout, stderr = fds[0], fds[1]
        stdin = fds[2] if len(fds) > 2 else self.devnull
        deadline = time.monotonic() + req["timeout"]
        try:
            main = spawn(req, stdin, stdout, stderr)
        finally:
            for fd in fds:
                os.close(fd)  # the command holds the only copies left: its pipes end with it
        if main is None:
            return {"exit_code": 1, "timed_out": False}
        self.statuses, self.empty = {}, False
        timed_out = False
        while main not in self.statuses:
            left = deadline - time.monotonic()
            if left <= 0:
                timed_out = True
                break
            if not self.collect(left):
                self.kill_all()
                sys.exit(0)
        if not self.kill_all():
            return {"error": f"processes of the command outlived SIGKILL by {KILL_GRACE_S:g} s"}
        reply: dict[str, object] = {"exit_code": -1, "timed_out": True}
        if not timed_out:
            reply = {"exit_code": exit_code(self.statuses[main]), "timed_out": False}
        usage = resource.getrusage(resource.RUSAGE_SELF)
        if usage.ru_utime + usage.ru_stime > self.cpu_budget:
            reply["retire"] = True
        return reply

    def kill_all(self) -> bool:
        """SIGKILL every process but this one until none is left to reap (so nothing stale reaches the
        next command); False if some outlive the grace."""
        end = time.monotonic() + KILL_GRACE_S
        while not self.empty:
            try:  # noqa: SIM105 - contextlib would be one more import on the server's start-up path
                os.kill(-1, _signal.SIGKILL)
            except ProcessLookupError:  # none alive; what is left is zombies, reaped below
                pass
            left = end - time.monotonic()
            if left <= 0 or not self.collect(min(left, 0.05)):
                return False
        return True

    def serve(self) -> None:
        send(self.sock, {"ready": True})
        while True:
            req, fds = receive(self.sock)
            if req is None:
                return
            if len(fds) < 2:
                for fd in fds:
                    os.close(fd)
                send(self.sock, {"error": "a request came without its output pipes"})
                continue
            try:
                reply = self.run(req, fds)
            except OSError as exc:  # the spawn itself refused (EAGAIN at the pids limit), and the like
                reply = {"error": f"{exc.strerror or exc} ({type(exc).__name__})"}
            send(self.sock, reply)
            if reply.get("retire"):
                return


def spawn(req: dict[str, Any], stdin: int, stdout: int, stderr: int) -> int | None:
    """Start the command as bubblewrap did (own session, default signals, cwd, env, execvp's PATH
    search); None after writing bubblewrap's own words for a cwd or exec failure to its stderr."""
    argv, cwd, env = req["argv"], req["cwd"], req["env"]
    try:
        os.chdir(cwd)  # the server's own cwd is of no use to it; the command inherits it
    except OSError as exc:
        os.write(stderr, f"bwrap: Can't chdir to {cwd}: {os.strerror(exc.errno or 0)}\n".encode())
        return None
    env["PWD"] = cwd  # as bwrap's --chdir sets it
    stdio = [(os.POSIX_SPAWN_DUP2, fd, n) for n, fd in enumerate((stdin, stdout, stderr))]
    error: OSError | None = None
    for path in candidates(argv[0], env.get("PATH")):
        try:
            return start(path, argv, env, stdio)
        except OSError as exc:
            if exc.errno == 8:  # ENOEXEC: execvp hands a file without a #! line to the shell
                return start("/bin/sh", ["/bin/sh", path, *argv[1:]], env, stdio)
            if not isinstance(exc, (PermissionError, *NOT_THERE)):
                error = exc
                break
            if not isinstance(error, PermissionError):
                error = exc  # execvp reports EACCES if any candidate gave it, else the last error
    errno = error.errno if error is not None and error.errno else 2
    os.write(stderr, f"bwrap: execvp {argv[0]}: {os.strerror(errno)}\n".encode())
    return None


def start(path: str, argv: list[str], env: dict[str, str], stdio: list[tuple[int, int, int]]) -> int:
    """posix_spawn (a vfork: a fork of this process costs several times more) in a new session, with
    every signal at its default and none blocked, and the three stdio pipes as its only descriptors."""
    return os.posix_spawn(
        path, argv, env, setsid=True, setsigdef=DEFAULT_SIGNALS, setsigmask=(), file_actions=stdio
    )


def candidates(name: str, path: str | None) -> Iterator[str]:
    """Where execvp would try `name`, less the places that plainly hold no such file; one at a time, so
    the first that runs is the last one looked at."""
    if "/" in name:
        yield name
        return
    for folder in (path if path is not None else "/bin:/usr/bin").split(":"):
        full = os.path.join(folder or ".", name)
        try:
            os.stat(full)
        except NOT_THERE:
            continue
        except OSError:
            pass  # let the spawn say what is wrong with it
        yield full


class Libc:
    """C calls through `_ctypes` alone: int, bytes (as a pointer) and None arguments, an int back.
    errno is not kept (the `ctypes` package would be needed for it): failures say which call failed."""

    def __init__(self) -> None:
        self.handle = _ctypes.dlopen(None)  # type: ignore[arg-type]  # None: the program itself

    def __call__(self, name: str, *args: int | bytes | None) -> int:
        result: int = _ctypes.call_function(_ctypes.dlsym(self.handle, name), args)
        return result


def ignore_internal_signals(libc: Libc) -> None:
    """Ignore glibc's SIGCANCEL and SIGSETXID, the only signals with handlers here: an init with a
    handler gets the signal from inside its namespace, so the sandbox could wake the server (and spend
    its CPU time) at will. Nothing here cancels threads or changes ids, which is what they serve."""
    number = RT_SIGACTION.get(os.uname().machine)
    if number is None:
        sys.exit(f"no rt_sigaction number known for {os.uname().machine}")
    ignore = struct.pack("@4L", 1, 0, 0, 0)  # handler SIG_IGN; no flags, restorer or mask
    for sig in GLIBC_INTERNAL_SIGNALS:
        if libc("syscall", number, sig, ignore, None, 8) != 0:
            sys.exit(f"could not ignore signal {sig}: rt_sigaction failed")


def main() -> None:
    libc = Libc()
    if libc("prctl", PR_SET_DUMPABLE, 0, 0, 0, 0) != 0 or libc("prctl", PR_GET_DUMPABLE, 0, 0, 0, 0) != 0:
        sys.exit("could not make the exec server non-dumpable")
    if os.getpid() != 1:
        sys.exit("the exec server must be the sandbox's pid 1 (bwrap --as-pid-1)")
    _signal.signal(_signal.SIGINT, _signal.SIG_DFL)  # an init with a handler could be signalled from inside
    sock = _socket.socket(fileno=int(sys.argv[1]))
    sock.setblocking(True)
    os.set_inheritable(sock.fileno(), False)
    for fd in (0, 1, 2):
        os.set_inheritable(fd, False)
    cpu_limit = resource.getrlimit(resource.RLIMIT_CPU)[0]
    budget = cpu_limit / 2 if cpu_limit != resource.RLIM_INFINITY else float("inf")
    server = Server(sock, budget, ChildEvents(libc))
    ignore_internal_signals(libc)
    server.serve()


main()
