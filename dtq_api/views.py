"""Thin DRF views over the engine: parse, call, shape.

Destructive views use DestructiveMixin (X-API-Key, or a staff session with the console's permission;
audited through an Actor).
Every error leaves through dtq_api.exceptions as the contract's envelope.
"""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest, JsonResponse
from django.views.decorators.csrf import csrf_exempt
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema_view
from rest_framework import status
from rest_framework.request import Request
from rest_framework.response import Response

from dtq_core.conf import get_engine
from dtq_core.connection import EVICTION_POLICY, eviction_problem
from dtq_core.engine import Engine
from dtq_core.engine.dlq import DlqSelection
from dtq_core.engine.periodic import PeriodicSpec
from dtq_core.errors import QueueNotFound, RedisTrouble, ValidationError, error_body
from dtq_core.redis_errors import redis_trouble
from dtq_core.task import Status, valid_queue_name

from . import serializers as s
from .auth import actor_for
from .base import APIView, extend_schema
from .batch import submit_batch
from .exceptions import envelope
from .fastpath import is_plain_json_call, respond
from .middleware import request_id_of
from .pagination import PAGE_PARAMETERS, page_params, page_response, text_param
from .permissions import ChangingMethodsMixin, DestructiveMixin
from .shapes import batch_items, submit_options

ERRORS = {code: OpenApiResponse(s.ErrorSerializer, description=text) for code, text in {
    400: "VALIDATION_ERROR or MALFORMED_JSON", 404: "not found",
    503: "REDIS_UNAVAILABLE, REDIS_WRITE_FAILED or REDIS_REPLICATION_TIMEOUT"}.items()}
DESTRUCTIVE_ERRORS = {
    **ERRORS,
    401: OpenApiResponse(s.ErrorSerializer, description="API_KEY_REQUIRED or AUTHENTICATION_REQUIRED"),
    403: OpenApiResponse(s.ErrorSerializer,
                         description="API_KEY_INVALID, PERMISSION_DENIED (also CSRF) or CROSS_SITE_REQUEST"),
}


def filters(*names: str) -> list[OpenApiParameter]:
    return [OpenApiParameter(n, OpenApiTypes.STR, description=f"only entries with this {n}") for n in names]


SEARCH_PARAMETERS = [
    OpenApiParameter("id_prefix", OpenApiTypes.STR, description="only task ids starting so (a partition tag, "
                     "then '-' and hex digits)"),
    OpenApiParameter("created_after", OpenApiTypes.DATETIME, description="only tasks created at or after"),
    OpenApiParameter("created_before", OpenApiTypes.DATETIME, description="only tasks created at or before"),
    OpenApiParameter("q", OpenApiTypes.STR, description="only tasks whose payload, last error or error list "
                     "contains this text, ignoring case (at most 200 characters)"),
]


# -- tasks ------------------------------------------------------------------------------------

