"""The fleet: opens each sandbox on the first provider, in the declared order, that has room and works.

A provider at its quota is skipped (or waited for, `when_full="wait"`); one that cannot honour the
policy or image, is unavailable, or fails to create is skipped for the next. Creations wait their turn
under the provider's rate limit. Every sandbox handed out has a lease, renewed in the background and
removed when the sandbox closes; `report().backend` says which provider it ran on.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import threading
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from typing import Any

from envhub.sandbox.base import Sandbox
from envhub.sandbox.fleet.config import FleetConfig, Provider
from envhub.sandbox.fleet.leases import Heartbeat, Lease, LeaseBook, default_lease_dir
from envhub.sandbox.fleet.limits import Quota, TokenBucket
from envhub.sandbox.intercept import Interceptor
from envhub.sandbox.policy import IsolationPolicy
from envhub.sandbox.results import SandboxError, SandboxUnavailable

log = logging.getLogger(__name__)

SHARED_POLL_S = 0.5

Create = Callable[[Any, IsolationPolicy, str | None, dict[str, Any]], Awaitable[Sandbox]]

FAILOVER_ERRORS: tuple[type[BaseException], ...] = (SandboxError, OSError, RuntimeError, ValueError)
"""What a provider's `create` raises when it cannot serve (unavailable, engine down, slots exhausted,
an option it refuses): the next provider is tried. Anything else is a bug and propagates."""


def sandbox_ref(sandbox: Sandbox) -> str:
    """The provider's own name for a sandbox: what the reaper needs to find and remove it."""
    if sandbox.backend == "local":
        return str(sandbox._scratch)  # type: ignore[attr-defined]  # the scratch area, named after its owner
    if sandbox.backend == "docker":
        return str(sandbox._container.id)  # type: ignore[attr-defined]
    return str(sandbox.report().details.get("sandbox_id", ""))


