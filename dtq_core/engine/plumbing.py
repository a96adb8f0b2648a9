"""What every noun of the engine shares: the Redis client and its scripts, the key names, the
clock and the configuration. Passed to each noun when the Engine is built."""

from __future__ import annotations

from dataclasses import dataclass

import redis

from ..clock import Clock, SystemClock, redis_time_ms
from ..config import DtqConfig
from ..keys import Keys
from ..replication import NO_WAIT, Replication
from ..scripts import Scripts

BATCH = 500  # entries one bulk-action script call handles, so no call holds Redis for long


@dataclass(frozen=True, kw_only=True, slots=True)
class Plumbing:
    config: DtqConfig
    keys: Keys
    client: redis.Redis
    clock: Clock
    scripts: Scripts
    # DTQ_REDIS_MIN_REPLICAS: acknowledged writes end with its WAIT (replication.py).
    replication: Replication = NO_WAIT


class Noun:
    """Base of the engine's nouns: the shared plumbing as attributes, nothing else."""

    def __init__(self, plumbing: Plumbing) -> None:
        self.config = plumbing.config
        self.keys = plumbing.keys
        self.client = plumbing.client
        self.clock = plumbing.clock
        self.scripts = plumbing.scripts
        self.replication = plumbing.replication

    def redis_now_ms(self) -> int:
        """Now on the clock workers write by. They keep RedisAlignedClock, so what they record
        (history minutes, heartbeats, ticks) is on Redis's clock; the host of an API or CLI process
        may be off (no NTP, a VM resumed), so a SystemClock's now is Redis's TIME: one round trip,
        for reads and changes that compare with what workers wrote. Any other clock (a worker's
        aligned one, a test's) is used as it is."""
        if not isinstance(self.clock, SystemClock):
            return self.clock.now_ms()
        return redis_time_ms(self.client.time())
