"""Input serializers (output is the engine's task view: Redis records are not models)."""

from __future__ import annotations

from typing import Any

from rest_framework import serializers

SUBMIT_FIELDS = ("type", "payload", "queue", "priority", "delay_seconds", "ttl_seconds", "max_attempts",
                 "timeout_seconds", "idempotency_key", "group_key", "unique_key", "unique_mode",
                 "unique_window_s", "headers")


class SubmitSerializer(serializers.Serializer):
    """Shape checks only; the engine's validator owns the rules so every surface agrees."""

    type = serializers.JSONField()
    # null is "not given" for the optional fields (as None is in dtq_tasks.enqueue): payload {},
    # no delay, no ttl, the configured attempts and timeout, no idempotency key.
    payload = serializers.JSONField(required=False, default=dict, allow_null=True)
    # Any JSON value may be a JSONField's default; DRF's stubs allow only mappings.
    queue = serializers.JSONField(required=False, default="default")  # type: ignore[arg-type]
    priority = serializers.JSONField(required=False, default="normal")  # type: ignore[arg-type]
    delay_seconds = serializers.JSONField(required=False, default=0, allow_null=True)  # type: ignore[arg-type]
    ttl_seconds = serializers.JSONField(required=False, default=None, allow_null=True)
    max_attempts = serializers.JSONField(required=False, default=None, allow_null=True)
    timeout_seconds = serializers.JSONField(required=False, default=None, allow_null=True)
    idempotency_key = serializers.JSONField(required=False, default=None, allow_null=True)
    group_key = serializers.JSONField(required=False, default=None, allow_null=True)
    headers = serializers.JSONField(required=False, default=None, allow_null=True,
                                    help_text="string pairs the task carries: up to 32, names 1-64 of "
                                              "A-Z a-z 0-9 _ . -, values up to 1024 characters, 4 KiB in all")
    # Unique tasks (docs/tasks.md): all three null/absent, or a key with its mode (and window).
    unique_key = serializers.JSONField(required=False, default=None, allow_null=True)
    unique_mode = serializers.JSONField(required=False, default=None, allow_null=True)
    unique_window_s = serializers.JSONField(required=False, default=None, allow_null=True)

    def to_internal_value(self, data: Any) -> dict[str, Any]:
        if not isinstance(data, dict):
            raise serializers.ValidationError({"non_field_errors": ["expected a JSON object"]})
        unknown = sorted(set(data) - set(SUBMIT_FIELDS))
        if unknown:
            raise serializers.ValidationError({name: ["unknown field"] for name in unknown})
        return super().to_internal_value(data)


class BatchSerializer(serializers.Serializer):
    """Shape of a batch body; each item is validated on its own so one bad item fails alone."""

    tasks = serializers.ListField(child=serializers.JSONField(), max_length=1000, allow_empty=True,
                                  help_text="submit bodies, at most 1000")

    def to_internal_value(self, data: Any) -> dict[str, Any]:
        if not isinstance(data, dict):
            raise serializers.ValidationError({"non_field_errors": ["expected a JSON object"]})
        unknown = sorted(set(data) - {"tasks"})
        if unknown:
            raise serializers.ValidationError({name: ["unknown field"] for name in unknown})
        return super().to_internal_value(data)


class DlqSelectionSerializer(serializers.Serializer):
    """Documentation of a bulk DLQ body; dtq_core.engine.dlq.DlqSelection.from_body does the checking."""

    ids = serializers.ListField(child=serializers.CharField(), required=False, max_length=10000,
                                help_text="dead-letter ids, as the DLQ listing gives them (entry_id)")
    task_ids = serializers.ListField(child=serializers.CharField(), required=False, max_length=10000)
    queue = serializers.CharField(required=False, max_length=200)
    type = serializers.CharField(required=False, max_length=200)
    q = serializers.CharField(required=False, max_length=200)
    all = serializers.BooleanField(required=False)


