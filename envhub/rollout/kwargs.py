"""Env options checked against the constructor's type hints before a batch starts, without making an env.

Making an env to check its options would start its sandbox, browser or repository just to close it
again; reading the constructor's signature costs an import.
"""

from __future__ import annotations

import inspect
import typing
from collections.abc import Callable
from typing import Any

from pydantic import ConfigDict, TypeAdapter, ValidationError
from pydantic.errors import PydanticSchemaGenerationError, PydanticUserError

from envhub.registration import is_external, registry

_NOT_OPTIONS = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.VAR_POSITIONAL)


def check_env_kwargs(env_id: str, kwargs: dict[str, Any]) -> None:
    """Raise a `TypeError` naming the option, its expected type and the env's options when `kwargs`
    would not fit the constructor of `env_id` (unknown name, or a value of the wrong type).

    Values the constructor checks itself (`steps must be at least 1`) are found when the env is made.
    """
    if not kwargs:
        return
    if is_external(env_id):  # a server's or a format's env: its spec declares the options, if anything does
        _check_declared(env_id, kwargs)
        return
    registration = registry.resolve(env_id)
    factory: Callable[..., Any] = registry._load(registration)  # imports the plugin, makes nothing
    signature = inspect.signature(factory)
    hints = _type_hints(factory)
    parameters = {n: p for n, p in signature.parameters.items() if p.kind not in _NOT_OPTIONS}
    takes_any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values())
    options = ", ".join(str(p) for p in parameters.values() if p.kind is not inspect.Parameter.VAR_KEYWORD)
    for key, value in kwargs.items():
        if key == "max_turns":  # an option of `make()` itself, which sets it on any env
            continue
        if key not in parameters or parameters[key].kind is inspect.Parameter.VAR_KEYWORD:
            if takes_any:
                continue
            raise TypeError(
                f"{registration.id} has no option {key!r}; its options: {options or 'none'} "
                f"(see `envhub info {registration.id}`)"
            )
        if key in hints:
            _check_value(registration.id, key, value, hints[key])


def _check_declared(env_id: str, kwargs: dict[str, Any]) -> None:
    """Refuse options a served or foreign-format env's spec does not declare, before the batch starts
    (one spec request, no session): a batch of episodes that each fail at make is the slow way to learn it."""
    try:
        spec = registry.spec(env_id)
    except Exception:  # an unreachable server: the batch's first episode says so in its own words
        return
    spec.check_options({key: value for key, value in kwargs.items() if key != "max_turns"})


def _type_hints(factory: Callable[..., Any]) -> dict[str, Any]:
    """The constructor's evaluated type hints; none when they cannot be evaluated (nothing is checked)."""
    target: Any = factory
    if isinstance(factory, type):
        target = target.__init__  # a class's hints are its constructor's
    try:
        return typing.get_type_hints(target, include_extras=True)
    except Exception:  # a forward reference its module cannot resolve: the constructor checks itself
        return {}


def _check_value(env_id: str, key: str, value: Any, hint: Any) -> None:
    try:
        adapter: TypeAdapter[Any] = TypeAdapter(hint, config=ConfigDict(arbitrary_types_allowed=True))
    except (PydanticSchemaGenerationError, PydanticUserError):
        return  # a type pydantic cannot describe: left to the constructor
    try:
        adapter.validate_python(value)
    except ValidationError as exc:
        reason = exc.errors()[0]["msg"]
        quoting = " (quote a number meant as text: --kwarg 'KEY=\"123\"')" if hint is str else ""
        raise TypeError(
            f"--kwarg {key}={value!r} does not fit {env_id}: {key} is "
            f"{getattr(hint, '__name__', None) or hint}, and {reason[0].lower()}{reason[1:]}{quoting}"
        ) from None
