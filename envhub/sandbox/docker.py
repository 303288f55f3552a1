"""The `docker` backend: one container per sandbox, driven through the `docker` SDK.

The container runs `sleep infinity` under Docker's init with no network, a read-only root, size-capped
tmpfs for the workdir, /tmp and /dev/shm, uid 65534, no capabilities, no-new-privileges and a seccomp
profile built from the same deny-list as the local backend. Commands are `docker exec`s wrapped in
coreutils `timeout`, which kills the command's whole process group. The SDK is synchronous, so every
call runs in a worker thread, off the event loop.

With `IsolationPolicy(writable_image=True)` the image's own filesystem is the work: the root stays
writable in the container's layer (no tmpfs over the workdir; /tmp and /dev/shm are still capped
tmpfs) and commands run as the image's user (root for SWE-bench's images), still with every
capability dropped, no-new-privileges, the seccomp profile, no network and the same limits.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import io
import json
import socket
import stat
import tarfile
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from envhub.sandbox import owner, seccomp
from envhub.sandbox.base import (
    MAX_TREE_DEPTH,
    Background,
    Command,
    Sandbox,
    not_regular,
    sandbox_path,
    to_argv,
)
from envhub.sandbox.cleanup import finish
from envhub.sandbox.policy import Enforcement, IsolationPolicy, IsolationReport, MiB
from envhub.sandbox.results import ExecResult, SandboxError, SandboxUnavailable

if TYPE_CHECKING:
    import docker

DEFAULT_IMAGE = "envhub/python:3-bookworm"
CONTAINER_USER = "65534:65534"
"""Runs the container's init and `sleep infinity`; commands run as EXEC_USER, who cannot signal it."""
EXEC_USER = "65533:65533"
SPARE_KEEPER = "65532:65532"
"""The init's uid in writable_image mode when the image's own user is CONTAINER_USER's."""
_REAP = r"""keep=$1; shift; "$@"; rc=$?
[ -n "$keep" ] || { kill -9 -1 2>/dev/null; exit $rc; }
spared() {
    q=$1; hops=0
    while [ "$q" -gt 1 ] && [ $hops -lt 1024 ]; do
        hops=$((hops + 1))
        read -r s 2>/dev/null </proc/$q/stat || return 1
        set -- ${s##*) }
        [ $hops = 1 ] && [ "$1" = Z ] && return 0
        case " $keep " in *" $q:${20} "*) return 0 ;; esac
        q=$2
    done
    return 1
}
i=0
while [ $i -lt 500 ]; do
    i=$((i + 1)); found=
    for d in /proc/[0-9]*; do
        p=${d#/proc/}
        [ "$p" = $$ ] || [ "$p" = 1 ] || spared "$p" || { kill -9 "$p" 2>/dev/null && found=1; }
    done
    [ -n "$found" ] || break
done
exit $rc
"""
"""Wraps every command: afterwards, kill whatever it left running (every EXEC_USER process but this
shell), as the local backend's pid namespace does; the init survives, owned by another uid.

While background programs run (`keep`: their roots, each as pid:start-time), it kills every process
but those roots and their descendants (and zombies, already dead), in passes until a pass kills
nothing, so what forked during one pass is caught by the next. A root is named by its pid and its
start time (field 22 of /proc/PID/stat), which no other process can take, so a command cannot pass
for one; a process's parent is its creator (or the init, once orphaned), so a command cannot put
itself under one. What a background program starts and then orphans (a double-forking daemon) is no
longer its descendant and goes at the next command's end. Shell builtins only (read, set, case, kill):
it forks nothing, so a command that used up the pids limit cannot stop it, and it runs the image's
`sh` alone, whatever the caller's PATH."""
_BACKGROUND = (
    'root() { echo "envhub-background $$:${20}"; }; read -r s </proc/$$/stat; root ${s##*) }; exec "$@"'
)
"""Starts a background program: its first line names its root (pid:start-time), then it execs argv."""
BACKGROUND_START_S = 30.0
LABEL = "envhub.sandbox"
OWNER_LABEL = owner.MARK_PID
"""The pid of the process that made the container: what a leak check on a shared engine looks at."""
HOST_LABEL = owner.MARK_HOST
"""With the pid, the rest of the owner's identity rides along as labels (envhub.sandbox.owner.Owner.marks:
its lease key, boot id, PID namespace, start time): the fleet's reaper removes a container only when that
owner is dead by the owner rule (envhub.sandbox.owner.judge); E2B sandboxes carry the same marks."""
FORK_REPOSITORY = "envhub-fork"
"""Where `fork` commits a writable_image container; each image goes when its fork closes."""
FORK_LABEL = "envhub.fork"
HOST_GRACE_S = 10.0
CGROUP_V1 = Path("/sys/fs/cgroup")
_NAMESPACE_FLAGS = (0x00020000, 0x04000000, 0x08000000, 0x10000000, 0x20000000, 0x40000000, 0x02000000)
"""CLONE_NEWNS, NEWUTS, NEWIPC, NEWUSER, NEWPID, NEWNET, NEWCGROUP: refused in clone() flags."""