PERIODIC_FIELDS = ("name", "type", "payload", "queue", "priority", "cron", "timezone", "every_seconds", "overlap",
                   "misfire", "max_attempts", "timeout_seconds")


class _ObjectOnly(serializers.Serializer):
    """A JSON object whose every key is a declared field: a typo must not be silently ignored."""

    allowed: tuple[str, ...] = ()

    def to_internal_value(self, data: Any) -> dict[str, Any]:
        if not isinstance(data, dict):
            raise serializers.ValidationError({"non_field_errors": ["expected a JSON object"]})
        unknown = sorted(set(data) - set(self.allowed))
        if unknown:
            raise serializers.ValidationError({name: ["unknown field"] for name in unknown})
        return super().to_internal_value(data)


LIMIT_FIELDS = ("concurrency", "rate", "group_concurrency", "group_rate")


class LimitsSerializer(_ObjectOnly):
    """A PUT body: the queue's limits, all of them (a field left out or null is no such limit).
    Shape checks only; dtq_core.engine.limits validates the values."""

    allowed = LIMIT_FIELDS
    concurrency = serializers.JSONField(required=False, default=None, allow_null=True,
                                        help_text="tasks of the queue running at once, 1..100000")
    rate = serializers.JSONField(required=False, default=None, allow_null=True,
                                 help_text='starts per window: {"limit": 1..1000000, "period_s": 0.001..86400}')
    group_concurrency = serializers.JSONField(required=False, default=None, allow_null=True,
                                              help_text="tasks of one group_key running at once, 1..100000")
    group_rate = serializers.JSONField(required=False, default=None, allow_null=True,
                                       help_text='starts per window of one group_key: {"limit": n, "period_s": s}')


class PeriodicCreateSerializer(_ObjectOnly):
    """Shape checks only; dtq_core.engine.periodic validates the values (names, cron, timezone, ...)."""

    allowed = PERIODIC_FIELDS
    name = serializers.JSONField(help_text="unique; letters, digits and . _ - : like a task type")
    type = serializers.JSONField(help_text="the task type each tick submits")
    payload = serializers.JSONField(required=False, default=None, allow_null=True)
    queue = serializers.JSONField(required=False, default="default")  # type: ignore[arg-type]  # as in SubmitSerializer
    priority = serializers.JSONField(required=False, default="normal")  # type: ignore[arg-type]
    cron = serializers.JSONField(required=False, default=None, allow_null=True,
                                 help_text="5 fields, or 6 with seconds first; or give every_seconds")
    timezone = serializers.JSONField(required=False, default="UTC",  # type: ignore[arg-type]
                                     help_text="IANA zone the cron fields are read in")
    every_seconds = serializers.JSONField(required=False, default=None, allow_null=True)
    overlap = serializers.JSONField(required=False, default="allow",  # type: ignore[arg-type]
                                    help_text="allow, or skip a tick while the previous run is unfinished")
    misfire = serializers.JSONField(required=False, default="skip",  # type: ignore[arg-type]
                                    help_text="skip ticks missed without a leader, or run_once for all of them")
    max_attempts = serializers.JSONField(required=False, default=None, allow_null=True)
    timeout_seconds = serializers.JSONField(required=False, default=None, allow_null=True)


class PeriodicChangeSerializer(_ObjectOnly):
    """A PATCH body: only the fields given change (the name is the URL's, and stays)."""

    allowed = tuple(f for f in PERIODIC_FIELDS if f != "name")
    type = serializers.JSONField(required=False)
    payload = serializers.JSONField(required=False, allow_null=True)
    queue = serializers.JSONField(required=False)
    priority = serializers.JSONField(required=False)
    cron = serializers.JSONField(required=False, allow_null=True)
    timezone = serializers.JSONField(required=False)
    every_seconds = serializers.JSONField(required=False, allow_null=True)
    overlap = serializers.JSONField(required=False)
    misfire = serializers.JSONField(required=False)
    max_attempts = serializers.JSONField(required=False, allow_null=True)
    timeout_seconds = serializers.JSONField(required=False, allow_null=True)

    def to_internal_value(self, data: Any) -> dict[str, Any]:
        if isinstance(data, dict) and "name" in data:
            raise serializers.ValidationError({"name": ["a schedule cannot be renamed: create one under the new "
                                                        "name and delete this one"]})
        if isinstance(data, dict) and not data:
            raise serializers.ValidationError({"non_field_errors": ["nothing to change: give at least one field"]})
        return super().to_internal_value(data)


