"""/api/v1/workers/<id>: one worker, and telling it to quiet or stop (thin views over engine.workers)."""

from __future__ import annotations

from rest_framework.request import Request
from rest_framework.response import Response

from dtq_core.conf import get_engine

from . import serializers as s
from .auth import actor_for
from .base import APIView, extend_schema
from .permissions import DestructiveMixin
from .views import DESTRUCTIVE_ERRORS, ERRORS


class WorkerDetailView(APIView):
    """One worker: its heartbeat, resources (memory, CPU), state and the tasks it runs now."""

    @extend_schema(operation_id="workers_get", responses={200: s.WorkerDetailSerializer, **ERRORS})
    def get(self, request: Request, worker_id: str) -> Response:
        return Response(get_engine().workers.get(worker_id))


class WorkerControlView(DestructiveMixin, APIView):
    permission = "control_worker"
    control = ""

    def post(self, request: Request, worker_id: str) -> Response:
        engine = get_engine()
        act = engine.workers.quiet if self.control == "quiet" else engine.workers.stop
        changed = act(worker_id, actor_for(request))
        return Response({"worker_id": worker_id, "control": self.control, "changed": changed}, status=202)


class WorkerQuietView(WorkerControlView):
    """Tell a worker to take no more tasks: it finishes what it runs and stays up (state quiet),
    from its next heartbeat. 202; audited as worker.quiet."""

    control = "quiet"

    @extend_schema(operation_id="workers_quiet", request=None,
                   responses={202: s.WorkerControlSerializer, **DESTRUCTIVE_ERRORS})
    def post(self, request: Request, worker_id: str) -> Response:
        return super().post(request, worker_id)


class WorkerStopView(WorkerControlView):
    """Tell a worker to drain and exit, as SIGTERM does, from its next heartbeat. 202; audited
    as worker.stop."""

    control = "stop"

    @extend_schema(operation_id="workers_stop", request=None,
                   responses={202: s.WorkerControlSerializer, **DESTRUCTIVE_ERRORS})
    def post(self, request: Request, worker_id: str) -> Response:
        return super().post(request, worker_id)
