"""A real multi-node Ray cluster on this one host, for the tests: a head and worker nodes, each its own
raylet (`ray start --block`) with its own custom resources, started and stopped by the test that uses it.

Isolated from any other Ray on the machine (other envhub users run tests beside ours): its own temp
dir, its own free ports for every listener, nothing written to `/tmp/ray`, and it never runs
`ray stop`. Each node's processes (`ray start --block`, the raylet, agents, workers) carry the node's
name in their environment, so `kill(node)` SIGKILLs exactly one node, as a lost machine
would, and `stop()` only the processes it started.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

MARKER = "ENVHUB_TEST_RAY_NODE"
"""The environment variable, `TEMP_DIR:NAME`, that every process of a node inherits: how it is found."""

START_TIMEOUT = 120.0
"""Seconds a node may take to join: a loaded 2-core host needs tens of seconds for three raylets."""


PORTS = range(24000, 32000)
"""Where the cluster's fixed ports are drawn from: below Linux's ephemeral range (32768 on), so no
outgoing connection takes one between its draw and its bind, and apart from Ray's worker ports (10002
to 19999) and the Ray Client's per-job servers (23000 on)."""


def free_ports(count: int) -> list[int]:
    """`count` distinct ports nothing listens on now, drawn at random from `PORTS`."""
    held: list[socket.socket] = []
    try:
        for port in random.sample(PORTS, len(PORTS)):
            probe = socket.socket()
            try:
                probe.bind(("", port))
            except OSError:
                probe.close()
                continue
            held.append(probe)
            if len(held) == count:
                return [s.getsockname()[1] for s in held]
        raise RuntimeError(f"no {count} free ports in {PORTS}")
    finally:
        for probe in held:
            probe.close()


@dataclass(frozen=True)
class NodeSpec:
    """One node of the cluster: its readable name, CPUs and custom resources."""

    name: str
    cpus: int
    resources: dict[str, float] = field(default_factory=dict)


@dataclass
class Node:
    spec: NodeSpec
    process: subprocess.Popen[bytes]
    log: Path


@dataclass
class RayCluster:
    """A running cluster: `address` is the GCS's `HOST:PORT` (`ray.init(address=...)` joins it),
    `client_address` the Ray Client's `ray://HOST:PORT`."""

    address: str
    client_address: str
    temp_dir: Path
    nodes: dict[str, Node] = field(default_factory=dict)

    def node_ids(self) -> dict[str, str]:
        """Node name -> Ray node id, for the nodes alive now (needs `ray.init` to this cluster)."""
        import ray

        names = {n.spec.name for n in self.nodes.values()}
        found: dict[str, str] = {}
        for info in ray.nodes():  # type: ignore[no-untyped-call]
            resources = info.get("Resources", {})
            if info.get("Alive"):
                for name in names:
                    if resources.get(node_resource(name)):
                        found[name] = info["NodeID"]
        return found

    def processes(self, name: str) -> set[int]:
        """Every process of node `name`: its `ray start`, raylet, agents and workers. Each inherited the
        node's `MARKER` (Ray gives workers process groups of their own, and envhub's sandbox code makes
        the test process a subreaper of orphans, so neither the group nor the tree is the node)."""
        return marked(f"{MARKER}={self.temp_dir}:{name}".encode())

    def node_of(self, pid: int) -> str:
        """The node whose process tree holds `pid`."""
        [name] = [name for name in self.nodes if pid in self.processes(name)]
        return name

    def kill(self, name: str) -> None:
        """SIGKILL every process of node `name` (its raylet, workers and agents) at once: a lost machine."""
        node = self.nodes[name]
        doomed = self.processes(name)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(node.process.pid, signal.SIGKILL)
        for pid in doomed:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        node.process.wait()

    def stop(self) -> None:
        """Stop the nodes this cluster started, workers first; only their own processes."""
        left = {pid for name in self.nodes for pid in self.processes(name)}
        for node in reversed(list(self.nodes.values())):
            if node.process.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(node.process.pid, signal.SIGTERM)
        for node in self.nodes.values():
            with contextlib.suppress(subprocess.TimeoutExpired):
                node.process.wait(timeout=5)
            with contextlib.suppress(ProcessLookupError):  # stragglers of the group (agents, workers)
                os.killpg(node.process.pid, signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                node.process.wait(timeout=5)
        for pid in left:  # a worker whose raylet is gone exits by itself; one that has not yet, now
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        shutil.rmtree(self.temp_dir, ignore_errors=True)


def marked(entry: bytes) -> set[int]:
    """The processes whose environment holds `entry` (`NAME=value`), found through /proc."""
    found = set()
    for environ in Path("/proc").glob("[0-9]*/environ"):
        try:
            if entry in environ.read_bytes().split(b"\0"):
                found.add(int(environ.parent.name))
        except (OSError, ValueError):
            continue  # gone while we looked
    return found


def node_resource(name: str) -> str:
    """The resource that names a node (`node-NAME`, 1 unit): how a test finds which node is which."""
    return f"node-{name}"


def _start(spec: NodeSpec, temp_dir: Path, env: dict[str, str], ports: list[int], address: str) -> Node:
    """Start one node's `ray start --block`, in a session of its own, its processes marked as its own.

    `ports`: the dashboard agent's, then for the head its GCS's and its Ray Client server's. The other
    listeners (node manager, object manager, metrics, runtime env agent) bind port 0, the OS's pick,
    so no default port (6379, 10001, 52365) is shared with another Ray on the host."""
    resources = {**spec.resources, node_resource(spec.name): 1}
    command = [
        str(Path(sys.executable).with_name("ray")), "start", "--block", "--disable-usage-stats",
        "--node-ip-address", "127.0.0.1", "--num-cpus", str(spec.cpus), "--num-gpus", "0",
        "--resources", json.dumps(resources), "--object-store-memory", str(100 * 2**20),
        "--temp-dir", str(temp_dir), "--min-worker-port", "0", "--max-worker-port", "0",
        "--dashboard-agent-listen-port", str(ports[0]),
    ]  # fmt: skip
    if len(ports) == 3:
        _, port, client_port = ports
        command += ["--head", "--port", str(port), "--ray-client-server-port", str(client_port)]
        command += ["--include-dashboard", "false"]
    else:
        command += ["--address", address]
    log = temp_dir / f"{spec.name}.log"
    env = {**env, MARKER: f"{temp_dir}:{spec.name}"}
    with log.open("wb") as out:
        process = subprocess.Popen(
            command, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True
        )
    return Node(spec, process, log)


def _wait_for(cluster: RayCluster, names: list[str]) -> None:
    """Wait until every node in `names` is alive in the cluster (this process is its driver), failing
    with the node's log if one exits."""
    deadline = time.monotonic() + START_TIMEOUT
    while True:
        for name in names:
            node = cluster.nodes[name]
            if node.process.poll() is not None:
                raise RuntimeError(f"Ray node {name} exited while starting:\n{node.log.read_text()[-3000:]}")
        if set(names) <= set(cluster.node_ids()):
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"Ray nodes {names} did not join within {START_TIMEOUT:.0f} s")
        time.sleep(0.5)