# -- output shapes, for the OpenAPI schema (the engine builds the dicts) -----------------------

class ErrorBodySerializer(serializers.Serializer):
    code = serializers.CharField()
    message = serializers.CharField()
    request_id = serializers.CharField()
    field = serializers.CharField(required=False)


class ErrorSerializer(serializers.Serializer):
    error = ErrorBodySerializer()


class TaskSerializer(serializers.Serializer):
    id = serializers.CharField()
    type = serializers.CharField()
    queue = serializers.CharField()
    priority = serializers.CharField()
    status = serializers.CharField()
    payload = serializers.JSONField(allow_null=True)
    attempt = serializers.IntegerField(allow_null=True)
    max_attempts = serializers.IntegerField(allow_null=True)
    timeout_s = serializers.FloatField(allow_null=True)
    created_at = serializers.DateTimeField(allow_null=True)
    updated_at = serializers.DateTimeField(allow_null=True)
    enqueued_at = serializers.DateTimeField(allow_null=True)
    started_at = serializers.DateTimeField(allow_null=True)
    finished_at = serializers.DateTimeField(allow_null=True)
    due_at = serializers.DateTimeField(allow_null=True)
    expires_at = serializers.DateTimeField(allow_null=True)
    worker_id = serializers.CharField(allow_null=True)
    last_error = serializers.CharField(allow_null=True)
    # Fields named like attributes of Serializer: DRF moves declared fields off the class; its stubs
    # see them as overriding the attribute.
    errors = serializers.JSONField()  # type: ignore[assignment]
    result_truncated = serializers.BooleanField()
    cancel_requested = serializers.BooleanField()
    idempotency_key = serializers.CharField(allow_null=True)
    request_id = serializers.CharField(allow_null=True)
    group_key = serializers.CharField(allow_null=True, help_text="its group for the queue's group limits")
    headers = serializers.DictField(child=serializers.CharField(), required=False,
                                    help_text="what it was submitted with, and what enqueue middleware added")
    unique_key = serializers.CharField(required=False, help_text="its unique key, when submitted as a unique task")
    unique_mode = serializers.CharField(required=False, help_text="while_active, throttle or debounce")
    unique = serializers.JSONField(
        required=False, help_text='submit answers only, with a unique_key: {"existing": bool, "mode", "key"}; '
                                  "existing: a task holding the key was returned (200), not a new one (201)")
    compact = serializers.BooleanField(
        help_text="a finished record compacted by the retention policy (DTQ_KEEP_PAYLOAD): payload, max_attempts, "
                  "timeout_s, enqueued_at, idempotency_key and request_id are no longer kept (null)")
    dlq_entry_id = serializers.CharField(required=False, help_text="the id of its dead letter (while in the DLQ)")
    dlq_discarded_at = serializers.CharField(required=False, help_text="when its dead letter was discarded")
    retried_from_dlq_at = serializers.CharField(required=False, help_text="when it was last retried from the DLQ")
    dlq_trimmed_at = serializers.CharField(required=False,
                                           help_text="when the DLQ cap evicted its dead letter (DTQ_DLQ_MAXLEN)")
    result = serializers.JSONField(required=False)
    periodic_name = serializers.CharField(required=False, help_text="the periodic task that fired it")
    scheduled_for = serializers.DateTimeField(required=False, help_text="the tick it was fired for (UTC)")
    progress = serializers.JSONField(
        required=False, help_text='what its handler last reported (ctx.progress): {"done", "total" (null: unknown), '
                                  '"fraction" (null without a total), "message", "updated_at"}')
    workflow_id = serializers.CharField(required=False, help_text="the workflow it is a step of")
    workflow_step = serializers.IntegerField(required=False, help_text="its step's index in that workflow")