def seccomp_profile() -> str:
    """A Docker seccomp profile: the local backend's deny-list, clone() namespace flags, clone3 -> ENOSYS.

    Docker's built-in profile allows ptrace between processes of one uid; ours does not.
    """
    rules: list[dict[str, Any]] = [
        {"names": sorted(seccomp.DENIED_X86_64), "action": "SCMP_ACT_ERRNO", "errnoRet": 1},
        # glibc falls back to clone() on ENOSYS, where the flags can be inspected.
        {"names": ["clone3"], "action": "SCMP_ACT_ERRNO", "errnoRet": 38},
    ]
    for flag in _NAMESPACE_FLAGS:
        rules.append(
            {
                "names": ["clone"],
                "action": "SCMP_ACT_ERRNO",
                "errnoRet": 1,
                "args": [{"index": 0, "value": flag, "valueTwo": flag, "op": "SCMP_CMP_MASKED_EQ"}],
            }
        )
    profile = {
        "defaultAction": "SCMP_ACT_ALLOW",
        "architectures": ["SCMP_ARCH_X86_64", "SCMP_ARCH_X86", "SCMP_ARCH_X32"],
        "syscalls": rules,
    }
    return json.dumps(profile)


def _client() -> docker.DockerClient:
    try:
        import docker
    except ImportError as exc:
        raise SandboxUnavailable(
            "the docker backend needs the SDK: pip install 'envhub-core[docker]'"
        ) from exc
    try:
        client = docker.from_env(timeout=60)
        client.ping()
    except Exception as exc:
        raise SandboxUnavailable(
            f"no Docker engine is reachable ({exc}); start one, e.g. `bash sandboxes/ci-setup.sh` as root"
        ) from exc
    return client


