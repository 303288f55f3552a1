"""Lockfiles: pin what each env id runs on, and refuse a batch when any of it changed.

`envhub lock ID... > envhub.lock` writes, per id, a content hash of five components (the code of the
env's whole distribution, its data files, the sandbox image or the local sandbox's interpreter, every
file of envhub itself, and the registry entry; `envhub.lock.components` says exactly what each covers),
file by file, and one combined hash. Every
episode records the combined hash it ran under (`Provenance.lock_hash`), and
`envhub rollout ID --locked envhub.lock` refuses to start when anything differs, naming what changed
(`envhub.lock.lockfile`).

The lock stands above the registry, which never asks it for anything: whoever records a spec stamps
the hash on it (`envhub.lock.stamp`). This package's own import brings only the components; the
lockfile and the stamp, which resolve ids through the shared registry, are imported by name.
"""

from envhub.lock.components import COMPONENTS, Component, LockEntry, LockError, lock_entry, lock_hash

__all__ = ["COMPONENTS", "Component", "LockEntry", "LockError", "lock_entry", "lock_hash"]