class BatchResultsSerializer(serializers.Serializer):
    results = serializers.ListField(child=serializers.JSONField(),
                                    help_text='one per item, in order: {"id", "status"} or {"error": {...}}')


class QueueSerializer(serializers.Serializer):
    name = serializers.CharField()
    depth = serializers.DictField(child=serializers.IntegerField(), help_text="waiting entries per priority")
    waiting = serializers.IntegerField()
    pending = serializers.IntegerField(help_text="delivered to a worker, not yet acknowledged (in flight)")
    retry_scheduled = serializers.IntegerField()
    dlq = serializers.IntegerField()
    paused = serializers.BooleanField()
    paused_by = serializers.CharField(allow_null=True, help_text="the actor that paused it (audit format)")
    paused_at = serializers.CharField(allow_null=True, help_text="when it was paused (ISO)")
    finished_last_minute = serializers.IntegerField()
    partitions = serializers.IntegerField(help_text="partitions the counts are summed over (DTQ_QUEUE_PARTITIONS)")


class RateSerializer(serializers.Serializer):
    limit = serializers.IntegerField()
    period_s = serializers.FloatField()


class LimitsUsageSerializer(serializers.Serializer):
    running = serializers.IntegerField(help_text="tasks holding a queue slot now")
    rate_used = serializers.IntegerField(help_text="starts in the current rate window")
    groups_running = serializers.IntegerField(help_text="groups with a task running")
    throttled_total = serializers.IntegerField(help_text="fetches and claims held back by a limit (a counter)")


class LimitsViewSerializer(serializers.Serializer):
    queue = serializers.CharField()
    concurrency = serializers.IntegerField(allow_null=True)
    rate = RateSerializer(allow_null=True)
    group_concurrency = serializers.IntegerField(allow_null=True)
    group_rate = RateSerializer(allow_null=True)
    # A field named like Serializer.source: see TaskSerializer.errors.
    source = serializers.ChoiceField(["api", "settings"], allow_null=True,  # type: ignore[assignment]
                                     help_text="who set them last: api (also console and CLI) or settings "
                                               "(DTQ_QUEUE_LIMITS); null: no limits")
    paused_until = serializers.DateTimeField(allow_null=True,
                                             help_text="a handler's RateLimited pause of the whole queue, in force")
    scope = serializers.ChoiceField(["exact", "per_partition"],
                                    help_text="per_partition: a partitioned queue splits concurrency and rate")
    usage = LimitsUsageSerializer()


class QueueDetailSerializer(QueueSerializer):
    limits = LimitsViewSerializer()


class QueueListSerializer(serializers.Serializer):
    results = QueueSerializer(many=True)


class PauseResultSerializer(QueueSerializer):
    changed = serializers.BooleanField(help_text="false when the queue already was in that state")


class CountSerializer(serializers.Serializer):
    count = serializers.IntegerField()


class DlqRetryResultSerializer(CountSerializer):
    not_found = serializers.IntegerField(help_text="selected entries gone by then (retried or discarded "
                                         "by someone else, trimmed)")
    kept = serializers.IntegerField(help_text="entries left in the DLQ because their task record expired: "
                                    "only discard removes them")


class PurgeResultSerializer(CountSerializer):
    queue = serializers.CharField()


class DeleteResultSerializer(serializers.Serializer):
    queue = serializers.CharField()
    deleted = serializers.BooleanField()