class TaskListView(APIView):
    def dispatch(self, request: HttpRequest, *args: Any, **kwargs: Any) -> Any:
        if request.method == "POST" and is_plain_json_call(request):
            return respond(self, request, lambda body: self.submit(request, body))
        return super().dispatch(request, *args, **kwargs)

    @extend_schema(operation_id="tasks_submit", request=s.SubmitSerializer,
                   responses={201: s.TaskSerializer, 200: s.TaskSerializer, 413: s.ErrorSerializer,
                              429: s.ErrorSerializer, **ERRORS})
    def post(self, request: Request) -> Response:
        return Response(*self.submit(request._request, request.data))

    def submit(self, request: HttpRequest, body: Any) -> tuple[dict[str, Any], int]:
        """(the task, 201 or 200 for an idempotency key seen before); POST through DRF or fastpath."""
        options = submit_options(body)  # SubmitSerializer's checks, without its per-call cost
        engine = get_engine()
        enqueued = engine.tasks.enqueue(request_id=request_id_of(request), **options)
        if enqueued.task is None and not enqueued.created and enqueued.status == "UNKNOWN":
            # The idempotency key outlived its task's record: the id is all that is known.
            task: dict[str, Any] = {"id": enqueued.id, "status": enqueued.status}
        else:
            task = enqueued.task if enqueued.task is not None else engine.tasks.get(enqueued.id)
        if enqueued.unique is not None:
            task = {**task, "unique": enqueued.unique}
        return task, status.HTTP_201_CREATED if enqueued.created else status.HTTP_200_OK

    @extend_schema(operation_id="tasks_list",
                   parameters=[*filters("queue", "status", "type", "periodic_name"), *SEARCH_PARAMETERS,
                               *PAGE_PARAMETERS],
                   responses={200: s.TaskPageSerializer, **ERRORS})
    def get(self, request: Request) -> Response:
        wanted = text_param(request, "status")
        if wanted is not None and wanted not in Status.__members__:
            raise ValidationError(f"status must be one of {', '.join(Status)}", field="status")
        page = get_engine().tasks.list(queue=text_param(request, "queue"), status=wanted,
                                       type=text_param(request, "type"),
                                       periodic_name=text_param(request, "periodic_name"),
                                       id_prefix=text_param(request, "id_prefix"),
                                       created_after=text_param(request, "created_after"),
                                       created_before=text_param(request, "created_before"),
                                       text=text_param(request, "q"), **page_params(request))
        response = page_response(request, page)
        response.data["stopped_early"] = page.stopped_early
        return response


class TaskBatchView(APIView):
    def dispatch(self, request: HttpRequest, *args: Any, **kwargs: Any) -> Any:
        if request.method == "POST" and is_plain_json_call(request):
            return respond(self, request, lambda body: self.submit(request, body))
        return super().dispatch(request, *args, **kwargs)

    @extend_schema(operation_id="tasks_batch_submit", request=s.BatchSerializer,
                   responses={200: s.BatchResultsSerializer, **ERRORS})
    def post(self, request: Request) -> Response:
        return Response(*self.submit(request._request, request.data))

    def submit(self, request: HttpRequest, body: Any) -> tuple[dict[str, Any], int]:
        items = batch_items(body)  # BatchSerializer's checks, as for the single submit
        return {"results": submit_batch(get_engine(), items, request_id_of(request))}, status.HTTP_200_OK


class RunningTasksView(APIView):
    """The tasks running now, longest-running first (at most 500), with their worker and runtime."""

    @extend_schema(operation_id="tasks_running", parameters=filters("queue"),
                   responses={200: s.RunningTasksSerializer, **ERRORS})
    def get(self, request: Request) -> Response:
        queue = text_param(request, "queue")
        if queue is not None and not valid_queue_name(queue):
            raise ValidationError("queue must match [a-z0-9][a-z0-9_-]{0,63}", field="queue")
        return Response(get_engine().running.list(queue=queue))


class TaskDetailView(ChangingMethodsMixin, APIView):
    permissions = {"DELETE": "cancel_task"}

    @extend_schema(operation_id="tasks_get", responses={200: s.TaskSerializer, **ERRORS})
    def get(self, request: Request, task_id: str) -> Response:
        return Response(get_engine().tasks.get(task_id))

    @extend_schema(operation_id="tasks_delete", request=None,
                   responses={204: None, 409: s.ErrorSerializer, **DESTRUCTIVE_ERRORS})
    def delete(self, request: Request, task_id: str) -> Response:
        """Delete a task that waits (queued, delayed or a retry: cancelled first) or has ended: its
        record, result and listing entry. 409 TASK_RUNNING for a running task (cancel it first)."""
        get_engine().tasks.delete(task_id, actor_for(request))
        return Response(status=204)


class TaskRunNowView(DestructiveMixin, APIView):
    """Make a delayed task or a waiting retry due now: the scheduler leader queues it in its next
    round. 409 TASK_NOT_SCHEDULED when it is not waiting in the schedule, TASK_TERMINAL when ended."""

    permission = "cancel_task"

    @extend_schema(operation_id="tasks_run_now", request=None,
                   responses={202: s.TaskSerializer, 409: s.ErrorSerializer, **DESTRUCTIVE_ERRORS})
    def post(self, request: Request, task_id: str) -> Response:
        engine = get_engine()
        engine.tasks.run_now(task_id, actor_for(request))
        return Response(engine.tasks.get(task_id), status=202)


