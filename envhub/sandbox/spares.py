"""The started spares behind `envhub.sandbox.open("local")`: a cold open takes a ready sandbox and a fresh
one is prepared in the background. A spare is handed out once and never taken back.

How many are kept follows the opens: each event loop times its opens and how long a spare takes to
make, and keeps about as many spares made or in the making as would be taken while one is made
(`wanted`, Little's law with headroom), at least ENVHUB_SANDBOX_SPARES and at most MAX_TARGET. They are
made side by side: a making waits on the kernel as much as it computes, and the next open's spare is
then made on another core while an episode runs.

The replacement for a spare taken starts just after that sandbox is closed, or REPLACE_AFTER_S after it
was taken if it is still open then: not at once, since building a sandbox takes milliseconds of CPU and
would compete, for the host's cores and its event loop, with the very first commands of the episode
that took the spare. An open that finds no spare ready makes its own, and the spares top up at once.
(Waiting for a spare already in the making instead was tried: slower back to back in our runs, since
the open's own sandbox is work the spares then do not have to do.)

Policies: the default one has spares from the first open; another policy gets its own spares once it
has been opened twice in the loop (an environment's grading policy, say), up to MAX_POLICIES of them. A
policy with read-only binds or network gets none: a bind made ahead would show a host path as it was
when the spare started (a file replaced since, by rename, would be the old one), and the network's
/etc files likewise.

Above the backends: `open` asks here before it asks a backend, so the local backend itself knows nothing
of spares and no import runs back down into it.
"""

from __future__ import annotations

import asyncio
import atexit
import collections
import contextlib
import contextvars
import logging
import math
import weakref
from collections.abc import Callable
from typing import Any

from envhub.sandbox.backends import create
from envhub.sandbox.base import Sandbox
from envhub.sandbox.policy import IsolationPolicy
from envhub.settings import settings, variable

log = logging.getLogger(__name__)

SPARES_ENV = variable("sandbox_spares")
"""How many started sandboxes `open("local")` keeps ready at least per event loop for the default
policy (default 1, at most MAX_SPARES); 0 turns spares off, for every policy."""
MAX_SPARES = 8
MAX_TARGET = 16
"""The most spares one policy keeps (made or in the making) when opens come fast: a rollout at
concurrency 8 opens a sandbox as each of its episodes ends."""
MAX_POLICIES = 4
"""The most policies of one event loop with spares of their own (the default one included)."""
HEADROOM = 2.5
"""Spares kept per spare taken while one is made: opens come in bursts, and making slows under load.
Back to back at concurrency 1 (benchmarks/sandbox_opens.py, load 8-10), 1.5 left 15-22% of opens with no
spare ready, 2.0 and 2.5 about 5%, 3.0 3%."""
RATE_WINDOW = 8
"""How many of the latest opens the open rate is measured over."""
FIRST_BUILD_S = 0.05
"""What a spare's making is assumed to take until one has been timed."""
REPLACE_AFTER_S = 0.1
"""How long after a spare is taken its replacement starts, if the episode has not closed it by then: the
episode's first commands (its set-up, usually) run on a host not busy building the next sandbox."""
START_DELAY_S = 0.01
"""How long a spare's making waits before it starts a process. Not at once: a program's last act is often
the close or open that asked for it, and a sandbox start begun in the event loop's last turn, cancelled
by asyncio.run's shutdown before asyncio connected the process's pipes, never hears of the process's exit
(Python 3.11): the program would hang. Cancelled while it waits, the making just stops."""
_spares: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Spares] = weakref.WeakKeyDictionary()
"""Each event loop's spares of the default policy."""
_policy_spares: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[str, Spares]]
_policy_spares = weakref.WeakKeyDictionary()
"""Each event loop's spares of other policies, by `_key`."""
_guards: set[asyncio.Task[None]] = set()


def spare_count() -> int:
    return max(0, min(settings().sandbox_spares, MAX_SPARES))


def wanted(rate: float, build_s: float, floor: int) -> int:
    """Spares to keep (ready or in the making) when opens come at `rate` a second and one takes `build_s`
    to make: those taken while one is made, with HEADROOM, between `floor` and MAX_TARGET."""
    return max(floor, math.ceil(min(float(MAX_TARGET), rate * build_s * HEADROOM)))  # rate may be inf


def _key(policy: IsolationPolicy) -> str | None:
    """The key of this policy's spares, or None where it may have none (see the module)."""
    if policy.ro_binds or policy.network:
        return None
    return policy.model_dump_json()