class DlqItemSerializer(serializers.Serializer):
    entry_id = serializers.CharField(help_text="the dead letter's id: its partition's tag and its DLQ stream entry id")
    task_id = serializers.CharField(allow_null=True)
    queue = serializers.CharField(allow_null=True)
    type = serializers.CharField(allow_null=True)
    attempt = serializers.IntegerField(allow_null=True, help_text="null when the stored value does not read")
    error_class = serializers.CharField(allow_null=True)
    error = serializers.CharField(allow_null=True)
    failed_at = serializers.DateTimeField(allow_null=True)
    damaged = serializers.BooleanField(required=False, help_text="present (true) on a dead letter damaged in Redis")
    attempt_corrupt = serializers.CharField(required=False, help_text="the stored attempt, when it does not read")
    failed_at_corrupt = serializers.CharField(required=False, help_text="the stored failed_at, when it does not read")


class DlqEntrySerializer(DlqItemSerializer):
    task = TaskSerializer(allow_null=True)


class AuditEntrySerializer(serializers.Serializer):
    id = serializers.CharField()
    ts = serializers.DateTimeField(allow_null=True)
    actor = serializers.CharField(allow_null=True)
    source = serializers.CharField(allow_null=True)  # type: ignore[assignment]  # as `errors` above
    action = serializers.CharField(allow_null=True)
    target = serializers.CharField(allow_null=True)
    count = serializers.IntegerField(help_text="how many it changed (unfinished: as far as recorded)")
    request_id = serializers.CharField(allow_null=True)
    op_id = serializers.CharField(allow_null=True, help_text="links the intent and outcome entries")
    outcome = serializers.ChoiceField(["finished", "refused", "failed", "unfinished"], help_text=(
        "unfinished: started, no outcome recorded (running now, or cut short by a crash or restart)"))
    error = serializers.CharField(allow_null=True, help_text="refused: the error code; failed: the exception")
    started_at = serializers.DateTimeField(allow_null=True)
    selected = serializers.IntegerField(allow_null=True, help_text="entries the selection matched at the start")
    selection = serializers.JSONField(allow_null=True, help_text="ids, task_ids, filters or all, as given")
    progress_at = serializers.DateTimeField(allow_null=True, help_text="unfinished: when progress was last recorded")


class WorkerSerializer(serializers.Serializer):
    id = serializers.CharField()
    # The details are null for a lost worker whose details hash expired.
    hostname = serializers.CharField(allow_null=True)
    pid = serializers.IntegerField(allow_null=True)
    queues = serializers.ListField(child=serializers.CharField(), allow_null=True,
                                   help_text="the queues it serves; empty: every known queue")
    concurrency = serializers.IntegerField(allow_null=True)
    in_flight = serializers.IntegerField(allow_null=True)
    processed = serializers.IntegerField(allow_null=True)
    started_at = serializers.DateTimeField(allow_null=True)
    heartbeat_at = serializers.DateTimeField(allow_null=True)
    heartbeat_age_s = serializers.FloatField()
    alive = serializers.BooleanField()
    leader = serializers.BooleanField()
    state = serializers.CharField(help_text="starting, running, quiet, draining or stopped as the worker reports "
                                            "it; lost when its heartbeat is older than the visibility timeout")
    rss_bytes = serializers.IntegerField(allow_null=True, help_text="resident memory at its last heartbeat")
    cpu_seconds = serializers.FloatField(allow_null=True, help_text="CPU time of its process so far")
    cpu_percent = serializers.FloatField(allow_null=True, help_text="its CPU use between its last two heartbeats "
                                                                    "(100 = one core)")
    control = serializers.CharField(allow_null=True, help_text="quiet or stop when an operator told it so")


class WorkerDetailSerializer(WorkerSerializer):
    running = serializers.ListField(child=serializers.DictField(), help_text="the tasks it runs now "
                                    "(as GET /api/v1/tasks/running)")