class TaskCancelView(DestructiveMixin, APIView):
    permission = "cancel_task"

    @extend_schema(operation_id="tasks_cancel", request=None,
                   responses={202: s.TaskSerializer, 409: s.ErrorSerializer, **DESTRUCTIVE_ERRORS})
    def post(self, request: Request, task_id: str) -> Response:
        engine = get_engine()
        engine.tasks.cancel(task_id, actor_for(request))
        return Response(engine.tasks.get(task_id), status=status.HTTP_202_ACCEPTED)


# -- queues -----------------------------------------------------------------------------------

class QueueListView(APIView):
    @extend_schema(operation_id="queues_list", responses={200: s.QueueListSerializer, **ERRORS})
    def get(self, request: Request) -> Response:
        return Response({"results": get_engine().queues.stats()})


class QueueDetailView(APIView):
    @extend_schema(operation_id="queues_get", responses={200: s.QueueDetailSerializer, **ERRORS})
    def get(self, request: Request, queue: str) -> Response:
        engine = get_engine()
        return Response({**engine.queues.get(queue), "limits": engine.limits.get(queue)})


class QueueLimitsView(ChangingMethodsMixin, APIView):
    """A queue's flow-control limits with their usage; PUT replaces them all, DELETE clears them."""

    permissions = {"PUT": "change_queue_limits", "DELETE": "change_queue_limits"}

    @extend_schema(operation_id="queues_limits_get", description="The queue's limits and their usage now.",
                   responses={200: s.LimitsViewSerializer, **ERRORS})
    def get(self, request: Request, queue: str) -> Response:
        engine = get_engine()
        engine.queues.layout(queue)  # 404 QUEUE_NOT_FOUND as for the queue itself
        return Response(engine.limits.get(queue))

    @extend_schema(operation_id="queues_limits_set", request=s.LimitsSerializer,
                   description="Replace every limit of the queue (a field left out or null: no such limit); "
                               "a queue not used yet is created. Audited as queue.limits.",
                   responses={200: s.LimitsViewSerializer, 409: s.ErrorSerializer, 413: s.ErrorSerializer,
                              **DESTRUCTIVE_ERRORS})
    def put(self, request: Request, queue: str) -> Response:
        if not valid_queue_name(queue):
            raise QueueNotFound(f"queue {queue!r} not found", queue=queue)
        if not int(request.META.get("CONTENT_LENGTH") or 0):  # a bare PUT must not lift every limit
            raise ValidationError('send the limits as a JSON object: {} (or DELETE) clears them', field="body")
        data = s.LimitsSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        # A queue not used yet is registered: its limits hold from its first task on.
        return Response(get_engine().limits.set(queue, data.validated_data, actor=actor_for(request), source="api"))

    @extend_schema(operation_id="queues_limits_clear", request=None,
                   description="Remove every limit of the queue. Audited as queue.limits.",
                   responses={200: s.LimitsViewSerializer, **DESTRUCTIVE_ERRORS})
    def delete(self, request: Request, queue: str) -> Response:
        engine = get_engine()
        engine.queues.layout(queue)  # clearing a queue that does not exist must not create it
        return Response(engine.limits.clear(queue, actor=actor_for(request)))


class QueueFlagView(DestructiveMixin, APIView):
    """Pause or resume a queue; `changed` says whether it was in the other state."""

    paused = True
    permission = "pause_queue"

    @extend_schema(request=None, responses={200: s.PauseResultSerializer, **DESTRUCTIVE_ERRORS})
    def post(self, request: Request, queue: str) -> Response:
        engine = get_engine()
        changed = (engine.queues.pause if self.paused else engine.queues.resume)(queue, actor_for(request))
        return Response({**engine.queues.get(queue), "changed": changed})


@extend_schema_view(post=extend_schema(operation_id="queues_pause"))
class QueuePauseView(QueueFlagView):
    paused = True


