"""Recordings bound to their episode: a MAC keyed by a secret that is neither in a sandbox nor in a batch.

A replay answers every call from the recording, so whoever can edit a batch folder could otherwise make a
replay say anything: splice an honest episode's grade into a wrong answer, or edit the stored reward and
have `rescore` agree with it. So each recording is sealed when it is made:

- `seal` puts an HMAC-SHA256 into the recording, over what decides a reward (the episode's ids, seed, env
  id and options, prompt, every turn's action, observation, reward and info, the reward components, the
  ending, and the recording's calls), keyed by the user's *recording key*; `verify` refuses an episode
  whose MAC is missing or does not match, naming the episode.
- `Secrets` derives the secrets a grader needs (the HMAC nonce its report is signed with) from the same
  key, the recording's random salt, the episode's id and what the grader judges, so a secret is never
  written down: a replay derives it again, and a grade spliced from another episode (another salt,
  episode or submission) no longer carries a valid signature.

The key is 32 random bytes (hex) in `recording_key_path()`: `$ENVHUB_RECORDING_KEY_FILE`, else
`$XDG_CONFIG_HOME/envhub/recording.key`, else `~/.config/envhub/recording.key`, created on first use with
mode 0600 and never read by anything in a sandbox. A key file inside the batch folder it would vouch for
is refused (`check_apart`): whoever could edit the episodes could then re-seal them.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import json
import os
import secrets
import stat
from pathlib import Path
from typing import Any

from envhub.record.calls import Recording
from envhub.records import Episode
from envhub.settings import settings, variable

KEY_FILE_ENV = variable("recording_key_file")
KEY_BYTES = 32
SEAL_VERSION = 1
"""Bumped when what the MAC covers changes: an older seal then reads as not matching."""


class RecordingKeyError(ValueError):
    """The recording key cannot be used: unreadable, malformed, readable by others, or beside the episodes."""


class UnsealedRecording(ValueError):
    """An episode's recording has no MAC, or one that does not match the episode: it is not trusted."""


def recording_key_path() -> Path:
    """Where the recording key lives: `$ENVHUB_RECORDING_KEY_FILE`, else the user's config folder."""
    given = settings().recording_key_file
    if given is not None:
        return Path(given).expanduser()
    config = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(config) / "envhub" / "recording.key"


def load_key(*, create: bool = True) -> bytes:
    """The recording key; made (32 random bytes, mode 0600) the first time when `create`."""
    path = recording_key_path()
    if not path.exists():
        if not create:
            raise RecordingKeyError(
                f"no recording key at {path}: episodes recorded on this machine were sealed with it; "
                f"point {KEY_FILE_ENV} at the key file of the machine that recorded them"
            )
        _create(path)
    try:
        info = path.stat()
        text = path.read_text().strip()
    except OSError as exc:
        raise RecordingKeyError(f"cannot read the recording key {path}: {exc}") from exc
    if info.st_mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise RecordingKeyError(
            f"the recording key {path} can be read by other users (mode {stat.S_IMODE(info.st_mode):o}), "
            f"so anyone with that access could forge recordings; run `chmod 600 {path}`"
        )
    try:
        key = bytes.fromhex(text)
    except ValueError:
        key = b""
    if len(key) != KEY_BYTES:
        raise RecordingKeyError(
            f"the recording key {path} is not {KEY_BYTES} bytes of hex; move it away to have a new one "
            "made (episodes sealed with the old one then no longer verify)"
        )
    return key


def _create(path: Path) -> None:
    """Write a new key atomically: a second process creating it at once keeps the first one's key."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    temporary = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "w") as out:
            out.write(secrets.token_hex(KEY_BYTES) + "\n")
        with contextlib.suppress(FileExistsError):
            os.link(temporary, path)  # fails if another process made it first: theirs is kept
    finally:
        temporary.unlink(missing_ok=True)


def check_apart(batch: Path) -> None:
    """Refuse a recording key stored inside the batch folder whose episodes it seals."""
    key = recording_key_path().resolve()
    folder = batch.resolve()
    if key == folder or folder in key.parents:
        raise RecordingKeyError(
            f"the recording key {key} is inside the batch folder {folder}: whoever can edit the episodes "
            f"could re-seal them with it; keep it elsewhere (unset {KEY_FILE_ENV} to use "
            "~/.config/envhub/recording.key)"
        )


def new_salt() -> str:
    """A recording's own random salt: two recordings never derive the same secrets."""
    return secrets.token_hex(16)