class WorkerControlSerializer(serializers.Serializer):
    worker_id = serializers.CharField()
    control = serializers.CharField(help_text="quiet or stop")
    changed = serializers.BooleanField(help_text="false when it was told so already")


class WorkerListSerializer(serializers.Serializer):
    results = WorkerSerializer(many=True)
    scheduler_leader = serializers.CharField(allow_null=True)


class ScheduleItemSerializer(serializers.Serializer):
    task_id = serializers.CharField()
    type = serializers.CharField(allow_null=True)
    queue = serializers.CharField(allow_null=True)
    status = serializers.CharField(allow_null=True)
    attempt = serializers.IntegerField()
    max_attempts = serializers.IntegerField()
    due_at = serializers.DateTimeField(allow_null=True)
    due_in_s = serializers.FloatField()
    kind = serializers.ChoiceField(choices=["retry", "delayed"])


class PeriodicRunSerializer(serializers.Serializer):
    scheduled_for = serializers.DateTimeField(help_text="the tick (UTC); a trigger's is when it was triggered")
    task_id = serializers.CharField(allow_null=True, help_text="null when the tick fired no task")
    status = serializers.CharField(help_text="the task's status now; UNKNOWN once its record expired; for a tick "
                                             "that fired no task, why: SKIPPED (overlap=skip) or QUEUE_FULL")
    fired_at = serializers.DateTimeField(allow_null=True)
    kind = serializers.ChoiceField(["tick", "catch_up", "trigger"],
                                   help_text="catch_up: one run for the ticks missed (misfire=run_once)")
    missed = serializers.IntegerField(help_text="the ticks a catch_up run stands for")


class PeriodicSerializer(serializers.Serializer):
    name = serializers.CharField()
    type = serializers.CharField()
    payload = serializers.JSONField(allow_null=True)
    queue = serializers.CharField()
    priority = serializers.CharField()
    cron = serializers.CharField(allow_null=True)
    timezone = serializers.CharField()
    every_seconds = serializers.FloatField(allow_null=True)
    overlap = serializers.ChoiceField(["allow", "skip"])
    misfire = serializers.ChoiceField(["skip", "run_once"])
    max_attempts = serializers.IntegerField(allow_null=True, required=False)
    timeout_seconds = serializers.FloatField(allow_null=True, required=False)
    paused = serializers.BooleanField()
    paused_at = serializers.DateTimeField(allow_null=True)
    paused_by = serializers.CharField(allow_null=True, help_text="the actor that paused it (audit format)")
    # A field named like Serializer.source: see TaskSerializer.errors.
    source = serializers.ChoiceField(["code", "api"],  # type: ignore[assignment]
                                     help_text="code: declared beside a handler, synced at worker start; "
                                               "api: made at run time")
    description = serializers.CharField(help_text="the schedule in words")
    next_run_at = serializers.DateTimeField(allow_null=True, help_text="the next tick (UTC); null while paused")
    created_at = serializers.DateTimeField(allow_null=True)
    updated_at = serializers.DateTimeField(allow_null=True)
    last_runs = PeriodicRunSerializer(many=True, help_text="newest first, up to 20")


class PeriodicListSerializer(serializers.Serializer):
    results = PeriodicSerializer(many=True)


class PeriodicDeleteResultSerializer(serializers.Serializer):
    name = serializers.CharField()
    deleted = serializers.BooleanField()


class PeriodicTriggerResultSerializer(serializers.Serializer):
    name = serializers.CharField()
    task_id = serializers.CharField()
    scheduled_for = serializers.DateTimeField()


def page_of(item: type[serializers.Serializer], name: str) -> type[serializers.Serializer]:
    """A cursor page of `item`: {"results": [...], "next": url or null}."""
    return type(name, (serializers.Serializer,), {
        "results": item(many=True),
        "next": serializers.URLField(allow_null=True, help_text="the next page, or null at the end"),
    })