async def take_spare(policy: IsolationPolicy) -> Sandbox | None:
    """A started local sandbox for `policy` if one is ready, else None (and then spares start warming)."""
    count = spare_count()
    key = _key(policy)
    if count == 0 or key is None:
        return None
    spares = _loop_spares(key, policy, count)
    return None if spares is None else spares.take()


def spares_counts() -> tuple[int, int]:
    """Opens of the default policy in this event loop that found a spare ready, and those that found none
    (the benchmark prints them)."""
    spares = _spares.get(asyncio.get_running_loop())
    return (0, 0) if spares is None else (spares.taken, spares.missed)


def spares_idle(policy: IsolationPolicy | None = None) -> int:
    """How many started spares this event loop has ready for `open("local")` with `policy` (default: the
    default policy; the benchmark waits on it)."""
    loop = asyncio.get_running_loop()
    if policy is None or policy == IsolationPolicy():
        spares = _spares.get(loop)
    else:
        spares = _policy_spares.get(loop, {}).get(_key(policy) or "")
    return 0 if spares is None or spares.closed else spares.idle


class OpenRate:
    """The rate of the latest RATE_WINDOW opens, as seen at each new one (so a pause lowers it)."""

    def __init__(self) -> None:
        self._times: collections.deque[float] = collections.deque(maxlen=RATE_WINDOW)

    def opened(self, now: float) -> None:
        self._times.append(now)

    def per_second(self, now: float) -> float:
        """Opens a second over the window that ends `now`; 0 with fewer than two opens."""
        if len(self._times) < 2:
            return 0.0
        span = now - self._times[0]
        return (len(self._times) - 1) / span if span > 0 else math.inf


class Spares:
    """Started local sandboxes of one policy: at least `count`, more while opens come fast."""

    def __init__(self, count: int, policy: IsolationPolicy | None = None) -> None:
        self.count = count
        self.policy = policy or IsolationPolicy()
        self.rate = OpenRate()
        self.build_s = FIRST_BUILD_S
        """How long the latest spares took to make (a moving average), START_DELAY_S included."""
        self.target = count
        """How many spares are wanted now (ready and in the making): `wanted` at the latest open."""
        self._ready: collections.deque[Sandbox] = collections.deque()
        self._warming: set[asyncio.Task[None]] = set()
        self._timers: set[asyncio.TimerHandle] = set()
        self._closed = False
        self.last_error: BaseException | None = None
        self.guard: asyncio.Task[None] | None = None
        """The task that closes these spares when the loop shuts down (`_guard`), or sooner if cancelled."""
        self.taken = 0
        self.missed = 0
        """Opens that found a spare ready, and those that found none."""

    @property
    def idle(self) -> int:
        return len(self._ready)

    @property
    def making(self) -> int:
        return len(self._warming)

    @property
    def closed(self) -> bool:
        return self._closed

    def take(self) -> Sandbox | None:
        """A ready spare handed over for good (its replacement comes later, see the module), or None
        (then spares start warming at once, side by side up to `target`)."""
        if self._closed:
            return None
        now = asyncio.get_running_loop().time()
        self.rate.opened(now)
        self.target = wanted(self.rate.per_second(now), self.build_s, self.count)
        if not self._ready:
            self.missed += 1
            self.warm()
            return None
        self.taken += 1
        sandbox = self._ready.popleft()
        self._replace_later(sandbox)
        return sandbox

    def _replace_later(self, sandbox: Sandbox) -> None:
        """Warm a replacement when `sandbox` closes or REPLACE_AFTER_S from now, whichever is first."""
        timer = asyncio.get_running_loop().call_later(REPLACE_AFTER_S, self._due, None)
        self._timers.add(timer)
        on_closed: Callable[[Callable[[], None]], None] = sandbox.on_closed  # type: ignore[attr-defined]
        on_closed(lambda: self._due(timer))

    def _due(self, timer: asyncio.TimerHandle | None) -> None:
        """A replacement is due: its timer fired (None), or the spare closed (its `timer`, cancelled)."""
        if timer is not None:
            timer.cancel()
        now = asyncio.get_running_loop().time()
        self._timers = {t for t in self._timers if not t.cancelled() and t.when() > now}  # those pending
        self.warm()

    def warm(self) -> None:
        """Start making spares, side by side, until `target` are ready or in the making."""
        loop = asyncio.get_running_loop()
        while not self._closed and len(self._ready) + len(self._warming) < max(self.target, self.count):
            # A spare belongs to no episode: made in an empty context, it never joins the recording or
            # the replay of the episode whose open asked for it (a replay's would make it a stand-in).
            task = loop.create_task(self._make(), name="envhub sandbox spare", context=contextvars.Context())
            self._warming.add(task)

    async def _make(self) -> None:
        loop = asyncio.get_running_loop()
        started = loop.time()
        task = asyncio.current_task()
        try:
            await asyncio.sleep(START_DELAY_S)
            sandbox = await create("local", self.policy, None, {"start_server": True})
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # logged, and kept for whoever looks: open() makes its own sandboxes
            self.last_error = exc
            log.warning("could not start a spare sandbox: %s", exc)
            return
        finally:
            self._warming.discard(task)  # type: ignore[arg-type, unused-ignore]
        self.build_s = 0.75 * self.build_s + 0.25 * (loop.time() - started)
        if self._closed:
            await sandbox.close()
            return
        self._ready.append(sandbox)
        self.warm()

    async def close(self) -> None:
        """Close the ready spares and stop making new ones (spares handed out are their owners')."""
        self._closed = True
        for timer in self._timers:
            timer.cancel()
        self._timers.clear()
        warming = list(self._warming)
        for task in warming:
            if not task.cancelling():  # a loop's shutdown cancels them too: once is enough to stop one
                task.cancel()
        await asyncio.gather(*warming, return_exceptions=True)
        self._warming.clear()
        doomed = list(self._ready)
        self._ready.clear()
        await asyncio.gather(*(sandbox.close() for sandbox in doomed), return_exceptions=True)

    def abandon(self) -> None:
        """Free the ready spares without an event loop (it is gone): processes, scratch and slot."""
        self._closed = True
        while self._ready:
            abandon: Any = getattr(self._ready.popleft(), "abandon", None)  # local sandboxes have it
            if abandon is not None:
                with contextlib.suppress(Exception):  # best effort at exit: the next process sweeps the rest
                    abandon()