class DockerSandbox(Sandbox):
    """A container sandbox. Open it with `envhub.sandbox.open("docker", policy=..., image=...)`."""

    backend: ClassVar[str] = "docker"

    def __init__(
        self,
        policy: IsolationPolicy,
        *,
        client: docker.DockerClient,
        container: Any,
        image: str,
        exec_user: str = EXEC_USER,
    ):
        super().__init__(policy)
        self._lock = asyncio.Lock()  # one command at a time: each one ends by killing its leftovers
        self._client = client
        self._container = container
        self.image = image
        self.exec_user = exec_user
        """Who commands run as: EXEC_USER, or the image's own user in writable_image mode."""
        self._fork_image: str | None = None
        """The image committed for this sandbox when it was forked from another; removed with it."""
        self._keep: set[str] = set()
        self._backgrounds: set[ExecBackground] = set()
        """Those started here and still being read: their readers end when the container goes."""
        """The running background programs' roots (pid:start-time), which the commands' clean-up spares."""

    @classmethod
    async def create(cls, policy: IsolationPolicy, *, image: str | None = None) -> DockerSandbox:
        policy.check_backend("docker")
        image = image or DEFAULT_IMAGE
        client = await asyncio.to_thread(_client)
        try:
            container, exec_user = await asyncio.to_thread(cls._run_container, client, policy, image)
        except Exception as exc:
            client.close()
            if _missing_image(exc):
                raise SandboxUnavailable(
                    f"image {image} is not on this Docker engine and no registry is assumed: build it "
                    f"(sandboxes/python/build.sh for {DEFAULT_IMAGE}) or `docker pull {image}` where its "
                    "registry is reachable"
                ) from exc
            raise SandboxError(f"could not start a sandbox container from {image}: {exc}") from exc
        return cls(policy, client=client, container=container, image=image, exec_user=exec_user)

    @staticmethod
    def _run_container(client: docker.DockerClient, policy: IsolationPolicy, image: str) -> tuple[Any, str]:
        """Start the container; returns it and the user commands run as."""
        from docker.types import Ulimit

        exec_user, keeper = EXEC_USER, CONTAINER_USER
        environment = {"HOME": policy.workdir, "LANG": "C.UTF-8", "TMPDIR": "/tmp", **policy.env}
        uid = EXEC_USER.split(":")[0]
        tmpfs_opts = f"size={policy.disk_mb * MiB},nr_inodes={policy.max_files},uid={uid},gid={uid},mode=0700"
        tmpfs = {policy.workdir: tmpfs_opts, "/tmp": tmpfs_opts}
        if policy.writable_image:
            exec_user = client.images.get(image).attrs["Config"].get("User") or "0:0"
            # The init must not share the commands' uid, or their `kill -9 -1` would stop the container.
            if exec_user.split(":")[0] in ("65534", "nobody"):
                keeper = SPARE_KEEPER
            environment = {"TMPDIR": "/tmp", **policy.env}  # HOME: the image user's own
            tmpfs = {"/tmp": f"size={policy.disk_mb * MiB},nr_inodes={policy.max_files},mode=1777"}
        container = client.containers.run(
            image,
            command=["sleep", "infinity"],
            detach=True,
            init=True,
            labels={LABEL: "1", **owner.me().marks()},
            network_mode="bridge" if policy.network else "none",
            mem_limit=policy.memory_mb * MiB,
            memswap_limit=policy.memory_mb * MiB,
            pids_limit=policy.pids + 2,  # + the init and the `timeout` wrapper
            nano_cpus=int(policy.cpus * 1e9),
            read_only=not policy.writable_image,
            tmpfs=tmpfs,
            shm_size=policy.disk_mb * MiB,
            user=keeper,
            cap_drop=["ALL"],
            security_opt=["no-new-privileges", f"seccomp={seccomp_profile()}"],
            environment=environment,
            working_dir=policy.workdir,
            volumes={host: {"bind": inside, "mode": "ro"} for host, inside in policy.ro_binds.items()},
            ulimits=[Ulimit(name="core", soft=0, hard=0), Ulimit(name="nofile", soft=4096, hard=4096)],
        )
        return container, exec_user

    # -- running commands ---------------------------------------------------------------------------

    def _run_blocking(
        self,
        argv: list[str],
        stdin: bytes | None,
        env: Mapping[str, str],
        cwd: str,
        limit: float,
        cap: int,
    ) -> tuple[bytes, bytes, bool, int, float]:
        """docker exec argv under `timeout`; returns stdout, stderr, truncated, exit code, wall time."""
        from docker.utils.socket import frames_iter

        api = self._client.api
        keep = " ".join(sorted(self._keep))
        wrapped = ["sh", "-c", _REAP, "envhub-exec", keep, "timeout", "-s", "KILL", f"{limit:.3f}s", *argv]
        exec_id = api.exec_create(
            self._container.id,
            wrapped,
            stdin=True,
            stdout=True,
            stderr=True,
            environment=dict(env),
            workdir=cwd,
            user=self.exec_user,
        )["Id"]
        started = time.monotonic()
        sock = api.exec_start(exec_id, socket=True)
        raw: socket.socket = sock._sock  # type: ignore[union-attr]  # SocketIO wraps the socket; half-close needs it
        raw.settimeout(limit + HOST_GRACE_S)
        out, err = bytearray(), bytearray()
        cut = False
        # stdin is sent by its own thread while this one reads: a command that never reads its stdin
        # must not hold the host past its own timeout (which ends the stream).
        sender = threading.Thread(target=_send_stdin, args=(raw, stdin or b""), daemon=True)
        sender.start()
        try:
            for stream, data in frames_iter(sock, tty=False):  # type: ignore[no-untyped-call]
                buf = out if stream == 1 else err
                room = cap - len(buf)
                if room > 0:
                    buf += data[:room]
                cut = cut or len(data) > room
        finally:
            with contextlib.suppress(OSError):
                raw.shutdown(socket.SHUT_RDWR)  # wakes a sender still blocked on the command's stdin
            sock.close()
            sender.join(HOST_GRACE_S)
        wall = time.monotonic() - started
        code = api.exec_inspect(exec_id)["ExitCode"]
        return bytes(out), bytes(err), cut, int(code if code is not None else -1), wall

    async def _run(
        self,
        argv: list[str],
        *,
        stdin: bytes | None = None,
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
        timeout: float | None = None,  # noqa: ASYNC109 - the per-call limit is the contract
    ) -> tuple[bytes, bytes, bool, int, float, bool]:
        self._check_open()
        limit = min(timeout, self.policy.wall_time_s) if timeout is not None else self.policy.wall_time_s
        workdir = str(sandbox_path(cwd, self.policy.workdir)) if cwd else self.policy.workdir
        try:
            async with self._lock:
                out, err, cut, code, wall = await asyncio.wait_for(
                    asyncio.to_thread(
                        self._run_blocking,
                        argv,
                        stdin,
                        env or {},
                        workdir,
                        limit,
                        self.policy.max_output_bytes,
                    ),
                    limit + 2 * HOST_GRACE_S,
                )
        except (TimeoutError, OSError) as exc:
            raise SandboxError(f"the container stopped answering: {exc}") from exc
        timed_out = code == 137 and wall >= limit
        return out, err, cut, code, wall, timed_out

    async def exec(
        self,
        command: Command,
        *,
        stdin: str | bytes | None = None,
        timeout: float | None = None,  # noqa: ASYNC109 - the per-call limit is the contract
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
    ) -> ExecResult:
        data = stdin.encode() if isinstance(stdin, str) else stdin
        stats = self._cgroup_file("memory", "memory.oom_control")
        oom_before = _oom_kills(stats)
        self._reset_counters()
        out, err, cut, code, wall, timed_out = await self._run(
            to_argv(command), stdin=data, env=env, cwd=cwd, timeout=timeout
        )
        oom = _oom_kills(stats) > oom_before if stats else False
        return ExecResult(
            stdout=out.decode(errors="replace"),
            stderr=err.decode(errors="replace"),
            exit_code=-1 if timed_out else code,
            timed_out=timed_out,
            oom_killed=oom,
            output_truncated=cut,
            wall_time_s=wall,
            cpu_time_s=_read_int(self._cgroup_file("cpuacct", "cpuacct.usage"), 1e-9),
            peak_memory_bytes=_read_int(self._cgroup_file("memory", "memory.max_usage_in_bytes"), 1),
        )

    def _cgroup_file(self, controller: str, name: str) -> Path | None:
        """The container's cgroup v1 file, when the engine runs on this host with the cgroupfs driver."""
        path = CGROUP_V1 / controller / "docker" / self._container.id / name
        return path if path.exists() else None

    def _reset_counters(self) -> None:
        for controller, name in (("memory", "memory.max_usage_in_bytes"), ("cpuacct", "cpuacct.usage")):
            path = self._cgroup_file(controller, name)
            if path is not None:
                with contextlib.suppress(OSError):
                    path.write_text("0")

    # -- background programs --------------------------------------------------------------------------

    async def start_background(self, command: Command, *, env: Mapping[str, str] | None = None) -> Background:
        """A `docker exec` that stays: its root (pid:start-time) joins `_keep`, so the commands' clean-up
        spares it and its descendants; its stdin, stdout and stderr stream over the exec's socket.

        Started under the commands' lock: no command's clean-up can run before it is kept."""
        self._check_open()
        argv = to_argv(command)
        async with self._lock:
            exec_id, sock = await asyncio.to_thread(self._start_exec, argv, env or {})
            background = await ExecBackground.open(self, exec_id, sock)
            self._backgrounds.add(background)
            line = b""
            with contextlib.suppress(TimeoutError, ValueError):
                line = await asyncio.wait_for(background.stdout.readline(), BACKGROUND_START_S)
            root = line.decode(errors="replace").removeprefix("envhub-background ").strip()
            if line.startswith(b"envhub-background ") and ":" in root:
                background.root = root
                self._keep.add(root)
                return background
        await asyncio.shield(self._run(["true"]))  # not kept: this command's clean-up kills it
        raise SandboxError(
            f"the background program did not start in the container (it said {line[:200]!r}); "
            f"the image {self.image} needs sh and /proc"
        )

    def _start_exec(self, argv: list[str], env: Mapping[str, str]) -> tuple[str, Any]:
        api = self._client.api
        exec_id = api.exec_create(
            self._container.id,
            ["sh", "-c", _BACKGROUND, "envhub-background", *argv],
            stdin=True,
            stdout=True,
            stderr=True,
            environment=dict(env),
            workdir=self.policy.workdir,
            user=self.exec_user,
        )["Id"]
        return exec_id, api.exec_start(exec_id, socket=True)

    async def _stop_background(self, root: str) -> None:
        """No longer spared: the clean-up after one more command kills its whole tree."""
        self._keep.discard(root)
        if not self._closed:
            await self._run(["true"])

    # -- files ----------------------------------------------------------------------------------------

    async def write_file(self, path: str, data: str | bytes, *, mode: int = 0o644) -> None:
        target = str(sandbox_path(path, self.policy.workdir))
        payload = data.encode() if isinstance(data, str) else data
        # stdin is read in full before a refusal, so the host's write of it never waits on the command.
        script = (
            f"{_SPECIAL_CHECK.replace('exit 3', 'cat >/dev/null; exit 3')}"
            'mkdir -p "$(dirname "$1")" && cat > "$1" && chmod "$2" "$1"'
        )
        _, err, _, code, _, _ = await self._run(
            ["sh", "-c", script, "sh", target, f"{mode:o}"], stdin=payload
        )
        if code != 0:
            message = err.decode(errors="replace")
            raise _refused(err, path) or PermissionError(
                f"writing {target} in the container failed: {message}"
            )

    async def read_file(self, path: str) -> bytes:
        target = str(sandbox_path(path, self.policy.workdir))
        saved, self.policy = self.policy, self.policy.model_copy(update={"max_output_bytes": 1 << 30})
        try:
            script = _SPECIAL_CHECK.replace('[ -L "$1" ]', "false") + 'exec cat -- "$1"'
            out, err, _, code, _, _ = await self._run(["sh", "-c", script, "sh", target])
        finally:
            self.policy = saved
        if code != 0:
            refused = _refused(err, path)
            if refused is not None:
                raise refused
            message = err.decode(errors="replace")
            if "No such file" in message:
                raise FileNotFoundError(path)
            raise PermissionError(f"reading {target} in the container failed: {message.strip()}")
        return out

    async def upload_dir(self, local_dir: str | Path, dest: str) -> None:
        target = str(sandbox_path(dest, self.policy.workdir))
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w") as tar:
            tar.add(str(local_dir), arcname=".")
        _, err, _, code, _, _ = await self._run(
            ["sh", "-c", 'mkdir -p "$1" && tar -x --no-same-owner -C "$1"', "sh", target],
            stdin=buf.getvalue(),
        )
        if code != 0:
            raise PermissionError(f"uploading to {target} failed: {err.decode(errors='replace')}")

    async def download(self, path: str, local_dest: str | Path) -> None:
        target = sandbox_path(path, self.policy.workdir)
        saved, self.policy = self.policy, self.policy.model_copy(update={"max_output_bytes": 1 << 30})
        try:
            # Refused in the container before anything is sent: a special file or symlink at the path
            # itself, and trees too deep to recreate on the host (PATH_MAX).
            script = (
                'cd "$2" || exit 1; '
                + _SPECIAL_CHECK
                + f'if [ -n "$(find "$1" -mindepth {MAX_TREE_DEPTH + 1} -type d -print -quit)" ]; then '
                'echo "envhub-refused deep" >&2; exit 3; fi; exec tar -c -- "$1"'
            )
            out, err, _, code, _, _ = await self._run(
                ["sh", "-c", script, "sh", target.name or ".", str(target.parent)]
            )
        finally:
            self.policy = saved
        if code != 0:
            refused = _refused(err, path)
            if refused is not None:
                raise refused
            raise FileNotFoundError(f"{path}: {err.decode(errors='replace').strip()}")
        await asyncio.to_thread(_extract, out, target.name, Path(local_dest))

    # -- lifecycle ------------------------------------------------------------------------------------

    async def fork(self) -> DockerSandbox:
        """A new container with this one's policy and files: with `writable_image`, a `docker commit` of
        this container is its image (removed when the fork closes); the tmpfs areas (the workdir,
        unless `writable_image`; /tmp and /dev/shm), which a commit does not hold, are copied by `tar`
        through the host. Processes are not carried."""
        self._check_open()
        image = self.image
        if self.policy.writable_image:
            image = await asyncio.to_thread(self._commit)
        try:
            child = await DockerSandbox.create(self.policy, image=image)
        except BaseException:
            if image != self.image:
                await asyncio.to_thread(_remove_image, self._client, image)
            raise
        child._fork_image = image if image != self.image else None
        child.image = self.image  # what the report names: the image the files came from
        try:
            for area in self._tmpfs_areas():
                await self._copy_area(area, child)
        except BaseException:
            await finish(child.close())
            raise
        return child

    def _commit(self) -> str:
        """Commit the container as a new image, with the parent image's user, not the init's."""
        tag = f"{FORK_REPOSITORY}:{self._container.id[:12]}-{time.monotonic_ns()}"
        repository, _, name = tag.partition(":")
        self._container.commit(
            repository=repository, tag=name, changes=[f"USER {self.exec_user}", f"LABEL {FORK_LABEL}=1"]
        )
        return tag

    def _tmpfs_areas(self) -> list[str]:
        areas = ["/tmp", "/dev/shm"]
        return areas if self.policy.writable_image else [self.policy.workdir, *areas]

    async def _copy_area(self, area: str, child: DockerSandbox) -> None:
        """Copy one tmpfs area into the child, through the host, as each container's command user."""
        saved, self.policy = self.policy, self.policy.model_copy(update={"max_output_bytes": 1 << 40})
        try:
            out, err, _, code, _, _ = await self._run(["sh", "-c", _TAR_AREA, "sh", area])
        finally:
            self.policy = saved
        if code not in (0, 1):  # 1: a file changed while it was read; the copy holds what was there
            raise SandboxError(
                f"reading {area} of the sandbox to fork it failed: {err.decode(errors='replace')}"
            )
        _, err, _, code, _, _ = await child._run(
            ["tar", "--extract", "--file=-", "--no-same-owner", "--preserve-permissions",
             "--directory", area],
            stdin=out,
        )  # fmt: skip
        if code != 0:
            raise SandboxError(f"copying {area} into the fork failed: {err.decode(errors='replace')}")

    async def _close(self) -> None:
        try:
            await asyncio.to_thread(self._container.remove, force=True)
            if self._fork_image is not None:
                await asyncio.to_thread(_remove_image, self._client, self._fork_image)
            # Their programs died with the container; their readers end now, not after the client closes.
            ending = [background.wait() for background in self._backgrounds]
            if ending:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(asyncio.gather(*ending), HOST_GRACE_S)
        finally:
            self._client.close()

    def report(self) -> IsolationReport:
        p = self.policy
        filesystem = f"image {self.image}, read-only root"
        disk = (
            f"tmpfs size={p.disk_mb} MiB, nr_inodes={p.max_files} for {p.workdir} and for /tmp each, "
            f"/dev/shm {p.disk_mb} MiB (a cap per mount, not one total)"
        )
        user = f"commands as uid {EXEC_USER.split(':')[0]}, --cap-drop ALL, no-new-privileges"
        if p.writable_image:
            filesystem = (
                f"writable_image: image {self.image}'s own filesystem, writable in the container's own layer "
                f"(no tmpfs over {p.workdir}, root not read-only); changes die with the container"
            )
            disk = (
                "not enforced for the image's filesystem (writable_image): writes to the container's layer "
                f"have no size cap; only /tmp (tmpfs size={p.disk_mb} MiB, nr_inodes={p.max_files}) and "
                f"/dev/shm ({p.disk_mb} MiB) are capped"
            )
            who = "root (uid 0)" if self.exec_user.split(":")[0] in ("0", "root") else self.exec_user
            user = (
                f"writable_image: commands as the image's user {who}, with no capabilities (--cap-drop ALL: "
                "no chown, mount or permission override; it owns the image's root-owned files), "
                "no-new-privileges; the container's init runs as another uid, out of its reach"
            )
        controls = {
            "network": Enforcement(
                enforced=True,
                how="default bridge (policy allows network)"
                if p.network
                else "--network none: loopback only",
            ),
            "filesystem": Enforcement(
                enforced=True, how=f"{filesystem}; read-only binds {sorted(p.ro_binds.values())}"
            ),
            "disk": Enforcement(enforced=not p.writable_image, how=disk),
            "memory": Enforcement(enforced=True, how=f"--memory={p.memory_mb}m --memory-swap={p.memory_mb}m"),
            "pids": Enforcement(enforced=True, how=f"--pids-limit={p.pids + 2}"),
            "cpu": Enforcement(enforced=True, how=f"--cpus={p.cpus}"),
            "wall_time": Enforcement(
                enforced=True,
                how="coreutils `timeout -s KILL` kills the command's process group; a host-side deadline "
                "backs it",
            ),
            "user": Enforcement(enforced=True, how=user),
            "environment": Enforcement(
                enforced=True,
                how="only the image's ENV, "
                + ("TMPDIR" if p.writable_image else "HOME/LANG/TMPDIR")
                + " and the policy's variables",
            ),
            "seccomp": Enforcement(
                enforced=True,
                how=f"custom profile: {len(seccomp.DENIED_X86_64)} denied calls (ptrace, mount, unshare, "
                "keyctl, bpf, ...), clone() namespace flags refused",
            ),
            "nested_namespaces": Enforcement(
                enforced=True, how="seccomp refuses unshare, setns and clone() with namespace flags"
            ),
        }
        return IsolationReport(
            backend=self.backend,
            policy=p,
            controls=controls,
            image=self.image,
            details={
                "container": self._container.id[:12],
                "mode": "writable_image" if p.writable_image else "read-only root, tmpfs workdir",
                "exec_user": self.exec_user,
            },
        )