TaskPageSerializer = type("TaskPage", (page_of(TaskSerializer, "TaskPageBase"),), {
    "stopped_early": serializers.BooleanField(help_text="a filtered page that examined its 5,000 ids before "
                                              "filling up: older tasks may still match (follow next)"),
})
DlqPageSerializer = page_of(DlqItemSerializer, "DlqPage")
AuditPageSerializer = page_of(AuditEntrySerializer, "AuditPage")
SchedulePageSerializer = page_of(ScheduleItemSerializer, "SchedulePage")


# -- workflows (docs/api.md, "Workflows") ---------------------------------------------------------

class WorkflowSubmitSerializer(serializers.Serializer):
    """For the schema only: the body is a workflow tree, checked by dtq_core.workflow_spec."""

    chain = serializers.ListField(child=serializers.JSONField(), required=False,
                                  help_text="steps run one after another; a step is a task body or a chain/group")
    group = serializers.ListField(child=serializers.JSONField(), required=False,
                                  help_text="steps run side by side")
    then = serializers.JSONField(required=False, help_text="a group's callback: gets its members' results in order")
    tolerate_failures = serializers.BooleanField(required=False,
                                                 help_text="a group's `then` runs with errors in place of results")


class WorkflowStepSerializer(serializers.Serializer):
    index = serializers.IntegerField()
    type = serializers.CharField()
    queue = serializers.CharField()
    priority = serializers.CharField()
    task_id = serializers.CharField()
    status = serializers.CharField(help_text="its task's status; WAITING before its task exists")
    depends_on = serializers.ListField(child=serializers.IntegerField())
    cancel_reason = serializers.CharField(allow_null=True)
    progress = serializers.JSONField(allow_null=True)


class WorkflowSummarySerializer(serializers.Serializer):
    id = serializers.CharField()
    status = serializers.CharField(help_text="RUNNING, SUCCEEDED, FAILED or CANCELLED")
    created_at = serializers.DateTimeField()
    finished_at = serializers.DateTimeField(allow_null=True)
    steps_total = serializers.IntegerField()
    steps_finished = serializers.IntegerField()


# Built with type(): a field named "root" would shadow Field.root in a class body (mypy says so;
# the serializer only describes the response for the schema).
WorkflowSerializer = type("WorkflowSerializer", (WorkflowSummarySerializer,), {
    "__module__": __name__,
    "progress": serializers.JSONField(help_text='{"done", "total", "fraction"} over its steps'),
    "root": serializers.JSONField(help_text="the tree: chain/group/step nodes, steps by index"),
    "steps": WorkflowStepSerializer(many=True),
    "cancelled_at": serializers.DateTimeField(
        allow_null=True, help_text="when a cancel stopped it (a FAILED workflow keeps its status)"),
    "cancellable": serializers.BooleanField(
        help_text="whether POST .../cancel would stop anything: RUNNING, or FAILED with steps still to run"),
})


class WorkflowPageSerializer(serializers.Serializer):
    results = WorkflowSummarySerializer(many=True)
    next = serializers.URLField(allow_null=True)


class RunningTaskSerializer(serializers.Serializer):
    id = serializers.CharField()
    type = serializers.CharField()
    queue = serializers.CharField()
    priority = serializers.CharField()
    attempt = serializers.IntegerField()
    max_attempts = serializers.IntegerField(allow_null=True)
    worker_id = serializers.CharField(allow_null=True)
    started_at = serializers.DateTimeField(allow_null=True)
    runtime_s = serializers.FloatField(allow_null=True, help_text="seconds since this attempt started")
    progress = serializers.JSONField(allow_null=True)
    workflow_id = serializers.CharField(allow_null=True)


class RunningTasksSerializer(serializers.Serializer):
    results = RunningTaskSerializer(many=True)
    total = serializers.IntegerField(help_text="tasks RUNNING in all (the queue's, with ?queue=)")
    shown = serializers.IntegerField()