def _driver_auth_mode(mode: str | None) -> str | None:
    """Set this process's Ray authentication mode (None: unset, which Ray reads as disabled); returns
    the one it replaces. The driver (this process, and the commands it runs) must use the cluster's:
    a local `ray.init` switches its process to token mode for good, while a process that never ran one
    is in disabled mode, and Ray reads the mode once, so it is refreshed as Ray's own setup does."""
    from ray._raylet import Config  # type: ignore[attr-defined]

    previous = os.environ.get("RAY_AUTH_MODE")
    if mode is None:
        os.environ.pop("RAY_AUTH_MODE", None)
    else:
        os.environ["RAY_AUTH_MODE"] = mode
    Config.initialize("")
    return previous


def _ensure_token() -> None:
    """A cluster started in token mode reads the token from ~/.ray/auth_token, and `ray start` does not
    make one; a local `ray.init` does, so a machine that never ran one has none (and the cluster would
    not start). Make it the way that `ray.init` would, with Ray's own function, unless one is given."""
    from ray._private.authentication.authentication_token_setup import generate_and_save_token

    if os.environ.get("RAY_AUTH_TOKEN") or os.environ.get("RAY_AUTH_TOKEN_PATH"):
        return
    if not (Path.home() / ".ray" / "auth_token").exists():
        generate_and_save_token()


@contextlib.contextmanager
def ray_cluster(head: NodeSpec, workers: list[NodeSpec], pythonpath: list[str]) -> Iterator[RayCluster]:
    """A cluster of `head` and `workers`, each node a raylet with its resources plus `node-NAME`, this
    process connected to it as its driver; stopped (its own processes only) on exit. Its workers import
    from `pythonpath` too."""
    import ray

    temp_dir = Path(tempfile.mkdtemp(prefix="envhub-rc-", dir="/tmp"))  # short: Ray's socket paths must fit
    ports = free_ports(3 + len(workers))
    port, client_port = ports[1], ports[2]
    address = f"127.0.0.1:{port}"
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([*pythonpath, os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep),
        "RAY_USAGE_STATS_ENABLED": "0",
        "RAY_ADDRESS": "",
        "RAY_AUTH_MODE": "token",  # Ray's default for a started cluster: the token is ~/.ray/auth_token
        # A killed node is declared dead after ~3 s rather than Ray's default ~30 s:
        "RAY_health_check_period_ms": "1000",
        "RAY_health_check_timeout_ms": "1000",
        "RAY_health_check_failure_threshold": "3",
        "RAY_CLIENT_SERVER_CHECK_CHANNEL_TIMEOUT_S": "120",  # a Ray Client's server starts slowly when loaded
    }
    cluster = RayCluster(address, f"ray://127.0.0.1:{client_port}", temp_dir)
    _ensure_token()
    auth_mode = _driver_auth_mode("token")
    try:
        cluster.nodes[head.name] = _start(head, temp_dir, env, ports[:3], address)
        ray.init(address=address, logging_level=logging.WARNING)
        _wait_for(cluster, [head.name])
        for spec, agent_port in zip(workers, ports[3:], strict=True):  # one at a time: nodes sharing a
            cluster.nodes[spec.name] = _start(spec, temp_dir, env, [agent_port], address)  # temp dir race
            _wait_for(cluster, [spec.name])  # for their socket names (bind: Address already in use)
        yield cluster
    finally:
        ray.shutdown()
        cluster.stop()
        _driver_auth_mode(auth_mode)
