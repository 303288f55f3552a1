"""The tape: every call an episode makes to the world outside its own Python (a sandbox command, a file
copied in or out, a REPL snippet, a grader's random draw), in the order it was made. A grader's secret
key is the exception: it is derived again by a replay (`secret_bytes`), never kept on the tape.

While an episode is recorded, the sandbox and its Python worker (`envhub.record.sandbox_calls`) append
what went in and what came out to the tape of the running task (a context variable, so concurrent
episodes never mix), and `make()`'s `Recorder` wrapper (`envhub.wrappers`) keeps the turns and what each
tool call answered. While one is replayed, the same hooks answer each call from the tape instead, and a
call that differs from the recorded one stops the episode with a `Divergence`.

Calls are kept apart by *scope*: the turn (0 for reset, k for the k-th step, marked by the `Recorder`)
and, inside a turn, the tool call that made them (`envhub.record.scope`: tools of one message run
concurrently, so their calls interleave differently from run to run; within one tool call, and outside
tools, the order is the program's).

The tape itself knows no sandbox: the sandboxes' and the worker's hooks are `envhub.record.sandbox_calls`,
so this module sits in the contract layer, where `make()`'s wrappers can reach it. Nothing changes a call
when no tape is active. The recording's records themselves are `envhub.record.calls.Recording`;
replaying a stored episode is `envhub.record.replay`.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import json
import random
from collections import deque
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any, Literal

from envhub.record import scope
from envhub.record.calls import Json, Kind, RecordedCall, Recording

if TYPE_CHECKING:
    from envhub.messages import Message

INLINE_CHARS = 4096
"""Longer strings in a call's input (a script passed with `-c`, a file written) are kept as a digest,
a length and their first characters: enough to tell two calls apart and to show how they differ."""
OUTPUT_BYTES = 1 << 20
"""The most bytes of one file read or copied out that the tape keeps; a longer one is kept as a digest
and cannot be answered in a replay. Command output is already capped by the sandbox's policy."""
HEAD_CHARS = 200


class Divergence(BaseException):
    """The env, replayed, asked for a call the recording does not hold, or answered differently.

    A BaseException, like `CancelledError`, so that an env's own `except Exception` (a tool's failure
    becoming the agent's error message) cannot hide it.
    """

    def __init__(self, turn: int, what: str, expected: str, got: str) -> None:
        super().__init__(f"turn {turn}: {what}")
        self.turn, self.what, self.expected, self.got = turn, what, expected, got


