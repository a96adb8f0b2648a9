"""DTQ_REDIS_MIN_REPLICAS: an acknowledged write is acknowledged once that many replicas have it.

Redis replicates asynchronously: a master that dies right after answering takes the writes its
replicas had not received yet, and Sentinel (or a cluster) promotes a replica without them.
`WAIT n timeout`, sent on the connection that made the write, blocks until n replicas have every
write that connection made (or the timeout passes) and says how many do. dtq appends it to the
write's own exchange or pipeline: the same connection, no extra round trip.

The choke points (docs/deployment.md, "Acknowledged means replicated"):
- submit: Scripts.call_direct (one task) and Replication.execute on the batch's pipeline;
- operator actions (cancel, pause, resume, purge, delete, DLQ retry and discard): Audit.finish,
  the action's last write. Replication is one ordered stream, so replicas that have the outcome
  entry have every write the action made before it;
- completions: WorkerStore.complete, which cannot answer 503 to anyone: it warns and asks again.
- a worker's statistics samples: WorkerStore.write_samples, which logs a shortfall and goes on
  (its next write's WAIT waits for them again).

WAIT is not consensus: a write that times out was still made on the master (it may or may not
survive a failover), and one confirmed can still be lost if every replica that has it dies too.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .config import DtqConfig
from .errors import ReplicationTimeout
from .redis_errors import REPLICATION
from .wire import pack

WAIT = "WAIT"


@dataclass(frozen=True, slots=True)
class Replication:
    replicas: int = 0  # 0: acknowledged as soon as the master has it (no WAIT)
    timeout_ms: int = 1000

    @classmethod
    def of(cls, config: DtqConfig) -> Replication:
        return cls(int(config.redis_min_replicas), int(config.redis_wait_timeout_ms))

    @property
    def on(self) -> bool:
        return self.replicas > 0

    @property
    def wait_s(self) -> float:
        """How long the WAIT may block: add it to the deadline of an exchange that carries it."""
        return self.timeout_ms / 1000 if self.on else 0.0

    def commands(self) -> list[bytes]:
        """What to append to a raw exchange after its writes: the WAIT, or nothing when off."""
        return [pack([WAIT, self.replicas, self.timeout_ms])] if self.on else []

    def enough(self, acked: object) -> bool:
        """Whether a WAIT reply counts enough replicas (an error reply does not)."""
        return isinstance(acked, int) and acked >= self.replicas

    def check(self, acked: object) -> None:
        """Raise ReplicationTimeout (or the WAIT's own error) unless enough replicas confirmed."""
        if isinstance(acked, Exception):
            raise acked
        if not self.enough(acked):
            raise self.timeout(acked)

    def timeout(self, acked: object) -> ReplicationTimeout:
        n, ms = self.replicas, self.timeout_ms
        return ReplicationTimeout(
            f"Redis replication timed out: {acked} of the {n} replica(s) DTQ_REDIS_MIN_REPLICAS asks for confirmed "
            f"the write within {ms} ms. It was made on the master and may or may not survive a failover; "
            "retrying a submit with the same idempotency_key does not create a second task",
            kind=REPLICATION, state=f"Redis replicas do not confirm writes in time ({acked} of {n} within {ms} ms)",
            cause=f"WAIT {n} {ms} answered {acked}")

    def split(self, replies: list[Any]) -> list[Any]:
        """The replies of an exchange or pipeline that ended with commands(), without the WAIT's,
        once it is checked."""
        if not self.on:
            return replies
        *rest, acked = replies
        self.check(acked)
        return rest

    def execute(self, pipe: Any) -> list[Any]:
        """Execute a (blocking) pipeline of writes with the WAIT appended; their replies."""
        if self.on:
            pipe.execute_command(WAIT, self.replicas, self.timeout_ms)
        return self.split(pipe.execute())


NO_WAIT = Replication()  # DTQ_REDIS_MIN_REPLICAS=0: acknowledged once the master has it