@extend_schema_view(post=extend_schema(operation_id="queues_resume"))
class QueueResumeView(QueueFlagView):
    paused = False


class QueuePurgeView(DestructiveMixin, APIView):
    permission = "purge_queue"

    @extend_schema(operation_id="queues_purge", request=None,
                   responses={200: s.PurgeResultSerializer, **DESTRUCTIVE_ERRORS})
    def post(self, request: Request, queue: str) -> Response:
        return Response({"queue": queue, "count": get_engine().queues.purge(queue, actor_for(request))})


class QueueDeleteView(DestructiveMixin, APIView):
    permission = "purge_queue"

    @extend_schema(operation_id="queues_delete", request=None,
                   responses={200: s.DeleteResultSerializer, 409: s.ErrorSerializer, **DESTRUCTIVE_ERRORS})
    def post(self, request: Request, queue: str) -> Response:
        get_engine().queues.delete(queue, actor_for(request))
        return Response({"queue": queue, "deleted": True})


# -- dead letters -----------------------------------------------------------------------------

class DlqListView(APIView):
    @extend_schema(operation_id="dlq_list",
                   parameters=[*filters("queue", "type"), *PAGE_PARAMETERS,
                               OpenApiParameter("q", OpenApiTypes.STR, description="text in the error or payload")],
                   responses={200: s.DlqPageSerializer, **ERRORS})
    def get(self, request: Request) -> Response:
        page = get_engine().dlq.list(queue=text_param(request, "queue"), type=text_param(request, "type"),
                                     q=text_param(request, "q"), **page_params(request))
        return page_response(request, page)


class DlqEntryView(APIView):
    @extend_schema(operation_id="dlq_get", responses={200: s.DlqEntrySerializer, **ERRORS})
    def get(self, request: Request, entry_id: str) -> Response:
        return Response(get_engine().dlq.get(entry_id))


class DlqEntryActionView(DestructiveMixin, APIView):
    """Retry or discard one dead letter; 404 when the entry is gone."""

    operation = "retry"

    @extend_schema(request=None, responses={200: s.CountSerializer, **DESTRUCTIVE_ERRORS})
    def post(self, request: Request, entry_id: str) -> Response:
        engine = get_engine()
        engine.dlq.get(entry_id)  # 404 DLQ_ENTRY_NOT_FOUND before anything is audited
        return act_on_dead_letters(self.operation, DlqSelection(ids=(entry_id,)), request)


class DlqBulkView(DestructiveMixin, APIView):
    """Retry or discard every dead letter a body selects; an empty body is refused."""

    operation = "retry"

    @extend_schema(request=s.DlqSelectionSerializer, responses={200: s.CountSerializer, **DESTRUCTIVE_ERRORS})
    def post(self, request: Request) -> Response:
        return act_on_dead_letters(self.operation, DlqSelection.from_body(request.data), request)


def act_on_dead_letters(operation: str, selection: DlqSelection, request: Request) -> Response:
    """Retry or discard the selected dead letters. A retry also says how many it could not find
    and how many it left in the DLQ (task record expired), as `manage.py dlq retry` does."""
    dlq = get_engine().dlq
    if operation == "discard":
        return Response({"count": dlq.discard(selection, actor_for(request))})
    outcome = dlq.retry_outcome(selection, actor_for(request))
    return Response({"count": outcome.retried, "not_found": outcome.not_found, "kept": outcome.kept})


@extend_schema_view(post=extend_schema(operation_id="dlq_retry_one",
                                        responses={200: s.DlqRetryResultSerializer, **DESTRUCTIVE_ERRORS}))
class DlqEntryRetryView(DlqEntryActionView):
    operation = "retry"
    permission = "retry_deadletter"


@extend_schema_view(post=extend_schema(operation_id="dlq_discard_one"))
class DlqEntryDiscardView(DlqEntryActionView):
    operation = "discard"
    permission = "discard_deadletter"


@extend_schema_view(post=extend_schema(operation_id="dlq_retry_bulk", request=s.DlqSelectionSerializer,
                                        responses={200: s.DlqRetryResultSerializer, **DESTRUCTIVE_ERRORS}))