class Tape:
    """One episode's calls: appended to while recording, consumed scope by scope while replaying."""

    def __init__(
        self,
        mode: Literal["record", "replay"],
        calls: list[RecordedCall] | None = None,
        *,
        stand_in: Callable[[Any, str], Any] | None = None,
        secrets: Callable[[str, int], bytes] | None = None,
    ) -> None:
        """`stand_in(policy, backend)` makes what a replay gets instead of a sandbox (`ReplaySandbox`);
        `secrets(label, n)` derives a grader's secret, the same in the recording and in its replay
        (`envhub.record.seal.Secrets`: keyed by the user's recording key, which this module never sees).
        """
        self.mode = mode
        self._stand_in = stand_in
        self._secrets = secrets
        self._drawn: dict[tuple[int, str], int] = {}
        self._hidden: list[tuple[str, str]] = []
        """(secret as hex, what the tape writes instead) for every secret handed out so far."""
        self.turn = 0
        self.calls: list[RecordedCall] = [] if mode == "record" else list(calls or [])
        self._queues: dict[tuple[int, str], deque[RecordedCall]] = {}
        for call in self.calls if mode == "replay" else []:
            if call.kind == "tool":  # what the tool answered: checked as the turn's observation
                continue
            self._queues.setdefault((call.turn, call.scope), deque()).append(call)
        self.divergence: Divergence | None = None

    def stand_in(self, policy: Any, backend: str) -> Any:
        if self._stand_in is None:
            raise RuntimeError("this replay tape was made without a stand-in for sandboxes")
        return self._stand_in(policy, backend)

    @property
    def replaying(self) -> bool:
        return self.mode == "replay"

    def recording(self) -> Recording:
        return Recording(calls=self.calls)

    def record(self, kind: Kind, method: str, input: Json, output: Json = None, error: Any = None) -> None:
        self.calls.append(
            RecordedCall(
                turn=self.turn,
                scope=scope.current(),
                kind=kind,
                method=method,
                input=input,
                output=output,
                error=None if error is None else {"type": type(error).__name__, "message": str(error)},
            )
        )

    def answer(self, kind: Kind, method: str, input: Json) -> RecordedCall:
        """The recorded call this one replays: the next of its scope, which must be the same call."""
        where_from = scope.current()
        queue = self._queues.get((self.turn, where_from))
        asked = _describe(kind, method, input)
        where = "" if where_from == "env" else f" in {where_from}"
        if not queue:
            raise self._diverge(
                f"the env made a {kind} call{where} that the recording does not have", "no call", asked
            )
        expected = queue[0]
        if (expected.kind, expected.method, expected.input) != (kind, method, input):
            raise self._diverge(
                f"the env's {kind} call{where} differs from the recorded one",
                _describe(expected.kind, expected.method, expected.input),
                asked,
            )
        return queue.popleft()

    def secret(self, nbytes: int, context: str) -> bytes:
        """A secret for the grader: derived, never stored; only its size and context are on the tape."""
        given: Json = {"bytes": nbytes, "context": context}
        if self.replaying:
            self.answer("entropy", "secret", given)
        else:
            self.record("entropy", "secret", given)
        if self._secrets is None:
            raise RuntimeError(
                "this tape was made without a way to derive secrets (Tape(secrets=...)); record and "
                "replay episodes through envhub.rollout and envhub.record.replay, which key it"
            )
        where = (self.turn, scope.current())
        index = self._drawn.get(where, 0)
        self._drawn[where] = index + 1
        value = self._secrets(json.dumps([*where, index, context]), nbytes)
        self._hidden.append((value.hex(), f"<secret {len(self._hidden)}>"))
        return value

    def redact(self, value: Any) -> Any:
        """`value` with every secret this tape handed out (as hex) replaced by a placeholder: what a
        call's input is kept and compared as, so the nonce in a grader's stdin is never written."""
        if not self._hidden:
            return value
        if isinstance(value, str):
            for secret, placeholder in self._hidden:
                value = value.replace(secret, placeholder)
            return value
        if isinstance(value, bytes):
            for secret, placeholder in self._hidden:
                value = value.replace(secret.encode(), placeholder.encode())
                value = value.replace(bytes.fromhex(secret), placeholder.encode())
            return value
        if isinstance(value, dict):
            return {k: self.redact(v) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [self.redact(v) for v in value]
        return value

    def unanswered(self, turn: int) -> list[RecordedCall]:
        """Recorded calls of `turn` the replay never made (tool records are kept, not replayed)."""
        return [c for (t, _), queue in self._queues.items() if t == turn for c in queue]

    def _diverge(self, what: str, expected: str, got: str) -> Divergence:
        """The divergence to raise; the first one is also kept, in case the env swallows it."""
        divergence = Divergence(self.turn, what, expected, got)
        self.divergence = self.divergence or divergence
        return divergence


_TAPE: ContextVar[Tape | None] = ContextVar("envhub_tape", default=None)
_INSIDE: ContextVar[bool] = ContextVar("envhub_tape_inside", default=False)


def current() -> Tape | None:
    """The tape of this task, unless a recorded call is already in progress (its inner calls are its own)."""
    return None if _INSIDE.get() else _TAPE.get()


def replaying() -> bool:
    """Whether this task is replaying an episode (its sandboxes must be stand-ins, never started ones)."""
    tape = current()
    return tape is not None and tape.replaying


@contextlib.contextmanager
def using(tape: Tape) -> Iterator[Tape]:
    """Record into, or replay from, `tape` for the calls made in this block (and the tasks it starts)."""
    token = _TAPE.set(tape)
    try:
        yield tape
    finally:
        _TAPE.reset(token)


@contextlib.contextmanager
def inside() -> Iterator[None]:
    """Mark a recorded call in progress, so the calls it makes itself (read_file running cat) are not."""
    token = _INSIDE.set(True)
    try:
        yield
    finally:
        _INSIDE.reset(token)


def mark_turn(turn: int) -> None:
    """Calls made from here on belong to `turn` (0: reset; k: the k-th step); nothing without a tape."""
    tape = _TAPE.get()
    if tape is not None:
        tape.turn = turn


# -- values as the tape keeps them ----------------------------------------------------------------------


def kept(value: Any) -> Json:
    """A call's argument as JSON: long strings and bytes as a digest, length and head (see INLINE_CHARS)."""
    if isinstance(value, bytes):
        if len(value) <= INLINE_CHARS:
            return {"b64": base64.b64encode(value).decode()}
        return {"sha256": hashlib.sha256(value).hexdigest(), "bytes": len(value), "head": _head(value)}
    if isinstance(value, str) and len(value) > INLINE_CHARS:
        digest = hashlib.sha256(value.encode(errors="surrogatepass")).hexdigest()
        return {"sha256": digest, "chars": len(value), "head": value[:HEAD_CHARS]}
    if isinstance(value, dict):
        return {str(k): kept(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [kept(v) for v in value]
    if value is None or isinstance(value, bool | int | float | str):
        return value
    return str(value)


def blob(data: bytes) -> Json:
    """An output's bytes, whole up to OUTPUT_BYTES (a replay gives them back), else only their digest."""
    if len(data) <= OUTPUT_BYTES:
        return {"b64": base64.b64encode(data).decode()}
    return {"sha256": hashlib.sha256(data).hexdigest(), "bytes": len(data), "cut": True}


def unblob(value: Json, what: str) -> bytes:
    if not isinstance(value, dict) or "b64" not in value:
        raise RuntimeError(
            f"the recording kept only a digest of {what} ({value.get('bytes', '?')} bytes, more than "
            f"{OUTPUT_BYTES}), so this call cannot be replayed; play the episode again with a sandbox"
        )
    return base64.b64decode(value["b64"])


def _head(data: bytes) -> str:
    return data[:HEAD_CHARS].decode(errors="replace")


def _describe(kind: str, method: str, input: Json) -> str:
    text = json.dumps(input, sort_keys=True, default=str)
    return f"{kind} {method} {text}"


# -- entropy a grader draws -------------------------------------------------------------------------------


def secret_bytes(nbytes: int, context: str) -> bytes:
    """A key only the grader may know (the HMAC nonce it signs its report with), never written down.

    Without a tape it is random. While recording or replaying, the tape derives it from the user's
    recording key, the recording's salt, the episode, this draw's place and `context` (a digest of what
    the grader judges), so a replay gets the same key without the recording holding it, and a grade
    spliced from another episode or another submission does not verify. Every call input that would
    carry it (as hex) is kept with a placeholder instead (`Tape.redact`).
    """
    tape = current()
    if tape is None:
        return random.SystemRandom().randbytes(nbytes)
    return tape.secret(nbytes, context)


def token_bytes(nbytes: int = 32) -> bytes:
    """`secrets.token_bytes`, kept on the tape, in the clear: for draws a replay must repeat and a reader
    of the recording may see (canary names), never for a key (`secret_bytes`)."""
    tape = current()
    if tape is None:
        return random.SystemRandom().randbytes(nbytes)
    if tape.replaying:
        return base64.b64decode(tape.answer("entropy", "token_bytes", nbytes).output)
    value = random.SystemRandom().randbytes(nbytes)
    tape.record("entropy", "token_bytes", nbytes, base64.b64encode(value).decode())
    return value


def token_hex(nbytes: int = 32) -> str:
    """`secrets.token_hex`, kept on the tape."""
    return token_bytes(nbytes).hex()


class SystemRandom(random.SystemRandom):
    """`secrets.SystemRandom` whose draws are kept on the tape (canaries a replayed grader must repeat).

    Every method of `random.Random` draws through `getrandbits` and `random`, so these two suffice.
    """

    def getrandbits(self, k: int) -> int:
        tape = current()
        if tape is None:
            return super().getrandbits(k)
        if tape.replaying:
            return int(tape.answer("entropy", "getrandbits", k).output)
        value = super().getrandbits(k)
        tape.record("entropy", "getrandbits", k, str(value))  # as text: JSON readers stop at 2**53
        return value

    def random(self) -> float:
        return self.getrandbits(53) * 2.0**-53

    def randbytes(self, n: int) -> bytes:
        return token_bytes(n)


# -- tool calls -------------------------------------------------------------------------------------------


def record_tool_answers(action: Message, observation: list[Message]) -> None:
    """Keep what each tool call of `action` answered (its reply in `observation`), in that call's scope.

    Called by `make()`'s `Recorder` after each step, so any env's tool answers are kept, not only those of
    the envs that run tools themselves. Never replayed: a replay checks them as the turn's observation.
    """
    tape = current()
    if tape is None or tape.replaying:
        return
    replies = {m.tool_call_id: m for m in observation if m.role == "tool" and m.tool_call_id is not None}
    for index, call in enumerate(action.tool_calls):
        reply = replies.get(call.id)
        if reply is not None:
            with scope.tool_call(index):
                tape.record("tool", call.name, kept({"arguments": call.arguments}), kept(reply.text))
