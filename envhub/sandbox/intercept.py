"""The one way anything is put around a sandbox's calls: the tape (record, replay) and the fleet (leases).

Every backend's own `exec`, `write_file`, `read_file`, `upload_dir`, `download`, `report`, `fork`,
`close` and `create` are wrapped once, when its class is defined (`Sandbox.__init_subclass__` calls
`wrap_class`; `Sandbox`'s own `fork` and `close` are wrapped the same way), and each call then passes
through the interceptors in force, outermost first:

- the running task's (`add_ambient`): the tape of the episode being recorded or replayed
  (`envhub.record.sandbox_calls`), which exists before any sandbox does and must answer `create` with a
  stand-in while replaying;
- the sandbox's own (`Sandbox.intercept`): the fleet's lease, which must be given back when this one
  sandbox closes and must lease each of its forks.

Class-level wrapping rather than assigning a live sandbox's methods (as the fleet once did): it catches
every call however it is reached (`__aexit__`, `Env.fork` through `__fork__`, a backend calling its own
method), it serves an interceptor that exists before the sandbox (the tape's `create`), and it leaves
each instance as its class made it. With no interceptor in force a call runs straight through, after
asking each ambient source (for the tape, a context variable read) and the sandbox for theirs.

Hand-written rather than a proxy or aspect library: the wrappers must keep each method's signature (the
tape keys a call by its bound arguments) and an abstract method's abstractness, in a few lines.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

ASYNC_CALLS = ("exec", "write_file", "read_file", "upload_dir", "download", "fork", "close")
"""The async instance methods intercepted; `report` (sync) and the `create` classmethod are as well."""


class Interceptor(Protocol):
    """Something around a sandbox's calls. Each hook is given the call (`call()` runs it, or what the
    next interceptor makes of it) and returns its result, or answers without running it. The defaults
    pass every call through, so a subclass overrides only the hooks it needs; a class that defines all
    three is one without subclassing (the tape's, which must not import this package early)."""

    async def around(
        self, sandbox: Any, name: str, arguments: dict[str, Any], call: Callable[[], Awaitable[Any]]
    ) -> Any:
        """One of `ASYNC_CALLS`, with its arguments bound by name (defaults applied, no `self`)."""
        return await call()

    def around_report(self, sandbox: Any, call: Callable[[], Any]) -> Any:
        """`report()`: which parts of the policy the sandbox enforces."""
        return call()

    async def around_create(self, cls: type, policy: Any, call: Callable[[], Awaitable[Any]]) -> Any:
        """`cls.create(policy, ...)`: a new sandbox of that backend (no instance exists yet)."""
        return await call()


_AMBIENT: list[Callable[[], Interceptor | None]] = []


def add_ambient(source: Callable[[], Interceptor | None]) -> None:
    """Ask `source` on every sandbox call for an interceptor of the running task (None: none now)."""
    _AMBIENT.append(source)


def _ambient() -> list[Interceptor]:
    return [found for source in _AMBIENT if (found := source()) is not None]


def interceptors(sandbox: Any) -> list[Interceptor]:
    """The interceptors in force for a call of `sandbox`, outermost first."""
    return [*_ambient(), *getattr(sandbox, "_interceptors", ())]


def wrap_class(cls: type) -> None:
    """Intercept the calls `cls` defines itself (abstract ones stay abstract and unwrapped)."""
    for name in (*ASYNC_CALLS, "report"):
        method = cls.__dict__.get(name)
        if method is None or getattr(method, "__intercepted__", False):
            continue
        if getattr(method, "__isabstractmethod__", False):
            continue
        wrapped = _sync_call(method) if name == "report" else _async_call(name, method)
        setattr(wrapped, "__intercepted__", True)  # noqa: B010 - a function attribute mypy does not know
        setattr(cls, name, wrapped)
    create = cls.__dict__.get("create")
    if isinstance(create, classmethod) and not getattr(create.__func__, "__intercepted__", False):
        wrapped_create = _create(create.__func__)
        setattr(wrapped_create, "__intercepted__", True)  # noqa: B010 - as above
        setattr(cls, "create", classmethod(wrapped_create))  # noqa: B010 - any backend class


def _async_call(name: str, real: Callable[..., Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
    signature = inspect.signature(real)

    @functools.wraps(real)
    async def call(self: Any, *args: Any, **kwargs: Any) -> Any:
        chain = interceptors(self)
        if not chain:
            return await real(self, *args, **kwargs)
        bound = signature.bind(self, *args, **kwargs)
        bound.apply_defaults()
        arguments = {k: v for k, v in bound.arguments.items() if k != "self"}

        async def through(index: int) -> Any:
            if index == len(chain):
                return await real(self, *args, **kwargs)
            return await chain[index].around(self, name, arguments, lambda: through(index + 1))

        return await through(0)

    return call


def _sync_call(real: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(real)
    def call(self: Any) -> Any:
        chain = interceptors(self)

        def through(index: int) -> Any:
            if index == len(chain):
                return real(self)
            return chain[index].around_report(self, lambda: through(index + 1))

        return through(0)

    return call


def _create(real: Callable[..., Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
    @functools.wraps(real)
    async def create(cls: type, policy: Any, *args: Any, **kwargs: Any) -> Any:
        chain = _ambient()

        async def through(index: int) -> Any:
            if index == len(chain):
                return await real(cls, policy, *args, **kwargs)
            return await chain[index].around_create(cls, policy, lambda: through(index + 1))

        return await through(0)

    return create
