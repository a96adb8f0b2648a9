"""Every Redis key, channel and consumer-group name dtq uses; nothing else formats keys.

The layout (docs/keyspace.md) is built for Redis Cluster and is the same on a single node:

- A queue is split into partitions (DTQ_QUEUE_PARTITIONS; one unless configured). Each partition
  has a short tag, and every key of the partition is `<prefix>:{<tag>}:...`, so all of them hash
  to one slot: the partition's streams, task records, results, idempotency keys, schedule, DLQ,
  indexes and statistics. Every script works on one partition and takes the partition's key
  prefix (`partition(tag)`) as its only key, or as its first; Lua builds the rest from it with the
  suffixes in includes/partition.lua, which a test keeps equal to the methods below.
- A task id starts with its partition's tag (`<tag>-<32 hex>`), so a lookup by id finds the slot.
- Global keys (the partition registry, task types, workers, the audit trail) are each touched
  alone, or, for the audit trail, together with a key in the same `{audit}` tag.
- Channels are not keys (classic pub/sub is not bound to a slot): scripts get their names in ARGV.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import ClassVar

PRIORITIES: tuple[str, ...] = ("high", "normal", "low")

TAG_RE = re.compile(r"[a-z0-9]{1,16}")
# A task id dtq makes: its partition's tag, a dash, 32 hex digits.
TASK_ID_RE = re.compile(r"(?P<tag>[a-z0-9]{1,16})-[0-9a-f]{32}")
# A workflow id: the tag of the partition holding the workflow's keys, "-w", 31 hex digits. Not a
# task id (TASK_ID_RE needs hex right after the dash), so no task lookup mistakes one for a task.
WORKFLOW_ID_RE = re.compile(r"(?P<tag>[a-z0-9]{1,16})-w[0-9a-f]{31}")
# A dead letter's id in the API: its partition's tag and its entry id in the partition's DLQ stream.
DLQ_REF_RE = re.compile(r"(?P<tag>[a-z0-9]{1,16})-(?P<entry>[0-9]{1,20}-[0-9]{1,20})")


class NotOurTaskId(ValueError):
    """A string that is not a task id dtq made (so it names no task)."""


def tag_of(task_id: str) -> str:
    """The partition tag a task id carries; NotOurTaskId for anything else."""
    match = TASK_ID_RE.fullmatch(task_id)
    if match is None:
        raise NotOurTaskId(task_id)
    return match.group("tag")


def is_task_id(value: object) -> bool:
    return isinstance(value, str) and TASK_ID_RE.fullmatch(value) is not None


def workflow_tag(workflow_id: str) -> str:
    """The partition tag a workflow id carries; NotOurTaskId for anything else."""
    match = WORKFLOW_ID_RE.fullmatch(workflow_id)
    if match is None:
        raise NotOurTaskId(workflow_id)
    return match.group("tag")


def is_workflow_id(value: object) -> bool:
    return isinstance(value, str) and WORKFLOW_ID_RE.fullmatch(value) is not None


def dlq_ref(tag: str, entry_id: str) -> str:
    """The API's id of a dead letter: unique across partitions, and it finds the slot."""
    return f"{tag}-{entry_id}"


def parse_dlq_ref(ref: str) -> tuple[str, str] | None:
    """(tag, entry id) of a dead letter's API id; None when it is not one."""
    match = DLQ_REF_RE.fullmatch(ref)
    return None if match is None else (match.group("tag"), match.group("entry"))