class DlqBulkRetryView(DlqBulkView):
    operation = "retry"
    permission = "retry_deadletter"


@extend_schema_view(post=extend_schema(operation_id="dlq_discard_bulk"))
class DlqBulkDiscardView(DlqBulkView):
    operation = "discard"
    permission = "discard_deadletter"


# -- audit, workers, schedule -----------------------------------------------------------------

class AuditListView(APIView):
    @extend_schema(operation_id="audit_list", parameters=[*filters("action", "actor", "source"), *PAGE_PARAMETERS],
                   responses={200: s.AuditPageSerializer, **ERRORS})
    def get(self, request: Request) -> Response:
        page = get_engine().audit.list(action=text_param(request, "action"), actor=text_param(request, "actor"),
                                       source=text_param(request, "source"), **page_params(request))
        return page_response(request, page)


class WorkerListView(APIView):
    @extend_schema(operation_id="workers_list", responses={200: s.WorkerListSerializer, **ERRORS})
    def get(self, request: Request) -> Response:
        engine = get_engine()
        return Response({"results": engine.workers.list(), "scheduler_leader": engine.workers.leader()})


class ScheduleListView(APIView):
    @extend_schema(operation_id="schedule_list", parameters=PAGE_PARAMETERS,
                   responses={200: s.SchedulePageSerializer, **ERRORS})
    def get(self, request: Request) -> Response:
        return page_response(request, get_engine().schedule.list(**page_params(request)))


# -- periodic tasks ---------------------------------------------------------------------------

class PeriodicListView(ChangingMethodsMixin, APIView):
    permissions = {"POST": "change_periodic"}

    @extend_schema(operation_id="periodic_list", responses={200: s.PeriodicListSerializer, **ERRORS})
    def get(self, request: Request) -> Response:
        return Response({"results": get_engine().periodic.list()})

    @extend_schema(operation_id="periodic_create", request=s.PeriodicCreateSerializer,
                   responses={201: s.PeriodicSerializer, 409: s.ErrorSerializer, 413: s.ErrorSerializer,
                              **DESTRUCTIVE_ERRORS})
    def post(self, request: Request) -> Response:
        data = s.PeriodicCreateSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        spec = PeriodicSpec(**data.validated_data, source="api")
        return Response(get_engine().periodic.create(spec, actor=actor_for(request)), status=status.HTTP_201_CREATED)


class PeriodicDetailView(ChangingMethodsMixin, APIView):
    permissions = {"PATCH": "change_periodic", "DELETE": "change_periodic"}

    @extend_schema(operation_id="periodic_get", responses={200: s.PeriodicSerializer, **ERRORS})
    def get(self, request: Request, name: str) -> Response:
        return Response(get_engine().periodic.get(name))

    @extend_schema(operation_id="periodic_change", request=s.PeriodicChangeSerializer,
                   responses={200: s.PeriodicSerializer, 409: s.ErrorSerializer, 413: s.ErrorSerializer,
                              **DESTRUCTIVE_ERRORS})
    def patch(self, request: Request, name: str) -> Response:
        data = s.PeriodicChangeSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        return Response(get_engine().periodic.update(name, data.validated_data, actor=actor_for(request)))

    @extend_schema(operation_id="periodic_delete", request=None,
                   responses={200: s.PeriodicDeleteResultSerializer, 409: s.ErrorSerializer, **DESTRUCTIVE_ERRORS})
    def delete(self, request: Request, name: str) -> Response:
        get_engine().periodic.delete(name, actor=actor_for(request))
        return Response({"name": name, "deleted": True})


class PeriodicFlagView(DestructiveMixin, APIView):
    """Pause or resume a periodic task; what resume fires for the ticks missed is its `misfire`."""

    paused = True
    permission = "operate_periodic"

    @extend_schema(request=None, responses={200: s.PeriodicSerializer, 409: s.ErrorSerializer, **DESTRUCTIVE_ERRORS})
    def post(self, request: Request, name: str) -> Response:
        periodic = get_engine().periodic
        return Response((periodic.pause if self.paused else periodic.resume)(name, actor=actor_for(request)))