_first_opens: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[str, float]] = (
    weakref.WeakKeyDictionary()
)
"""When each policy without spares yet was first opened in each loop: its second open starts its spares."""


def _loop_spares(key: str, policy: IsolationPolicy, count: int) -> Spares | None:
    """This event loop's spares for `policy` (of `key`): made on its first open (another policy's on its
    second), and closed when the loop shuts down (asyncio.run and every asyncio.Runner cancel what is
    still pending then, which ends the guard task below). None while a policy has none yet."""
    loop = asyncio.get_running_loop()
    default = policy == IsolationPolicy()
    spares = _spares.get(loop) if default else _policy_spares.get(loop, {}).get(key)
    if spares is not None and not spares.closed:
        return spares
    for other in [*_spares, *_policy_spares]:
        if other.is_closed():  # closed without shutting down its tasks: clean up what it left
            for stale in _of_loop(other):
                stale.abandon()
            _spares.pop(other, None)
            _policy_spares.pop(other, None)
    if default:
        spares = _spares[loop] = Spares(count, policy)
    else:
        firsts = _first_opens.setdefault(loop, {})
        if key not in firsts:
            firsts[key] = loop.time()
            return None
        others = _policy_spares.setdefault(loop, {})
        if sum(not each.closed for each in others.values()) >= MAX_POLICIES - 1:
            return None
        # Another policy has no floor: its spares come from its open rate alone.
        spares = others[key] = Spares(0, policy)
        spares.rate.opened(firsts[key])
    guard = spares.guard = loop.create_task(_guard(spares), name="envhub sandbox spares")
    _guards.add(guard)
    guard.add_done_callback(_guards.discard)
    return spares


async def close_spares() -> None:
    """Close this event loop's spares, every policy's, now rather than at the loop's end: for a program
    about to spend a while without sandboxes (a training phase between rollouts), and for a check that
    counts what sandboxes left behind. The next open starts spares anew."""
    loop = asyncio.get_running_loop()
    guards = [spares.guard for spares in _of_loop(loop) if spares.guard is not None]
    _spares.pop(loop, None)
    _policy_spares.pop(loop, None)
    _first_opens.pop(loop, None)
    for guard in guards:
        guard.cancel()  # what a loop's shutdown does: each guard closes its spares as it ends
    await asyncio.gather(*guards, return_exceptions=True)


def _of_loop(loop: asyncio.AbstractEventLoop) -> list[Spares]:
    """Every policy's spares of `loop`."""
    default = _spares.get(loop)
    return [*([default] if default is not None else []), *_policy_spares.get(loop, {}).values()]


async def _guard(spares: Spares) -> None:
    """Wait until cancelled (the loop is shutting down, or `close_spares`), then close the spares."""
    try:
        await asyncio.Event().wait()
    finally:
        await spares.close()


@atexit.register
def _abandon_all() -> None:
    for loop in [*_spares, *_policy_spares]:
        for spares in _of_loop(loop):
            spares.abandon()
    _spares.clear()
    _policy_spares.clear()
