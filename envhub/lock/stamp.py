"""The lock hash an episode carries, stamped on a spec by whoever records or sends one.

The registry builds specs without it: the hash reads every file of the env's distribution and of
envhub (about 80 ms the first time), which `make`, `spec` and `envhub list` should not pay. The runner
stamps the spec of each episode it records, `envhub serve` the spec it sends (a served env's episodes
carry the server's hash), and `envhub info` the spec it shows; each id's hash is computed once per
process (`envhub.lock.components.lock_hash`; `envhub rollout --locked` refreshes it when it checks).
"""

from __future__ import annotations

import functools

from envhub.core import EnvSpec
from envhub.ids import InvalidEnvId
from envhub.lock.components import lock_hash
from envhub.registration import DuplicateEnvError, PluginImportError, Registry, UnknownEnvError, is_external
from envhub.registration import registry as shared_registry


def stamp(spec: EnvSpec, registry: Registry | None = None) -> EnvSpec:
    """`spec` with the lock hash of what its id runs on now; unchanged when it has one already (a served
    env's, from its server), names a URL or format id (its files are elsewhere), or is not registered
    in `registry` (the shared one by default)."""
    if spec.provenance.lock_hash is not None or _made_elsewhere(spec.id):
        return spec
    registry = registry or shared_registry
    try:
        registered = registry.resolve(spec.id)
    except (UnknownEnvError, DuplicateEnvError, PluginImportError, InvalidEnvId):
        return spec  # made by hand, outside this registry: nothing to pin it by
    hashed = lock_hash(registered, registry.index, spec.env_kwargs)
    if hashed is None:
        return spec
    return spec.model_copy(update={"provenance": spec.provenance.model_copy(update={"lock_hash": hashed})})


@functools.lru_cache(maxsize=1024)
def _made_elsewhere(env_id: str) -> bool:
    """`is_external`, remembered: it reads the entry points (tens of ms), and the runner asks per episode."""
    return is_external(env_id)