@extend_schema_view(post=extend_schema(operation_id="periodic_pause"))
class PeriodicPauseView(PeriodicFlagView):
    paused = True


@extend_schema_view(post=extend_schema(operation_id="periodic_resume"))
class PeriodicResumeView(PeriodicFlagView):
    paused = False


class PeriodicTriggerView(DestructiveMixin, APIView):
    """Fire one run now, outside the schedule: the next tick stays where it was."""

    permission = "operate_periodic"

    @extend_schema(operation_id="periodic_trigger", request=None,
                   responses={201: s.PeriodicTriggerResultSerializer, 429: s.ErrorSerializer, **DESTRUCTIVE_ERRORS})
    def post(self, request: Request, name: str) -> Response:
        fired = get_engine().periodic.trigger(name, actor=actor_for(request))
        return Response({"name": name, **fired}, status=status.HTTP_201_CREATED)


# -- probes and fallbacks ---------------------------------------------------------------------

def _method_not_allowed(request: HttpRequest) -> JsonResponse:
    response = JsonResponse(envelope("METHOD_NOT_ALLOWED", f'Method "{request.method}" not allowed.', request),
                            status=405)
    response["Allow"] = "GET, HEAD"
    return response


# Probes are csrf_exempt so that a POST gets this 405, not the CSRF middleware's HTML 403.
@csrf_exempt
def health(request: HttpRequest) -> JsonResponse:
    """Liveness: 200 while the process serves requests."""
    if request.method not in ("GET", "HEAD"):
        return _method_not_allowed(request)
    return JsonResponse({"status": "ok"})


# How long the probe's key outlives the probe: long enough to be harmless, short enough that
# it never piles up (every replica writes the same key).
READY_PROBE_TTL_MS = 5000


def _probe_write(engine: Engine) -> None:
    """Write one short-lived key, as a submit would write: Redis answers PING while it refuses
    every write (NOREPLICAS under min-replicas-to-write, OOM at maxmemory, READONLY from a
    demoted master, MISCONF on a full disk), and a replica in that state must leave rotation."""
    # On a Redis Cluster it lands on the one master that owns its slot.
    engine.client.set(engine.keys.ready_probe(), "1", px=READY_PROBE_TTL_MS)


@csrf_exempt
def ready(request: HttpRequest) -> JsonResponse:
    """Readiness: 503 REDIS_UNAVAILABLE when Redis does not answer within the client timeout (or
    still loads its dataset, or the write reached a read-only replica), REDIS_WRITE_FAILED while
    it refuses writes; a warning in the body when its maxmemory-policy may evict dtq's keys."""
    if request.method not in ("GET", "HEAD"):
        return _method_not_allowed(request)
    engine = get_engine()
    try:
        with redis_trouble():  # the write's refusal maps as a submit's does: the same code and status
            _probe_write(engine)  # one round trip, in place of a PING: its reply says Redis answers
            policy = engine.eviction_policy()
    except RedisTrouble as exc:
        return JsonResponse(error_body(exc, request_id_of(request), state=True), status=exc.http_status)
    problem = eviction_problem(policy)
    if problem is None:
        return JsonResponse({"status": "ready"})
    # Still ready (it serves, and every replica would drop out of rotation at once over a setting),
    # but said on every probe: docs/api.md, docs/deployment.md.
    return JsonResponse({"status": "ready", "warnings": [{"code": EVICTION_POLICY, "message": problem,
                                                          "maxmemory_policy": policy}]})


# csrf_exempt: it changes nothing, so a POST/PUT/DELETE gets this 404, not CSRF's HTML 403.
@csrf_exempt
def api_not_found(request: HttpRequest, *args: Any, **kwargs: Any) -> JsonResponse:
    """Unknown routes under /api/ get the envelope for every method, DEBUG on or off."""
    return JsonResponse(envelope("NOT_FOUND", f"no route for {request.path}", request), status=404)