class Secrets:
    """The secrets a grader draws during one recorded episode, derived instead of stored.

    `derive(label, n)` is HMAC-SHA256(key, salt, episode id, label) stretched to n bytes; the label says
    which draw of which turn and scope it is, and what the grader was judging.
    """

    def __init__(self, key: bytes, salt: str, episode_id: str) -> None:
        self._key = key
        self._binding = json.dumps(["envhub grader secret", SEAL_VERSION, salt, episode_id])

    def derive(self, label: str, nbytes: int) -> bytes:
        out = b""
        block = 0
        while len(out) < nbytes:
            message = json.dumps([self._binding, label, nbytes, block]).encode()
            out += hmac.new(self._key, message, hashlib.sha256).digest()
            block += 1
        return out[:nbytes]


def seal(episode: Episode, env_kwargs: dict[str, Any], key: bytes) -> Episode:
    """The episode with its recording's MAC set, over the episode made with `env_kwargs`."""
    if episode.recording is None:
        raise ValueError(f"episode {episode.episode_id} has no recording to seal")
    recording = episode.recording.model_copy(update={"mac": None})
    sealed = episode.model_copy(update={"recording": recording})
    mac = _mac(sealed, env_kwargs, key)
    return sealed.model_copy(update={"recording": recording.model_copy(update={"mac": mac})})


def verify(episode: Episode, env_kwargs: dict[str, Any], key: bytes, *, where: str = "") -> Recording:
    """The episode's recording, if its MAC matches the episode; else `UnsealedRecording` naming it."""
    recording = episode.recording
    name = f"episode {episode.episode_id}{f' of {where}' if where else ''}"
    if recording is None:
        raise UnsealedRecording(f"{name} has no recording; roll it out with --record to replay it")
    what_to_do = (
        "a replay answers every call from the recording, so it replays only what it can verify: grade the "
        "episode's actions afresh in real sandboxes with `envhub rescore RUN --regrade`, or roll it out "
        f"again with --record (the key is {recording_key_path()}; set {KEY_FILE_ENV} to the key of the "
        "machine that recorded it)"
    )
    if recording.mac is None:
        raise UnsealedRecording(f"{name}: its recording carries no MAC (recorded before seals); {what_to_do}")
    unsealed = episode.model_copy(update={"recording": recording.model_copy(update={"mac": None})})
    if not hmac.compare_digest(recording.mac, _mac(unsealed, env_kwargs, key)):
        raise UnsealedRecording(
            f"{name}: its recording's MAC does not match: the episode row or its recording was changed "
            f"after it was recorded, or it was sealed with another key; {what_to_do}"
        )
    return recording


def _mac(episode: Episode, env_kwargs: dict[str, Any], key: bytes) -> str:
    return hmac.new(key, sealed_content(episode, env_kwargs), hashlib.sha256).hexdigest()


def sealed_content(episode: Episode, env_kwargs: dict[str, Any]) -> bytes:
    """The canonical bytes a seal covers: what decides the reward, as the store writes and reads it back.

    Left out: timings, attempts, the node, the policy's settings and tokens, the isolation report — none
    of them enters a replay or its reward.
    """
    content = {
        "seal": SEAL_VERSION,
        "episode_id": episode.episode_id,
        "env_id": episode.env_id,
        "env_version": episode.env_version,
        "env_kwargs": _plain(env_kwargs),
        "provenance": episode.provenance.model_dump(mode="json"),
        "seed": episode.seed,
        "policy": episode.policy,
        "prompt": [m.model_dump(mode="json") for m in episode.prompt],
        "turns": [
            {
                "index": t.index,
                "action": t.action.model_dump(mode="json"),
                "observation": [m.model_dump(mode="json") for m in t.observation],
                "reward": t.reward,
                "info": _plain(t.info),
            }
            for t in episode.turns
        ],
        "reward": episode.reward,
        "reward_components": episode.reward_components,
        "terminated": episode.terminated,
        "truncated": episode.truncated,
        "error": episode.error.model_dump(mode="json") if episode.error else None,
        "parent": episode.parent,
        "fork_turn": episode.fork_turn,
        "recording": episode.recording.model_dump(mode="json") if episode.recording else None,
    }
    return json.dumps(content, sort_keys=True, separators=(",", ":"), default=str).encode()


def _plain(value: Any) -> Any:
    """A value as the store keeps it (JSON, unknown objects as their `str`), so a read-back one matches."""
    return json.loads(json.dumps(value, default=str))