class Fleet:
    """Sandboxes across providers under quotas, rate limits, leases and failover (see the module)."""

    def __init__(self, config: FleetConfig | None = None, *, create: Create | None = None) -> None:
        self.config = config or FleetConfig()
        self._create = create
        self.quotas: dict[str, Quota] = {p.name: Quota(p.max_concurrent) for p in self.config.providers}
        self.buckets: dict[str, TokenBucket] = {
            p.name: TokenBucket(p.rate_per_s, p.burst) for p in self.config.providers if p.rate_per_s
        }
        self.book = LeaseBook(self.config.lease_dir or default_lease_dir(), self.config.lease_ttl_s)
        self.heartbeat = Heartbeat(self.book, self.config.heartbeat_s)
        self.opened: Counter[str] = Counter()
        """Sandboxes handed out per provider, since the fleet was made."""
        self.failures: list[str] = []
        """Why a provider was passed over for a failure (not for a full quota), in order."""
        self._waiters: list[asyncio.Future[None]] = []
        self._failed_at: dict[str, float] = {}
        self._swept = not self.config.reap_on_start

    async def open(
        self, policy: IsolationPolicy, image: str | None = None, options: dict[str, Any] | None = None
    ) -> Sandbox:
        """A sandbox of the first provider that has room and works; SandboxUnavailable when none can."""
        if not self._swept:
            self._swept = True
            threading.Thread(target=self.reap_orphans, name="envhub-fleet-reaper", daemon=True).start()
        while True:
            refusals: list[str] = []
            wait = False
            for provider in self.config.providers:
                if (why := self._refusal(provider, policy, image) or self._resting(provider)) is not None:
                    refusals.append(f"{provider.name}: {why}")
                    continue
                taken, pending = self._take(provider)
                if not taken:
                    refusals.append(f"{provider.name}: {provider.max_concurrent} sandboxes open, its quota")
                    wait = True
                    if self.config.when_full == "wait":
                        break
                    continue
                try:
                    sandbox = await self._make(provider, policy, image, options or {})
                except FAILOVER_ERRORS as exc:
                    self._drop(provider.name, pending)
                    self._failed_at[provider.name] = time.monotonic()
                    refusals.append(f"{provider.name}: {type(exc).__name__}: {exc}")
                    self.failures.append(refusals[-1])
                    continue
                except BaseException:
                    self._drop(provider.name, pending)
                    raise
                try:
                    return self._hand_out(provider.name, sandbox, pending)
                except BaseException:  # no lease could be written: the sandbox must not run on unleased
                    with contextlib.suppress(Exception):
                        await sandbox.close()
                    raise
            if not wait:
                raise SandboxUnavailable(
                    "no provider of the fleet could open a sandbox: " + "; ".join(refusals)
                )
            await self._released()

    def _take(self, provider: Provider) -> tuple[bool, Lease | None]:
        """A place in the provider's quota: this fleet's count, or (quota_scope "lease_dir") the live
        leases in the directory, counted and joined by a pending lease under the directory's lock."""
        quota = self.quotas[provider.name]
        if self.config.quota_scope == "process" or provider.max_concurrent is None:
            return quota.try_take(), None
        with self.book.locked():
            live = [
                lease
                for lease in self.book.leases()
                if lease.provider == provider.name and self.book.why_orphaned(lease) is None
            ]
            if len(live) >= provider.max_concurrent:
                return False, None
            pending = self.book.grant(provider.name, "", _engine(provider.name))
        quota.take_anyway()
        self.heartbeat.hold(pending)
        return True, pending

    def _drop(self, provider: str, pending: Lease | None) -> None:
        """Give back a place taken for a sandbox that was not made."""
        if pending is not None:
            self.heartbeat.drop(pending)
            with contextlib.suppress(OSError):
                self.book.release(pending)
        self._give_back(provider)

    def reap_orphans(self) -> None:
        """Remove the orphans of this fleet's providers (envhub.sandbox.fleet.reaper); best effort: what
        cannot be removed now is logged and tried again by the next run or `envhub fleet reap`."""
        from envhub.sandbox.fleet.reaper import find_orphans, reap

        try:
            orphans = find_orphans(self.book, providers=[p.name for p in self.config.providers])
            for orphan, error in reap(orphans, self.book).items():
                if error is None:
                    log.info("removed %s %s %s (%s)", orphan.provider, orphan.kind, orphan.ref, orphan.why)
                else:
                    log.warning(
                        "could not remove %s %s %s: %s", orphan.provider, orphan.kind, orphan.ref, error
                    )
        except Exception:
            log.exception("the fleet's sweep of orphaned sandboxes failed; `envhub fleet reap` retries it")

    def close(self) -> None:
        """Stop renewing leases (the sandboxes' own close releases theirs)."""
        self.heartbeat.stop()

    @staticmethod
    def _refusal(provider: Provider, policy: IsolationPolicy, image: str | None) -> str | None:
        """Why a provider cannot take this request at all, before anything is created."""
        if provider.name == "local" and image is not None:
            return "the local backend runs the host's /usr and takes no image"
        try:
            policy.check_backend(provider.name)
        except ValueError as exc:
            return str(exc)
        return None

    def _resting(self, provider: Provider) -> str | None:
        """Why a provider that just failed is passed over, until its retry_after_s has passed."""
        failed = self._failed_at.get(provider.name)
        if failed is None or (ago := time.monotonic() - failed) >= provider.retry_after_s:
            return None
        return f"failed {ago:.1f} s ago; tried again {provider.retry_after_s:g} s after a failure"

    async def _make(
        self, provider: Provider, policy: IsolationPolicy, image: str | None, options: dict[str, Any]
    ) -> Sandbox:
        bucket = self.buckets.get(provider.name)
        if bucket is not None and (delay := bucket.reserve()) > 0:
            await asyncio.sleep(delay)
        from envhub.sandbox.backends import create as backend_create

        create = self._create or backend_create
        local = provider.name == "local" and image is None
        return await create(provider.name, policy, None if local else image, {**provider.options, **options})

    def _hand_out(self, provider: str, sandbox: Sandbox, pending: Lease | None = None) -> Sandbox:
        """Lease the sandbox (filling in the pending lease that held its place, if any), and make its
        close give back the lease and the quota; its forks (on the same provider, counted even past the
        quota) are leased the same way."""
        try:
            if pending is None:
                lease = self.book.grant(provider, sandbox_ref(sandbox), _engine(provider))
            else:
                lease = pending.model_copy(update={"ref": sandbox_ref(sandbox)})
                self.heartbeat.update(lease)
        except BaseException:
            self._drop(provider, pending)
            raise
        self.heartbeat.hold(lease)
        self.opened[provider] += 1
        sandbox.intercept(_Leased(self, provider, lease))
        return sandbox

    def _release(self, provider: str, lease: Lease) -> None:
        self.heartbeat.drop(lease)
        with contextlib.suppress(OSError):
            self.book.release(lease)
        self._give_back(provider)

    def _give_back(self, provider: str) -> None:
        self.quotas[provider].give_back()
        for waiter in self._waiters:
            if not waiter.done():
                with contextlib.suppress(RuntimeError):  # its loop has closed: nobody waits there now
                    waiter.get_loop().call_soon_threadsafe(_wake, waiter)

    async def _released(self) -> None:
        """Wait until some sandbox of this fleet is given back (with quotas shared through the lease
        directory, other processes give back too, unseen: then look again every SHARED_POLL_S)."""
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        shared = self.config.quota_scope == "lease_dir"
        try:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(waiter, SHARED_POLL_S if shared else None)
        finally:
            self._waiters.remove(waiter)


class _Leased(Interceptor):
    """A fleet's hold on one sandbox it handed out (`envhub.sandbox.intercept`): its close gives back the
    lease and the quota, and each of its forks (on the same provider, counted even past the quota) is
    handed out the same way."""

    def __init__(self, fleet: Fleet, provider: str, lease: Lease) -> None:
        self.fleet, self.provider, self.lease = fleet, provider, lease

    async def around(
        self, sandbox: Any, name: str, arguments: dict[str, Any], call: Callable[[], Awaitable[Any]]
    ) -> Any:
        if name == "close":
            if sandbox.closed:
                return None
            try:
                return await call()
            finally:
                self.fleet._release(self.provider, self.lease)
        if name == "fork":
            child = await call()
            self.fleet.quotas[self.provider].take_anyway()
            return self.fleet._hand_out(self.provider, child)
        return await call()


def _engine(provider: str) -> str | None:
    """The Docker engine a container of this process lands on (DOCKER_HOST), for the reaper."""
    return os.environ.get("DOCKER_HOST") if provider == "docker" else None


def _wake(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_result(None)


_shared: Fleet | None = None


def shared_fleet() -> Fleet:
    """The process's fleet, configured by ENVHUB_FLEET: what `open("fleet")` opens through."""
    global _shared
    if _shared is None:
        _shared = Fleet(FleetConfig.from_env())
    return _shared