_TAR_AREA = 'cd "$1" && find . -mindepth 1 -maxdepth 1 -print0 | tar -c --sparse --null -T - -f -'
"""A tar of what is in the area, not of the area itself: the child's own mount point keeps its owner
and mode (which its command user could not change)."""


def _missing_image(exc: BaseException | None) -> bool:
    """Whether the engine lacked the image: said by the error, or by the one before it (a missing image
    is pulled, and where no registry is reachable the pull's error is the one raised)."""
    while exc is not None:
        if "No such image" in str(exc) or "not found" in str(exc).lower():
            return True
        exc = exc.__cause__ or exc.__context__
    return False


def _remove_image(client: docker.DockerClient, image: str) -> None:
    """Remove a fork's committed image; one a later fork still builds on keeps its layers until then."""
    import docker.errors

    with contextlib.suppress(docker.errors.APIError):
        client.images.remove(image, noprune=False)


def _send_stdin(raw: socket.socket, data: bytes) -> None:
    """Send a command's stdin, then EOF; a command that exits without reading it ends this early."""
    with contextlib.suppress(OSError):
        if data:
            raw.sendall(data)
        raw.shutdown(socket.SHUT_WR)


_SPECIAL_CHECK = (
    'if [ -L "$1" ]; then echo "envhub-refused symlink" >&2; exit 3; fi; '
    'if [ -p "$1" ]; then echo "envhub-refused fifo" >&2; exit 3; fi; '
    'if [ -S "$1" ]; then echo "envhub-refused socket" >&2; exit 3; fi; '
    'if [ -c "$1" ] || [ -b "$1" ]; then echo "envhub-refused device" >&2; exit 3; fi; '
)
"""Shell that refuses a symlink or special file at "$1", saying which on stderr (see `_refused`).

Race-free here: every exec ends by killing every process of the exec uid, so nothing of the agent's
runs between this check and the command after it."""
_KIND_MODES = {"fifo": stat.S_IFIFO, "socket": stat.S_IFSOCK, "device": stat.S_IFCHR}


