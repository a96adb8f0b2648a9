"""Engine: the service API that views, commands, the console and dtq_tasks call.

Grouped by noun, each a small class over the same plumbing (plumbing.py):
`engine.tasks`, `engine.queues`, `engine.dlq`, `engine.schedule`, `engine.workers`,
`engine.audit`, `engine.periodic`, `engine.limits`, `engine.workflows`, `engine.running`,
`engine.history`. Every operation is one pipelined round trip
or one script where it can be; every operator action is audited (audit.py). This package
imports no Django: the process-wide engine built from settings.DTQ is
`dtq_core.conf.get_engine()`.
"""

from __future__ import annotations

import redis

from .. import encryption
from ..clock import Clock, SystemClock
from ..config import DtqConfig
from ..connection import eviction_policy, sync_client
from ..keys import Keys
from ..replication import Replication
from ..scripts import Scripts
from .audit import Audit
from .dlq import DeadLetters
from .functions import Functions
from .history import History
from .limits import Limits
from .periodic import Periodic
from .plumbing import Plumbing
from .queues import Queues
from .registry import Registry
from .running import Running
from .schedule import Schedule
from .tasks import Tasks
from .workers import Workers
from .workflows import Workflows

__all__ = ["Engine"]


class Engine:
    def __init__(self, config: DtqConfig, *, client: redis.Redis | None = None, clock: Clock | None = None) -> None:
        self.config = config
        # The API, console and CLI show payloads with the keys, and plain types' values as they are.
        encryption.configure(config.encryption_keys, config.encrypt_types)
        self.keys = Keys(config.key_prefix)
        self.client = client if client is not None else sync_client(config)
        self.clock: Clock = clock or SystemClock()
        self.replication = Replication.of(config)  # what acknowledged writes wait for
        self.scripts = Scripts(self.client, self.replication)
        plumbing = Plumbing(config=config, keys=self.keys, client=self.client, clock=self.clock,
                            scripts=self.scripts, replication=self.replication)
        self.registry = Registry(plumbing)
        self.audit = Audit(plumbing)
        self.tasks = Tasks(plumbing, self.audit, self.registry)
        self.queues = Queues(plumbing, self.audit, self.registry)
        self.dlq = DeadLetters(plumbing, self.audit, self.tasks, self.registry)
        self.schedule = Schedule(plumbing, self.registry)
        self.periodic = Periodic(plumbing, self.audit, self.registry, self.tasks)
        self.limits = Limits(plumbing, self.audit, self.registry)
        self.workflows = Workflows(plumbing, self.audit, self.tasks)
        self.running = Running(plumbing, self.registry)
        self.functions = Functions(plumbing, self.audit)
        self.workers = Workers(plumbing, self.audit, self.running)
        self.history = History(plumbing, self.registry)

    # -- health -------------------------------------------------------------------------------
    def ping(self) -> bool:
        return bool(self.client.ping())

    def eviction_policy(self) -> str | None:
        """Redis's maxmemory-policy (None: could not be read); dtq needs noeviction."""
        return eviction_policy(self.client)
