"""The sandbox fleet: one scheduler in front of the backends, for more sandboxes than one provider gives.

    ENVHUB_FLEET='{"providers": [{"name": "local", "max_concurrent": 8}, {"name": "docker"}]}'
    async with envhub.sandbox.open("fleet") as sb:      # local while it has room, then docker
        print(sb.report().backend)

Its parts, one job each: `config` (the order, quotas and rates), `limits` (quota, token bucket),
`leases` (lease files and their heartbeat), `scheduler` (the `Fleet`), `reaper` (what killed owners left).
"""

from envhub.sandbox.fleet.config import FleetConfig, Provider
from envhub.sandbox.fleet.leases import Lease, LeaseBook, default_lease_dir
from envhub.sandbox.fleet.limits import Quota, TokenBucket
from envhub.sandbox.fleet.scheduler import Fleet, shared_fleet

__all__ = [
    "Fleet",
    "FleetConfig",
    "Lease",
    "LeaseBook",
    "Provider",
    "Quota",
    "TokenBucket",
    "default_lease_dir",
    "shared_fleet",
]