def _refused(err: bytes, path: str) -> OSError | None:
    """The host-side error for a refusal `_SPECIAL_CHECK` (or the depth check) printed, if any."""
    text = err.decode(errors="replace")
    if "envhub-refused symlink" in text:
        return PermissionError(f"{path} is a symlink; the host does not follow links the sandbox made")
    if "envhub-refused deep" in text:
        return OSError(
            errno.ENAMETOOLONG,
            f"{path} is nested deeper than {MAX_TREE_DEPTH} directories; not copied "
            "(archive it inside the sandbox and download the archive)",
        )
    for kind, mode in _KIND_MODES.items():
        if f"envhub-refused {kind}" in text:
            return not_regular(path, mode)
    return None


def _oom_kills(path: Path | None) -> int:
    if path is None:
        return 0
    for line in path.read_text().splitlines():
        key, _, value = line.partition(" ")
        if key == "oom_kill":
            return int(value)
    return 0


def _read_int(path: Path | None, scale: float) -> Any:
    if path is None:
        return None
    value = int(path.read_text())
    return value * scale if scale != 1 else value


def _extract(data: bytes, name: str, dest: Path) -> None:
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        members = tar.getmembers()
        if name and len(members) == 1 and members[0].isfile():
            source = tar.extractfile(members[0])
            assert source is not None
            dest.parent.mkdir(parents=True, exist_ok=True)
            dest.write_bytes(source.read())
            return
        prefix = f"{name}/" if name else ""
        dest.mkdir(parents=True, exist_ok=True)
        for member in members:
            # Symlinks, hard links, pipes and devices are skipped, as the local backend skips them.
            if not (member.isfile() or member.isdir()) or not member.name.startswith(prefix):
                continue
            member.name = member.name[len(prefix) :]
            if member.name:
                tar.extract(member, dest, filter="data")