@dataclass(frozen=True, slots=True)
class Keys:
    prefix: str = "dtq"  # tests use a unique prefix per test
    GROUP: ClassVar[str] = "dtq"  # the consumer group on every queue stream

    # -- one partition: every key below lives in the slot of {tag} -----------------------------
    def partition(self, tag: str) -> str:
        """The partition's key prefix: the key every partition script is routed by, and from which
        its Lua builds the partition's other keys."""
        return f"{self.prefix}:{{{tag}}}:"

    def owner(self, tag: str) -> str:
        """String: the queue this partition belongs to. Present while the partition is in use
        (serving or draining); a script that adds work refuses a partition without it (the
        queue was deleted under a submitter's cached layout)."""
        return f"{self.partition(tag)}queue"

    def stream(self, tag: str, queue: str, priority: str) -> str:
        return f"{self.partition(tag)}stream:{queue}:{priority}"

    def streams(self, tag: str, queue: str) -> list[str]:
        """The partition's streams in the order a worker serves them."""
        return [self.stream(tag, queue, p) for p in PRIORITIES]

    def task(self, task_id: str) -> str:
        return f"{self.partition(tag_of(task_id))}task:{task_id}"

    def result(self, task_id: str) -> str:
        return f"{self.partition(tag_of(task_id))}result:{task_id}"

    def idem(self, tag: str, key: str) -> str:
        """Submit idempotency key. Scoped to the queue: a key always picks the same partition."""
        return f"{self.partition(tag)}idem:{key}"

    def unique(self, tag: str, key: str) -> str:
        """A unique task's key: "<task id>|<until ms>", the task holding it (docs/tasks.md, "Unique
        tasks"). Scoped to the queue, as an idempotency key: a unique key always picks the same
        partition."""
        return f"{self.partition(tag)}unique:{key}"

    def schedule(self, tag: str) -> str:
        """Zset of the partition's delayed tasks and due retries, scored by due time (ms)."""
        return f"{self.partition(tag)}schedule"

    def schedule_counts(self, tag: str) -> str:
        """Hash queue -> entries in the partition's schedule, kept by the scripts that add and
        remove them (one field: a partition holds one queue)."""
        return f"{self.partition(tag)}schedule:counts"

    def schedule_claims(self, tag: str) -> str:
        """Zset of schedule entries the leader has claimed and not yet queued (by claim time)."""
        return f"{self.partition(tag)}schedule:claims"

    def lock(self, tag: str) -> str:
        """The partition's scheduler lease: the leader's worker id, with a TTL. Fences every
        leader script of the partition (its schedule, lost-task recovery)."""
        return f"{self.partition(tag)}lock"

    def dlq(self, tag: str) -> str:
        """Stream of the partition's dead letters, trimmed to DTQ_DLQ_MAXLEN per partition."""
        return f"{self.partition(tag)}dlq"

    def dlq_counts(self, tag: str) -> str:
        """Hash queue -> dead letters in the partition's DLQ stream, kept exact by the DLQ scripts."""
        return f"{self.partition(tag)}dlq:counts"

    def running(self, tag: str) -> str:
        """Zset of RUNNING task ids by their owner's last sign of life (claim or heartbeat), so the
        leader can recover tasks whose stream entry was deleted while pending."""
        return f"{self.partition(tag)}running"

    def recent(self, tag: str) -> str:
        """Zset of task ids by creation time, for listing recent tasks without SCAN."""
        return f"{self.partition(tag)}recent"

    def retain_ok(self, tag: str) -> str:
        """List of the partition's SUCCEEDED, CANCELLED and EXPIRED task ids, oldest finish first,
        popped (with their task and result keys) past DTQ_SUCCEEDED_RETENTION_COUNT
        (dtq_core/scripts/includes/retain.lua)."""
        return f"{self.partition(tag)}retain:ok"

    def retain_failed(self, tag: str) -> str:
        """Zset of the partition's FAILED and DEAD_LETTERED task ids by finish time (ms), trimmed
        (with their task and result keys) past DTQ_FAILED_RETENTION_COUNT; a DLQ retry removes
        its task (dtq_core/scripts/includes/retain.lua)."""
        return f"{self.partition(tag)}retain:failed"

    def ready(self, tag: str) -> str:
        """Flag: the partition may hold entries no worker has read yet. Set by every script that
        adds an entry (which publishes the tag on the wake channel when it was not set), cleared
        by a fetch that reads the partition's streams to their end."""
        return f"{self.partition(tag)}ready"

    def wake_list(self, tag: str) -> str:
        """List of at most one token, pushed with the wake message when the partition becomes
        ready: an idle worker serving this partition alone waits on it with BLPOP, its fetch
        queued behind, and so claims a new task in the round trip that wakes it."""
        return f"{self.partition(tag)}wake"

    def wake_self(self, tag: str, worker_id: str) -> str:
        """List a worker blocked on the partition's wake list pushes to itself (from another
        connection) to end its wait early: a wake message for the partition, a stop request.
        Same slot as the wake list, so one BLPOP waits on both."""
        return f"{self.partition(tag)}wake:{worker_id}"

    def paused(self, tag: str) -> str:
        """String JSON {"by": actor, "at": ms}: the queue is paused (every partition carries it,
        and the fetch script checks it in the same script as the read)."""
        return f"{self.partition(tag)}paused"

    def periodic(self, tag: str, name: str) -> str:
        """Hash of one periodic schedule kept in this partition (the first partition of its
        queue): its spec (JSON), its state (next tick, paused, the last run's task) and its last
        runs. Written by savePeriodic-1, dropPeriodic-1 and firePeriodic-1 only."""
        return f"{self.partition(tag)}periodic:{name}"

    def periodic_index(self, tag: str) -> str:
        """Zset schedule name -> its next tick (ms; +inf while paused) of the partition's
        periodic schedules: what the leader reads each tick to find the due ones."""
        return f"{self.partition(tag)}periodic"

    def periodic_tick(self, tag: str, name: str, tick_ms: int) -> str:
        """String: the schedule fired this tick (the task id, '' when the tick was skipped), for
        DTQ_IDEM_TTL_S. Written by firePeriodic-1 with the task, so a tick is never fired twice
        even by a caller that got past the schedule's compare-and-set."""
        return f"{self.partition(tag)}periodic-tick:{name}:{tick_ms}"

    def stats_tasks(self, tag: str) -> str:
        """Hash "queue|type|outcome" -> count, written by the partition's scripts, read by /metrics."""
        return f"{self.partition(tag)}stats:tasks"

    def stats_duration(self, tag: str) -> str:
        """Hash of handler-duration histogram buckets."""
        return f"{self.partition(tag)}stats:duration"

    def stats_counters(self, tag: str) -> str:
        """Hash of counters (redeliveries, absorbed, dlq trims, corrupt records)."""
        return f"{self.partition(tag)}stats:counters"

    def throughput(self, tag: str, minute: int) -> str:
        """Count of the partition's tasks finished in that epoch minute (expires after an hour)."""
        return f"{self.partition(tag)}stats:done:{minute}"

    def history(self, tag: str) -> str:
        """Prefix of the partition's task history (includes/history.lua, dtq_core/history.py):
        `<prefix>m:<epoch minute>`, `h:<epoch hour>` and `d:<epoch day>` hashes of counts by task
        type, outcome and time bucket; minutes are written by the scripts that end attempts, hours
        and days folded from them by the leader (foldHistory-1.lua)."""
        return f"{self.partition(tag)}hist:"

    def history_types(self, tag: str) -> str:
        """Set of the task types with a history series of their own in the partition (at most
        100; later ones count as "(other)")."""
        return f"{self.partition(tag)}hist:types"

    def samples_applied(self, tag: str, writer: str) -> str:
        """The number of the last statistics write of one worker process applied to the partition
        (flushStats-1.lua: a write sent again after a lost reply is not added twice); an hour."""
        return f"{self.partition(tag)}samples:{writer}"

    def event_seq(self, tag: str) -> str:
        """Counter that makes event ids unique (the partition's tag is part of the id)."""
        return f"{self.partition(tag)}events:seq"

    def limits(self, tag: str) -> str:
        """Hash of the partition's flow-control limits (issue 22, includes/limits.lua): its share
        of the queue's limits (conc, rate_n, rate_ms, gconc, grate_n, grate_ms), the queue-wide
        spec as set (spec, source, updated_at), a handler's pause (pause_until, ms) and the count
        of claims held back (throttled)."""
        return f"{self.partition(tag)}limits"

    def limits_rate(self, tag: str) -> str:
        """Zset "<task id>:<attempt>:<entry id>" -> start (ms): the queue's starts in the current
        rate window (a sliding log, at most rate_n members; one per claim, so a task started again
        at the same attempt number counts again)."""
        return f"{self.partition(tag)}limits:rate"

    def limits_held(self, tag: str) -> str:
        """Hash task id -> group key of the RUNNING tasks holding a slot of their group."""
        return f"{self.partition(tag)}limits:held"

    def limits_groups(self, tag: str) -> str:
        """Hash group key -> its tasks holding a group slot now."""
        return f"{self.partition(tag)}limits:groups"

    def limits_waiting(self, tag: str) -> str:
        """Hash group key -> 1 for the groups with tasks parked in their wait list."""
        return f"{self.partition(tag)}limits:waiting"

    def limits_wait(self, tag: str, group: str) -> str:
        """List of task ids parked while their group was full (each keeps its entry, acknowledged,
        in its stream for the depth gate and the waiting count: the task's entry_id), put back in
        their stream one per freed group slot (the kept entry then deleted)."""
        return f"{self.partition(tag)}limits:wait:{group}"

    def limits_group_rate(self, tag: str, group: str) -> str:
        """Zset of a group's starts in its current rate window (as limits_rate)."""
        return f"{self.partition(tag)}limits:grate:{group}"

    def limits_group_pause(self, tag: str) -> str:
        """Hash group key -> until (ms): groups a handler paused (RateLimited(scope="group"))."""
        return f"{self.partition(tag)}limits:gpause"

    # -- workflows (docs/keyspace.md, "Workflows") ---------------------------------------------
    def wf_outbox(self, tag: str) -> str:
        """Hash task id -> JSON {w, s, t, st, r}: a workflow step of this partition ended (written
        by retain_finish, in the script that ended it) and its workflow has not been advanced yet."""
        return f"{self.partition(tag)}wf_outbox"

    def wf_outbox_due(self, tag: str) -> str:
        """Zset task id -> when its outbox entry was written (ms): the leader re-drives old ones."""
        return f"{self.partition(tag)}wf_outbox:due"

    def workflow(self, workflow_id: str) -> str:
        """Hash of a workflow: status, created_at, finished_at, steps_total, done, failed, root
        (the tree as JSON), failed_step. The keys below share its slot (the id's tag)."""
        return f"{self.partition(workflow_tag(workflow_id))}wf:{workflow_id}"

    def workflow_part(self, workflow_id: str, part: str) -> str:
        """One of a workflow's per-step hashes, field = step index: def (the step's JSON
        definition), state (W/S/D/T/F/C; absent = W), pending (dependencies not finished),
        result (JSON result, or {"error": ...} of a tolerated failure), reason (why cancelled/failed)."""
        return f"{self.workflow(workflow_id)}:{part}"

    # -- global keys: no script touches one of them together with another key ------------------
    def queues(self) -> str:
        """Hash queue -> JSON partition layout {"tags": [...], "draining": [...]}: the registry
        (dtq_core/partitions.py). Written only by registerQueue-1 and reconcileQueue-1. Named
        apart from the earlier layout's `queues` set, so an upgraded Redis never answers WRONGTYPE."""
        return f"{self.prefix}:registry"

    def paused_index(self) -> str:
        """Hash queue -> JSON {"by", "at"} of the pauses in force: a copy for listings and for
        workers choosing what to wait on, written after the partitions' own flags (paused(tag)),
        which are what the fetch script obeys."""
        return f"{self.prefix}:registry:paused"

    def task_types(self) -> str:
        """Hash task type -> when a worker serving it last registered (ms). Submit refuses types not
        in it (once it is not empty); /metrics labels only these types. Written by registerTypes."""
        return f"{self.prefix}:types"

    def workers(self) -> str:
        return f"{self.prefix}:workers"

    def periodic_registry(self) -> str:
        """Hash schedule name -> the partition tag that holds it (Keys.periodic): lists the
        periodic schedules without scanning partitions. Written first on a create (it claims the
        name), removed last on a delete; the leader fires from the partitions' keys alone."""
        return f"{self.prefix}:periodic"

    def worker(self, worker_id: str) -> str:
        return f"{self.prefix}:worker:{worker_id}"

    def workflows(self) -> str:
        """Zset workflow id -> created (ms): lists workflows without scanning partitions."""
        return f"{self.prefix}:workflows"

    def leader(self) -> str:
        """The scheduler election: the leader's worker id, with a TTL. Who leads is decided here;
        the per-partition lease (lock) is what fences the leader's scripts."""
        return f"{self.prefix}:lock:scheduler"

    def ready_probe(self) -> str:
        """String written by GET /ready (with a 5 s TTL): a write, as Redis answers PING while it
        refuses writes."""
        return f"{self.prefix}:ready"

    def metrics_labels(self) -> str:
        """Hash `queue:<name>` / `type:<name>` -> `kept` | `other`: which values keep a label of
        their own on /metrics, decided once per value (keepLabels-1.lua, dtq_core/metrics.py)."""
        return f"{self.prefix}:metrics:labels"

    def operation(self, key: str) -> str:
        """Marker of dtq_tasks.idempotent_operation: kept apart from submit idempotency keys."""
        return f"{self.prefix}:once:{key}"

    # Statistics no live partition holds, shaped like the partition's stats_* hashes and added to
    # theirs by /metrics: a deleted queue's partitions fold their counts in (so the counters never
    # go back), and the console's fanout counts events_dropped here. A single node upgraded from
    # the unpartitioned layout keeps its old counts: these were their names.
    def global_stats_tasks(self) -> str:
        return f"{self.prefix}:stats:tasks"

    def global_stats_duration(self) -> str:
        return f"{self.prefix}:stats:duration"

    def global_stats_counters(self) -> str:
        return f"{self.prefix}:stats:counters"

    # The history roll-ups every partition's minutes are summed into by the leader, for the console's
    # overview and per-type pages: one slot ({hist}), touched by single-key commands and scripts only.
    def global_history(self, scope: str) -> str:
        """Prefix of a global history roll-up (`m:`, `h:`, `d:` hashes as in history()): scope
        "all" (fields are metrics: outcome letters and time buckets, all queues and types summed),
        "types" (`<type>|<metric>`, all queues summed) or "depth" (`<queue>` -> waiting tasks
        sampled by the leader)."""
        return f"{self.prefix}:{{hist}}:{scope}:"

    def history_folded(self) -> str:
        """Hash: what the leader's roll-up folded last ("hour:<scope>", "day:<scope>" -> unit),
        so a new leader folds what its predecessor left and nothing twice."""
        return f"{self.prefix}:{{hist}}:folded"

    def history_late(self) -> str:
        """Set: minutes (epoch minute) a worker wrote samples into after the leader's roll-up had
        stopped recomputing them (samples held while Redis could not be reached, a stopped
        worker), for the leader to roll up and fold again."""
        return f"{self.prefix}:{{hist}}:late"

    def audit(self) -> str:
        return f"{self.prefix}:{{audit}}:stream:audit"

    def audit_open(self) -> str:
        """Hash op id -> JSON {start, at, done}: operator actions whose intent is in the audit stream
        and whose outcome is not (running now, or cut short by a crash). Same slot as audit()."""
        return f"{self.prefix}:{{audit}}:stream:audit:open"

    def events_listener(self) -> str:
        """String with a short TTL, kept alive by whoever listens on events() (the console's feed):
        with DTQ_EVENTS=auto, task events are published only while it exists (dtq_core/events.py)."""
        return f"{self.prefix}:events:listener"

    # -- pub/sub channels (not keys) ------------------------------------------------------------
    def events(self) -> str:
        """Channel of live task and queue events (the console's feed)."""
        return f"{self.prefix}:events"

    def wake(self) -> str:
        """Channel on which a script publishes a partition's tag when the partition becomes ready;
        idle workers wait on it (one subscription, whatever the topology)."""
        return f"{self.prefix}:wake"