class _StdinWriter(asyncio.StreamWriter):
    """The exec socket's writing half: `close()` sends EOF (a half-close), as closing a pipe would, and
    leaves the program's output streams open; the socket itself closes when the program ends."""

    def close(self) -> None:
        if not self.transport.is_closing() and self.can_write_eof():
            with contextlib.suppress(OSError):
                self.write_eof()


class ExecBackground(Background):
    """A background program in a container: a kept `docker exec` whose socket carries its stdin (raw)
    and its stdout and stderr (Docker's 8-byte-header frames, split here into two streams).

    Hand-written framing rather than the SDK's `frames_iter`: that one blocks a thread per read, and the
    streams must be asyncio's, read as lines while the program runs."""

    def __init__(
        self,
        sandbox: DockerSandbox,
        exec_id: str,
        sdk_sock: Any,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
    ) -> None:
        self._sandbox = sandbox
        self._exec_id = exec_id
        self._sdk_sock = sdk_sock  # held: closing the SDK's wrapper would close the connection under us
        self.root = ""
        self._returncode: int | None = None
        limit = 4 * sandbox.policy.max_output_bytes + 65536
        self._writer = writer  # held: a collected StreamWriter closes its transport
        protocol = writer.transport.get_protocol()
        self.stdin = _StdinWriter(writer.transport, protocol, reader, asyncio.get_running_loop())
        self.stdout = asyncio.StreamReader(limit=limit)
        self.stderr = asyncio.StreamReader(limit=limit)
        self._ended = asyncio.Event()
        self._pump = asyncio.create_task(self._read(reader))

    @classmethod
    async def open(cls, sandbox: DockerSandbox, exec_id: str, sdk_sock: Any) -> ExecBackground:
        raw: socket.socket = sdk_sock._sock.dup()
        reader, writer = await asyncio.open_connection(sock=raw, limit=1 << 20)
        return cls(sandbox, exec_id, sdk_sock, reader, writer)

    async def _read(self, reader: asyncio.StreamReader) -> None:
        try:
            while True:
                header = await reader.readexactly(8)
                size = int.from_bytes(header[4:8], "big")
                data = await reader.readexactly(size) if size else b""
                (self.stderr if header[0] == 2 else self.stdout).feed_data(data)
        except (asyncio.IncompleteReadError, OSError):
            pass
        finally:
            self.stdout.feed_eof()
            self.stderr.feed_eof()
            self.stdin.transport.abort()
            with contextlib.suppress(OSError):
                self._sdk_sock.close()
            self._sandbox._keep.discard(self.root)  # its pid may be another process's next
            self._returncode = await self._exit_code()
            self._sandbox._backgrounds.discard(self)
            self._ended.set()

    async def _exit_code(self) -> int:
        """The exec's exit status once Docker has it; -9 when the container went (a closed sandbox)."""
        for _ in range(50):
            try:
                info = await asyncio.to_thread(self._sandbox._client.api.exec_inspect, self._exec_id)
            except Exception:
                return -9
            if not info.get("Running") and info.get("ExitCode") is not None:
                return int(info["ExitCode"])
            await asyncio.sleep(0.1)
        return -9

    @property
    def returncode(self) -> int | None:
        return self._returncode

    async def wait(self) -> int:
        await self._ended.wait()
        assert self._returncode is not None
        return self._returncode

    async def kill(self) -> None:
        if self._ended.is_set():
            return
        await self._sandbox._stop_background(self.root)
        try:
            await asyncio.wait_for(self._ended.wait(), HOST_GRACE_S)
        except TimeoutError:
            raise SandboxError(
                f"a background program (root {self.root}) did not end within {HOST_GRACE_S:g} s of its "
                "kill; close this sandbox and open a new one"
            ) from None
